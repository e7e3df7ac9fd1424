package natsleasebus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
)

// Publish delays are JetStream message schedules (nats-server 2.12 and
// later): a delayed message is a schedule ("Nats-Schedule: @at T") in a
// stream of its own, which the server fires at T into a subject of that
// stream; the topics' stream sources that subject, turned back into the
// topic's. The topics' stream cannot hold the schedules itself: the
// server refuses message schedules in a stream that discards new messages,
// and under interest retention it would not keep a schedule no consumer
// filters on.

// dueRetention is how long a delayed message, once it is due, stays in
// the schedules' stream for the topics' stream to source it (its Nats-TTL,
// set through Nats-Schedule-TTL). Sourcing takes moments; only if the
// topics' stream is unreachable for longer than this are the delayed
// messages that came due meanwhile lost.
const dueRetention = 24 * time.Hour

// serverDuplicateWindow is the duplicate window the server gives a stream
// without sources that names none.
const serverDuplicateWindow = 2 * time.Minute

// Headers of JetStream's message schedules.
const (
	hdrSchedule       = "Nats-Schedule"
	hdrScheduleTarget = "Nats-Schedule-Target"
	hdrScheduleTTL    = "Nats-Schedule-TTL"
)

// WithDelays makes the bus take publish delays (WithDelay): Open creates
// (or binds to) a third stream, the bus's stream name with the suffix
// "_SCHED" (subjects PREFIX.delay.> for the schedules and PREFIX.due.> for
// the messages that came due; limits retention, message schedules and
// per-message TTL allowed; the storage, replicas and placement the
// options name, else those of an existing topics' stream), and the
// topics' stream sources PREFIX.due.> from it as
// PREFIX.topic.>. An existing topics' stream without that source is
// refused with a *ConfigMismatchError (setting "Sources"), unless
// WithUpdateStreams adds it. A topics' stream Open creates with it has a
// duplicate window of 2 minutes unless WithDedupWindow names one (the
// server gives a stream with sources none of its own). It needs
// nats-server 2.12 or later: on an older server Open fails, naming the
// setting the server does not keep.
func WithDelays() Option { return Option{func(c *busConfig) { c.delays = true }} }

// schedName is the name of the schedules' stream.
func (c *busConfig) schedName() string { return c.stream + "_SCHED" }

// dueSource is the topics' stream's source of the messages that came due.
func (c *busConfig) dueSource() js.StreamSource {
	return js.StreamSource{
		Name:              c.schedName(),
		SubjectTransforms: []js.SubjectTransformConfig{{Source: c.prefix + ".due.>", Destination: c.prefix + ".topic.>"}},
	}
}

// sourceSetting requires the topics' stream to source the due messages
// from the schedules' stream; an update adds the source, keeping others.
var sourceSetting = setting[js.StreamConfig]{
	name: "Sources", option: "WithDelays",
	equal: func(h, w *js.StreamConfig) bool {
		return !slices.ContainsFunc(w.Sources, func(ws *js.StreamSource) bool {
			return !slices.ContainsFunc(h.Sources, func(hs *js.StreamSource) bool { return sameSource(hs, ws) })
		})
	},
	show: func(c *js.StreamConfig) string {
		if len(c.Sources) == 0 {
			return "none"
		}
		out := make([]string, len(c.Sources))
		for i, s := range c.Sources {
			out[i] = s.Name
			for _, t := range s.SubjectTransforms {
				out[i] += fmt.Sprintf(" %s→%s", t.Source, t.Destination)
			}
		}
		return fmt.Sprintf("%q", out)
	},
	copy: func(d, s *js.StreamConfig) {
		srcs := slices.Clone(d.Sources)
		for _, ss := range s.Sources {
			if !slices.ContainsFunc(srcs, func(ds *js.StreamSource) bool { return sameSource(ds, ss) }) {
				srcs = append(srcs, ss)
			}
		}
		d.Sources = srcs
	},
}

func sameSource(a, b *js.StreamSource) bool {
	return a.Name == b.Name && a.FilterSubject == b.FilterSubject && a.External == nil && b.External == nil &&
		slices.Equal(a.SubjectTransforms, b.SubjectTransforms)
}

// schedulesSetting requires the schedules' stream to allow what a
// delayed message needs: message schedules, and the TTL of a due one.
var schedulesSetting = setting[js.StreamConfig]{
	name: "AllowMsgSchedules, AllowMsgTTL", option: "required",
	equal: func(h, w *js.StreamConfig) bool {
		return h.AllowMsgSchedules == w.AllowMsgSchedules && h.AllowMsgTTL == w.AllowMsgTTL
	},
	show: func(c *js.StreamConfig) string { return fmt.Sprintf("%v, %v", c.AllowMsgSchedules, c.AllowMsgTTL) },
	copy: func(d, s *js.StreamConfig) { d.AllowMsgSchedules, d.AllowMsgTTL = s.AllowMsgSchedules, s.AllowMsgTTL },
}

// ensureSchedules returns the schedules' stream, as ensureStream does. A
// server that does not know message schedules creates the stream without
// them: that is refused too.
func ensureSchedules(ctx context.Context, j js.JetStream, cfg *busConfig) (js.Stream, error) {
	if topics, err := j.Stream(ctx, cfg.stream); err == nil {
		// Missing, it is made like the topics' stream that exists, in
		// what the options do not name.
		have := topics.CachedInfo().Config
		named := func(n string) bool {
			return slices.ContainsFunc(cfg.schedSet, func(s setting[js.StreamConfig]) bool { return s.name == n })
		}
		if !named("Storage") {
			cfg.sched.Storage = have.Storage
		}
		if !named("Replicas") {
			cfg.sched.Replicas = have.Replicas
		}
		if !named("Placement") {
			cfg.sched.Placement = have.Placement
		}
	} else if !errors.Is(err, js.ErrStreamNotFound) {
		return nil, fmt.Errorf("stream %s: %w", cfg.stream, err)
	}
	cfg.sched.Name = cfg.schedName()
	cfg.sched.Subjects = []string{cfg.prefix + ".delay.>", cfg.prefix + ".due.>"}
	needs := append(settings[js.StreamConfig]{subjectsSetting, schedulesSetting}, cfg.schedSet...)
	st, err := ensureStream(ctx, j, cfg.sched, needs, cfg.update)
	if err != nil {
		return nil, err
	}
	have := st.CachedInfo().Config
	if diffs := needs.diff(&have, &cfg.sched); len(diffs) > 0 { // created by a server that dropped them
		return nil, &ConfigMismatchError{Kind: "stream", Name: cfg.sched.Name, Diffs: diffs}
	}
	return st, nil
}

// schedule turns m, a message to topic, into the schedule of a message
// due at due: it goes to the schedules' stream, which fires it into the
// topic when due.
func (b *Bus) schedule(m *nats.Msg, topic string, due time.Time) {
	m.Subject = b.cfg.prefix + ".delay." + m.Header.Get(headerID)
	m.Header.Set(hdrSchedule, "@at "+due.UTC().Format(time.RFC3339Nano))
	m.Header.Set(hdrScheduleTarget, b.cfg.prefix+".due."+topic)
	m.Header.Set(hdrScheduleTTL, dueRetention.String())
}
