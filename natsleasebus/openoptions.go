package natsleasebus

import (
	"fmt"
	"slices"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
)

type busConfig struct {
	stream string
	prefix string
	// What Open creates when a stream is missing; the fields the options
	// set explicitly (topicSet, dlqSet, schedSet) are also compared with
	// an existing stream's.
	topic, dlq, sched          js.StreamConfig
	topicSet, dlqSet, schedSet settings[js.StreamConfig]
	delays                     bool // WithDelays: the schedules' stream, sourced by the topics'
	update                     bool
	err                        error
}

// errZeroOption refuses an option not made by a With function.
var errZeroOption = backend.Invalid("zero option: make options with the With functions")

func (c *busConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// all sets a setting on every stream of the bus (the schedules' too,
// with WithDelays).
func (c *busConfig) all(s setting[js.StreamConfig], set func(*js.StreamConfig)) {
	set(&c.topic)
	set(&c.dlq)
	set(&c.sched)
	c.topicSet.add(s)
	c.dlqSet.add(s)
	c.schedSet.add(s)
}

// Option configures Open. Options that set a stream setting (storage,
// replicas, placement, limits) are explicit: Open creates a missing stream
// with them, and refuses an existing stream that differs
// (ConfigMismatchError) unless WithUpdateStreams is given. A setting no
// option names is taken from the server as it is.
type Option struct{ apply func(*busConfig) }

// WithStream names the stream of the topics (default "LEASEBUS"); the
// dead letters' stream is named the same with the suffix "_DLQ".
func WithStream(name string) Option {
	return Option{func(c *busConfig) {
		if name == "" {
			c.fail(backend.Invalid("WithStream: empty name"))
		}
		c.stream = name
	}}
}

// WithSubjectPrefix sets the subject prefix (default "leasebus"):
// topic T is the subject PREFIX.topic.T, the messages for its subscription
// S alone (redriven dead letters) go to PREFIX.sub.T_S, and its dead
// letters to PREFIX.dlq.T.S.
func WithSubjectPrefix(p string) Option {
	return Option{func(c *busConfig) {
		if p == "" {
			c.fail(backend.Invalid("WithSubjectPrefix: empty prefix"))
		}
		c.prefix = p
	}}
}

// WithMemoryStorage keeps the bus's streams in memory rather than in
// files (the default for a stream Open creates): faster, and lost when the
// server stops. JetStream cannot change an existing stream's storage.
func WithMemoryStorage() Option {
	return Option{func(c *busConfig) {
		s := field("Storage", "WithMemoryStorage", func(c *js.StreamConfig) *js.StorageType { return &c.Storage })
		s.fixed = true
		c.all(s, func(sc *js.StreamConfig) { sc.Storage = js.MemoryStorage })
	}}
}

// WithReplicas sets the bus's streams' replica count in a cluster
// (default for a stream Open creates: 1).
func WithReplicas(n int) Option {
	return Option{func(c *busConfig) {
		if n < 1 {
			c.fail(backend.Invalid("WithReplicas: %d, must be >= 1", n))
		}
		c.all(field("Replicas", "WithReplicas", func(c *js.StreamConfig) *int { return &c.Replicas }),
			func(sc *js.StreamConfig) { sc.Replicas = n })
	}}
}

// WithPlacement places the bus's streams in a cluster, on servers with the
// given tags (default: wherever the server puts them).
func WithPlacement(cluster string, tags ...string) Option {
	return Option{func(c *busConfig) {
		p := js.Placement{Cluster: cluster, Tags: slices.Clone(tags)}
		s := setting[js.StreamConfig]{
			name: "Placement", option: "WithPlacement",
			equal: func(h, w *js.StreamConfig) bool { return samePlacement(h.Placement, w.Placement) },
			show: func(c *js.StreamConfig) string {
				if c.Placement == nil {
					return "none"
				}
				return fmt.Sprintf("cluster %q tags %q", c.Placement.Cluster, c.Placement.Tags)
			},
			copy: func(d, s *js.StreamConfig) { d.Placement = s.Placement },
		}
		c.all(s, func(sc *js.StreamConfig) { pp := p; sc.Placement = &pp })
	}}
}

func samePlacement(a, b *js.Placement) bool {
	if a == nil || b == nil {
		return (a == nil || a.Cluster == "" && len(a.Tags) == 0) && (b == nil || b.Cluster == "" && len(b.Tags) == 0)
	}
	at, bt := slices.Clone(a.Tags), slices.Clone(b.Tags)
	slices.Sort(at)
	slices.Sort(bt)
	return a.Cluster == b.Cluster && slices.Equal(at, bt)
}

// WithMaxAge sets how long the topics' stream keeps a message, acked or
// not (its MaxAge; default for a stream Open creates: 0, no limit). A
// message older than that is deleted unprocessed: a limit for an operator
// to choose, not a TTL.
func WithMaxAge(d time.Duration) Option {
	return Option{func(c *busConfig) {
		if d < 0 {
			c.fail(backend.Invalid("WithMaxAge: %v, must be >= 0 (0: no limit)", d))
		}
		c.topic.MaxAge = d
		c.topicSet.add(field("MaxAge", "WithMaxAge", func(c *js.StreamConfig) *time.Duration { return &c.MaxAge }))
	}}
}

// WithMaxBytes caps the topics' stream's size in bytes (its MaxBytes;
// default for a stream Open creates: -1, no limit). A stream Open creates
// discards new messages when full: Publish fails rather than a queued
// message being dropped.
func WithMaxBytes(n int64) Option {
	return Option{func(c *busConfig) {
		if n < 1 && n != -1 {
			c.fail(backend.Invalid("WithMaxBytes: %d, must be >= 1 or -1 (no limit)", n))
		}
		c.topic.MaxBytes = n
		c.topicSet.add(field("MaxBytes", "WithMaxBytes", func(c *js.StreamConfig) *int64 { return &c.MaxBytes }))
	}}
}

// WithMaxMsgs caps the messages the topics' stream holds (its MaxMsgs;
// default for a stream Open creates: -1, no limit). A stream Open creates
// discards new messages when full: Publish fails.
func WithMaxMsgs(n int64) Option {
	return Option{func(c *busConfig) {
		if n < 1 && n != -1 {
			c.fail(backend.Invalid("WithMaxMsgs: %d, must be >= 1 or -1 (no limit)", n))
		}
		c.topic.MaxMsgs = n
		c.topicSet.add(field("MaxMsgs", "WithMaxMsgs", func(c *js.StreamConfig) *int64 { return &c.MaxMsgs }))
	}}
}

// WithDedupWindow sets the topics' stream's duplicate window, within
// which a second Publish with one WithDedupID is dropped (its Duplicates;
// default for a stream Open creates: the server's, 2 minutes).
func WithDedupWindow(d time.Duration) Option {
	return Option{func(c *busConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithDedupWindow: %v, must be > 0", d))
		}
		c.topic.Duplicates = d
		c.topicSet.add(field("Duplicates", "WithDedupWindow", func(c *js.StreamConfig) *time.Duration { return &c.Duplicates }))
	}}
}

// WithDeadLetterLimits bounds the dead letters' stream; the fields set
// are explicit options, compared with an existing stream's (see Option).
func WithDeadLetterLimits(l DeadLetterLimits) Option {
	return Option{func(c *busConfig) {
		count := func(name, setting string, v int64, dst *int64, p func(*js.StreamConfig) *int64) {
			switch {
			case v == 0:
				return
			case v < -1:
				c.fail(backend.Invalid("WithDeadLetterLimits: %s %d, must be >= 1 or -1 (no limit)", name, v))
			}
			*dst = v
			c.dlqSet.add(field(setting, "WithDeadLetterLimits", p))
		}
		count("PerSubscription", "MaxMsgsPerSubject", l.PerSubscription, &c.dlq.MaxMsgsPerSubject, func(c *js.StreamConfig) *int64 { return &c.MaxMsgsPerSubject })
		count("MaxMsgs", "MaxMsgs", l.MaxMsgs, &c.dlq.MaxMsgs, func(c *js.StreamConfig) *int64 { return &c.MaxMsgs })
		count("MaxBytes", "MaxBytes", l.MaxBytes, &c.dlq.MaxBytes, func(c *js.StreamConfig) *int64 { return &c.MaxBytes })
		switch {
		case l.MaxAge == 0:
		case l.MaxAge < -1:
			c.fail(backend.Invalid("WithDeadLetterLimits: MaxAge %v, must be > 0 or -1 (no limit)", l.MaxAge))
		default:
			c.dlq.MaxAge = max(l.MaxAge, 0)
			c.dlqSet.add(field("MaxAge", "WithDeadLetterLimits", func(c *js.StreamConfig) *time.Duration { return &c.MaxAge }))
		}
	}}
}

// WithUpdateStreams lets Open change an existing stream whose settings
// differ from the explicit options, instead of refusing: the settings the
// options name are set, every other setting stays as the server holds it.
// Storage cannot be changed in place.
func WithUpdateStreams() Option { return Option{func(c *busConfig) { c.update = true }} }
