package natsleasebus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Header names that leasebus sets on messages and dead letters (the
// README's wire format lists them). A dead letter carries the broker's
// dead-letter headers (backend.HeaderReason and the others), so one
// consumer reads both; these are JetStream's own.
const (
	headerID          = "Leasebus-Id"           // the message's uuid, set by Publish
	headerStreamSeq   = "Leasebus-Stream-Seq"   // dead letters: the source stream sequence
	headerPublishedAt = "Leasebus-Published-At" // dead letters: the source's publish time, RFC 3339
)

// legacyHeaders are the names dead letters had before they took the
// broker's: a dead letter written then still reads back.
var legacyHeaders = map[string]string{
	backend.HeaderReason:       "Leasebus-Reason",
	backend.HeaderAttempts:     "Leasebus-Attempts",
	backend.HeaderLastError:    "Leasebus-Last-Error",
	backend.HeaderSubscription: "Leasebus-Subscription",
	backend.HeaderTopic:        "Leasebus-Topic",
}

// Defaults of the Open options.
const (
	defaultStream        = "LEASEBUS"
	defaultSubjectPrefix = "leasebus"
	// defaultDeadLetterDuplicates is the duplicate window of a dead-letter
	// stream Open creates: a dead letter copied twice within it (a retry,
	// a redelivery racing a Term) is stored once.
	defaultDeadLetterDuplicates = 10 * time.Minute
	// defaultDeadLettersPerSubscription is how many dead letters a
	// dead-letter stream Open creates keeps per subscription (its
	// MaxMsgsPerSubject): when a subscription has that many, its oldest is
	// dropped. The in-memory broker keeps 10,000 in all.
	defaultDeadLettersPerSubscription = 10_000
)

// DeadLetterLimits bound the dead letters' stream (WithDeadLetterLimits).
// A zero field is not named: a stream Open creates takes the default, an
// existing one keeps its own. -1 is explicitly no limit. When a limit is
// reached the oldest dead letters are dropped (JetStream does not count
// them).
type DeadLetterLimits struct {
	PerSubscription int64         // dead letters kept per subscription (MaxMsgsPerSubject; default 10,000)
	MaxMsgs         int64         // dead letters kept in all (MaxMsgs; default no limit)
	MaxBytes        int64         // bytes kept in all (MaxBytes; default no limit)
	MaxAge          time.Duration // how long a dead letter is kept (MaxAge; default no limit)
}

// Bus is leasebus on one JetStream stream: topics are subjects in it, and
// dead letters go to a second stream beside it. Its methods are safe for
// concurrent use. It does not own the connection.
type Bus struct {
	js          js.JetStream
	stream      js.Stream // the topics' stream
	dlStream    js.Stream // the dead letters' stream
	schedStream js.Stream // the schedules' stream (WithDelays); nil without
	cfg         busConfig
	conn        *connWatch // ends a settling call's try when the client reconnects
}

// Open opens the bus on nc's JetStream (the account's default API; for a
// JetStream domain or API prefix, see OpenJetStream).
func Open(ctx context.Context, nc *nats.Conn, opts ...Option) (*Bus, error) {
	if nc == nil {
		return nil, backend.Invalid("natsleasebus.Open: nil connection")
	}
	j, err := js.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsleasebus.Open: %w", err)
	}
	return OpenJetStream(ctx, j, opts...)
}

// OpenJetStream opens the bus on j: a JetStream context the caller made,
// for example with js.NewWithDomain (a leaf node's hub) or
// js.NewWithAPIPrefix (another account's JetStream).
//
// A stream that exists is bound to as it is: Open never weakens it. A
// stream that is missing is created: the topics' stream with interest
// retention (a message is kept until every subscription of its topic has
// acked or terminated it, and one published to a topic with no
// subscription is dropped, as the in-memory broker does) and discard-new
// limits; the dead letters' stream with limits retention. When an explicit
// option disagrees with an existing stream, or the stream lacks what
// leasebus needs (its subjects, interest retention for the topics), Open
// returns a *ConfigMismatchError and changes nothing, unless
// WithUpdateStreams is given.
//
// A server older than 2.10 (2.12 with WithDelays) is refused with an
// error matching ErrUnsupported that names the version it needs. The bus
// watches the connection's status (one goroutine, until the connection
// closes) so that a settling call lost with a dropped connection is tried
// again as soon as the client reconnects.
func OpenJetStream(ctx context.Context, j js.JetStream, opts ...Option) (*Bus, error) {
	if j == nil {
		return nil, backend.Invalid("natsleasebus.OpenJetStream: nil JetStream")
	}
	cfg := busConfig{
		stream: defaultStream, prefix: defaultSubjectPrefix,
		topic: js.StreamConfig{
			Retention: js.InterestPolicy, Discard: js.DiscardNew, Storage: js.FileStorage, Replicas: 1,
			MaxBytes: -1, MaxMsgs: -1,
		},
		dlq: js.StreamConfig{
			Retention: js.LimitsPolicy, Discard: js.DiscardOld, Storage: js.FileStorage, Replicas: 1,
			MaxBytes: -1, MaxMsgs: -1, Duplicates: defaultDeadLetterDuplicates,
			MaxMsgsPerSubject: defaultDeadLettersPerSubscription,
		},
		sched: js.StreamConfig{
			Retention: js.LimitsPolicy, Discard: js.DiscardOld, Storage: js.FileStorage, Replicas: 1,
			MaxBytes: -1, MaxMsgs: -1, AllowMsgSchedules: true, AllowMsgTTL: true, AllowRollup: true,
		},
	}
	for _, o := range opts {
		if o.apply == nil {
			cfg.fail(errZeroOption)
			continue
		}
		o.apply(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if err := checkServer(j.Conn(), cfg.delays); err != nil {
		return nil, fmt.Errorf("natsleasebus.Open: %w", err)
	}
	cfg.topic.Name, cfg.topic.Subjects = cfg.stream, []string{cfg.prefix + ".topic.>", cfg.prefix + ".sub.>"}
	cfg.dlq.Name, cfg.dlq.Subjects = cfg.stream+"_DLQ", []string{cfg.prefix + ".dlq.>"}
	topicNeeds := append(settings[js.StreamConfig]{subjectsSetting,
		field("Retention", "required", func(c *js.StreamConfig) *js.RetentionPolicy { return &c.Retention })}, cfg.topicSet...)
	dlqNeeds := append(settings[js.StreamConfig]{subjectsSetting}, cfg.dlqSet...)
	var (
		sched js.Stream
		err   error
	)
	if cfg.delays {
		// The schedules' stream first: the topics' stream sources it.
		if sched, err = ensureSchedules(ctx, j, &cfg); err != nil {
			return nil, fmt.Errorf("natsleasebus.Open: %w", err)
		}
		src := cfg.dueSource()
		cfg.topic.Sources = []*js.StreamSource{&src}
		if cfg.topic.Duplicates == 0 {
			// The server gives a stream with sources no duplicate window
			// of its own; Release and Redrive rely on one.
			cfg.topic.Duplicates = serverDuplicateWindow
		}
		topicNeeds = append(topicNeeds, sourceSetting)
	}
	st, err := ensureStream(ctx, j, cfg.topic, topicNeeds, cfg.update)
	if err != nil {
		return nil, fmt.Errorf("natsleasebus.Open: %w", err)
	}
	dl, err := ensureStream(ctx, j, cfg.dlq, dlqNeeds, cfg.update)
	if err != nil {
		return nil, fmt.Errorf("natsleasebus.Open: %w", err)
	}
	return &Bus{js: j, stream: st, dlStream: dl, schedStream: sched, cfg: cfg, conn: watchConn(j.Conn())}, nil
}

// subjectsSetting requires an existing stream to take the subjects
// leasebus publishes to; an update adds those it lacks.
var subjectsSetting = setting[js.StreamConfig]{
	name: "Subjects", option: "required",
	equal: func(h, w *js.StreamConfig) bool {
		return !slices.ContainsFunc(w.Subjects, func(s string) bool { return !covered(h.Subjects, s) })
	},
	show: func(c *js.StreamConfig) string { return fmt.Sprintf("%q", c.Subjects) },
	copy: func(d, s *js.StreamConfig) {
		subs := slices.Clone(d.Subjects)
		for _, x := range s.Subjects {
			if !covered(subs, x) {
				subs = append(subs, x)
			}
		}
		d.Subjects = subs
	},
}

// covered reports whether subject (which may hold wildcards) is within one
// of the patterns.
func covered(patterns []string, subject string) bool {
	want := strings.Split(subject, ".")
	for _, p := range patterns {
		if matchTokens(strings.Split(p, "."), want) {
			return true
		}
	}
	return false
}

// matchTokens reports whether every subject that pattern want matches is
// matched by pattern have.
func matchTokens(have, want []string) bool {
	for i, h := range have {
		if h == ">" {
			return i < len(want)
		}
		if i >= len(want) || want[i] == ">" {
			return false
		}
		if h != "*" && (h != want[i] || want[i] == "*") {
			return false
		}
	}
	return len(have) == len(want)
}

// JetStream returns the JetStream context the bus uses.
func (b *Bus) JetStream() js.JetStream { return b.js }

// userHeaders returns h less the headers of NATS and leasebus.
func userHeaders(h nats.Header) queue.Headers {
	if len(h) == 0 || len(h) == 1 && h.Get(headerID) != "" {
		return queue.Headers{} // only leasebus's own
	}
	m := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) == 0 || k == headerID || isReserved(k) {
			continue
		}
		m[k] = vs[0]
	}
	return queue.NewHeaders(m)
}

func isReserved(k string) bool {
	switch k {
	case backend.HeaderReason, backend.HeaderAttempts, backend.HeaderLastError, backend.HeaderSubscription, backend.HeaderTopic, headerStreamSeq, headerPublishedAt, headerRedrivenFrom, headerAttemptsSpent, headerTTL,
		"Leasebus-Reason", "Leasebus-Attempts", "Leasebus-Last-Error", "Leasebus-Subscription", "Leasebus-Topic":
		return true
	}
	return len(k) >= 5 && k[:5] == "Nats-"
}

// reasonOf reads a dead letter's reason; 0 for a word it does not know.
func reasonOf(s string) queue.Reason {
	r, _ := queue.ParseReason(s)
	return r
}

// slice returns how long one fetch may wait: the poll slice, less if ctx
// ends sooner; ctx's error if it has ended.
func slice(ctx context.Context, d time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		d = min(d, left)
	}
	return max(d, time.Millisecond), nil
}
