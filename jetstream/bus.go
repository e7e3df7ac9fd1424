package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Header names that leasebus sets on messages and dead letters. Those a
// dead letter shares with the broker's dead-letter topics are the broker's
// names, so one consumer reads both.
const (
	HeaderID           = "Leasebus-Id"              // the message's uuid, set by Publish
	HeaderReason       = backend.HeaderReason       // dead letters: queue.Reason.String()
	HeaderAttempts     = backend.HeaderAttempts     // dead letters: deliveries spent
	HeaderLastError    = backend.HeaderLastError    // dead letters: the last failure
	HeaderSubscription = backend.HeaderSubscription // dead letters: the subscription's name
	HeaderTopic        = backend.HeaderTopic        // dead letters: the source topic
	HeaderStreamSeq    = "Leasebus-Stream-Seq"      // dead letters: the source stream sequence
	HeaderPublishedAt  = "Leasebus-Published-At"    // dead letters: the source's publish time, RFC 3339
)

// legacyHeaders are the names dead letters had before they took the
// broker's: a dead letter written then still reads back.
var legacyHeaders = map[string]string{
	HeaderReason:       "Leasebus-Reason",
	HeaderAttempts:     "Leasebus-Attempts",
	HeaderLastError:    "Leasebus-Last-Error",
	HeaderSubscription: "Leasebus-Subscription",
	HeaderTopic:        "Leasebus-Topic",
}

// Defaults of the Open options.
const (
	DefaultStream        = "LEASEBUS"
	DefaultSubjectPrefix = "leasebus"
	// DefaultDeadLetterDuplicates is the duplicate window of a dead-letter
	// stream Open creates: a dead letter copied twice within it (a retry,
	// a redelivery racing a Term) is stored once.
	DefaultDeadLetterDuplicates = 10 * time.Minute
	// DefaultDeadLettersPerSubscription is how many dead letters a
	// dead-letter stream Open creates keeps per subscription (its
	// MaxMsgsPerSubject): when a subscription has that many, its oldest is
	// dropped. The in-memory broker keeps 10,000 in all.
	DefaultDeadLettersPerSubscription = 10_000
)

// DeadLetterLimits bound the dead letters' stream (WithDeadLetterLimits).
// A zero field is not named: a stream Open creates takes the default, an
// existing one keeps its own. -1 is explicitly no limit. When a limit is
// reached the oldest dead letters are dropped (JetStream does not count
// them).
type DeadLetterLimits struct {
	PerSubscription int64         // dead letters kept per subscription (MaxMsgsPerSubject; default DefaultDeadLettersPerSubscription)
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
}

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
type Option func(*busConfig)

// WithStream names the stream of the topics (default DefaultStream); the
// dead letters' stream is named the same with the suffix "_DLQ".
func WithStream(name string) Option {
	return func(c *busConfig) {
		if name == "" {
			c.fail(backend.Invalid("WithStream: empty name"))
		}
		c.stream = name
	}
}

// WithSubjectPrefix sets the subject prefix (default DefaultSubjectPrefix):
// topic T is the subject PREFIX.topic.T, the messages for its subscription
// S alone (redriven dead letters) go to PREFIX.sub.T_S, and its dead
// letters to PREFIX.dlq.T.S.
func WithSubjectPrefix(p string) Option {
	return func(c *busConfig) {
		if p == "" {
			c.fail(backend.Invalid("WithSubjectPrefix: empty prefix"))
		}
		c.prefix = p
	}
}

// WithMemoryStorage keeps the bus's streams in memory rather than in
// files (the default for a stream Open creates): faster, and lost when the
// server stops. JetStream cannot change an existing stream's storage.
func WithMemoryStorage() Option { return WithStorage(js.MemoryStorage) }

// WithStorage sets the bus's streams' storage (default for a stream Open
// creates: js.FileStorage). JetStream cannot change an existing stream's
// storage.
func WithStorage(st js.StorageType) Option {
	return func(c *busConfig) {
		s := field("Storage", "WithStorage", func(c *js.StreamConfig) *js.StorageType { return &c.Storage })
		s.fixed = true
		c.all(s, func(sc *js.StreamConfig) { sc.Storage = st })
	}
}

// WithReplicas sets the bus's streams' replica count in a cluster
// (default for a stream Open creates: 1).
func WithReplicas(n int) Option {
	return func(c *busConfig) {
		if n < 1 {
			c.fail(backend.Invalid("WithReplicas: %d, must be >= 1", n))
		}
		c.all(field("Replicas", "WithReplicas", func(c *js.StreamConfig) *int { return &c.Replicas }),
			func(sc *js.StreamConfig) { sc.Replicas = n })
	}
}

// WithPlacement places the bus's streams in a cluster, on servers with the
// given tags (default: wherever the server puts them).
func WithPlacement(cluster string, tags ...string) Option {
	return func(c *busConfig) {
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
	}
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
	return func(c *busConfig) {
		if d < 0 {
			c.fail(backend.Invalid("WithMaxAge: %v, must be >= 0 (0: no limit)", d))
		}
		c.topic.MaxAge = d
		c.topicSet.add(field("MaxAge", "WithMaxAge", func(c *js.StreamConfig) *time.Duration { return &c.MaxAge }))
	}
}

// WithMaxBytes caps the topics' stream's size in bytes (its MaxBytes;
// default for a stream Open creates: -1, no limit). A stream Open creates
// discards new messages when full: Publish fails rather than a queued
// message being dropped.
func WithMaxBytes(n int64) Option {
	return func(c *busConfig) {
		if n < 1 && n != -1 {
			c.fail(backend.Invalid("WithMaxBytes: %d, must be >= 1 or -1 (no limit)", n))
		}
		c.topic.MaxBytes = n
		c.topicSet.add(field("MaxBytes", "WithMaxBytes", func(c *js.StreamConfig) *int64 { return &c.MaxBytes }))
	}
}

// WithMaxMsgs caps the messages the topics' stream holds (its MaxMsgs;
// default for a stream Open creates: -1, no limit). A stream Open creates
// discards new messages when full: Publish fails.
func WithMaxMsgs(n int64) Option {
	return func(c *busConfig) {
		if n < 1 && n != -1 {
			c.fail(backend.Invalid("WithMaxMsgs: %d, must be >= 1 or -1 (no limit)", n))
		}
		c.topic.MaxMsgs = n
		c.topicSet.add(field("MaxMsgs", "WithMaxMsgs", func(c *js.StreamConfig) *int64 { return &c.MaxMsgs }))
	}
}

// WithDuplicateWindow sets the topics' stream's duplicate window, within
// which a second Publish with one WithMsgID is dropped (its Duplicates;
// default for a stream Open creates: the server's, 2 minutes).
func WithDuplicateWindow(d time.Duration) Option {
	return func(c *busConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithDuplicateWindow: %v, must be > 0", d))
		}
		c.topic.Duplicates = d
		c.topicSet.add(field("Duplicates", "WithDuplicateWindow", func(c *js.StreamConfig) *time.Duration { return &c.Duplicates }))
	}
}

// WithDeadLetterLimits bounds the dead letters' stream; the fields set
// are explicit options, compared with an existing stream's (see Option).
func WithDeadLetterLimits(l DeadLetterLimits) Option {
	return func(c *busConfig) {
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
	}
}

// WithUpdateStreams lets Open change an existing stream whose settings
// differ from the explicit options, instead of refusing: the settings the
// options name are set, every other setting stays as the server holds it.
// Storage cannot be changed in place.
func WithUpdateStreams() Option { return func(c *busConfig) { c.update = true } }

// Open opens the bus on nc's JetStream (the account's default API; for a
// JetStream domain or API prefix, see OpenJetStream).
func Open(ctx context.Context, nc *nats.Conn, opts ...Option) (*Bus, error) {
	if nc == nil {
		return nil, backend.Invalid("jetstream.Open: nil connection")
	}
	j, err := js.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream.Open: %w", err)
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
func OpenJetStream(ctx context.Context, j js.JetStream, opts ...Option) (*Bus, error) {
	if j == nil {
		return nil, backend.Invalid("jetstream.OpenJetStream: nil JetStream")
	}
	cfg := busConfig{
		stream: DefaultStream, prefix: DefaultSubjectPrefix,
		topic: js.StreamConfig{
			Retention: js.InterestPolicy, Discard: js.DiscardNew, Storage: js.FileStorage, Replicas: 1,
			MaxBytes: -1, MaxMsgs: -1,
		},
		dlq: js.StreamConfig{
			Retention: js.LimitsPolicy, Discard: js.DiscardOld, Storage: js.FileStorage, Replicas: 1,
			MaxBytes: -1, MaxMsgs: -1, Duplicates: DefaultDeadLetterDuplicates,
			MaxMsgsPerSubject: DefaultDeadLettersPerSubscription,
		},
		sched: js.StreamConfig{
			Retention: js.LimitsPolicy, Discard: js.DiscardOld, Storage: js.FileStorage, Replicas: 1,
			MaxBytes: -1, MaxMsgs: -1, AllowMsgSchedules: true, AllowMsgTTL: true, AllowRollup: true,
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
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
			return nil, fmt.Errorf("jetstream.Open: %w", err)
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
		return nil, fmt.Errorf("jetstream.Open: %w", err)
	}
	dl, err := ensureStream(ctx, j, cfg.dlq, dlqNeeds, cfg.update)
	if err != nil {
		return nil, fmt.Errorf("jetstream.Open: %w", err)
	}
	return &Bus{js: j, stream: st, dlStream: dl, schedStream: sched, cfg: cfg}, nil
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

// ensureStream returns the stream want names: created from want if it is
// missing, bound as it is if the settings in needs agree, updated (those
// settings only) if update is set, else refused with a
// *ConfigMismatchError.
func ensureStream(ctx context.Context, j js.JetStream, want js.StreamConfig, needs settings[js.StreamConfig], update bool) (js.Stream, error) {
	st, err := j.Stream(ctx, want.Name)
	if errors.Is(err, js.ErrStreamNotFound) {
		st, err = j.CreateStream(ctx, want)
		if err == nil {
			return st, nil
		}
		if !errors.Is(err, js.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		st, err = j.Stream(ctx, want.Name) // created meanwhile by someone else
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", want.Name, err)
	}
	have := st.CachedInfo().Config
	diffs := needs.diff(&have, &want)
	if len(diffs) == 0 {
		return st, nil
	}
	if !update || anyFixed(diffs) {
		return nil, &ConfigMismatchError{Kind: "stream", Name: want.Name, Diffs: diffs}
	}
	needs.apply(&have, &want)
	st, err = j.UpdateStream(ctx, have)
	if err != nil {
		return nil, fmt.Errorf("update stream %s: %w", want.Name, err)
	}
	return st, nil
}

// JetStream returns the JetStream context the bus uses.
func (b *Bus) JetStream() js.JetStream { return b.js }

// validToken checks a subscription name, or one segment of a topic:
// letters, digits and dashes, so that it is one subject token and fits a
// consumer name.
func validToken(kind, s string) error {
	if s == "" {
		return backend.Invalid("%s name is empty", kind)
	}
	for _, r := range s {
		if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return backend.Invalid("%s name %q: only letters, digits and '-' are allowed", kind, s)
		}
	}
	return nil
}

// validTopic checks a topic: dot-separated segments (orders.eu.created),
// each one subject token (validToken). With pattern, the topic of a
// subscription, a segment may also be '*' (exactly one segment), and the
// last one '>' or '#' (one or more), as in the broker.
func validTopic(topic string, pattern bool) error {
	if topic == "" {
		return backend.Invalid("topic name is empty")
	}
	segs := strings.Split(topic, ".")
	for i, seg := range segs {
		switch {
		case pattern && seg == "*":
		case pattern && (seg == ">" || seg == "#"):
			if i != len(segs)-1 {
				return backend.Invalid("pattern %q: %q must be the last segment", topic, seg)
			}
		case strings.ContainsAny(seg, "*>#") && !pattern:
			return backend.Invalid("topic %q: wildcards are for Subscribe; publish to a topic", topic)
		default:
			if err := validToken("topic", seg); err != nil {
				return backend.Invalid("topic %q: segment %q: only letters, digits and '-' are allowed", topic, seg)
			}
		}
	}
	return nil
}

// normalTopic writes a pattern's '#' as '>'.
func normalTopic(topic string) string {
	if strings.HasSuffix(topic, "#") {
		return topic[:len(topic)-1] + ">"
	}
	return topic
}

// escapeTopic writes a topic's wildcards as characters a consumer name or
// a published subject can hold: '*' as '+', '>' as '#'.
func escapeTopic(topic string) string {
	return strings.NewReplacer("*", "+", ">", "#").Replace(topic)
}

// CreateTopic checks the topic's name. Every topic lives in the bus's
// stream, so there is nothing to create; it exists for parity with the
// broker.
func (b *Bus) CreateTopic(topic string) error { return validTopic(topic, false) }

// Subject returns the subject of topic: PREFIX.topic.TOPIC, a filter with
// wildcards for a pattern.
func (b *Bus) Subject(topic string) string { return b.cfg.prefix + ".topic." + normalTopic(topic) }

// topicOf returns the topic of a message's subject, false if the subject
// is not a topic's.
func (b *Bus) topicOf(subject string) (string, bool) {
	return strings.CutPrefix(subject, b.cfg.prefix+".topic.")
}

// subscriptionSubject is the subject of the messages meant for the
// subscription name of topic alone (a redriven dead letter): its consumer
// filters on it beside the topic's subject.
func (b *Bus) subscriptionSubject(topic, name string) string {
	return b.cfg.prefix + ".sub." + durableName(topic, name)
}

// durableName is the name of the consumer of the subscription name of
// topic: the topic's segments joined by '_' (wildcards escaped), then '_'
// and the name ("orders_billing", "orders_+_billing" for "orders.*").
// Neither segments nor names hold '_', so it names one subscription.
func durableName(topic, name string) string {
	return strings.ReplaceAll(escapeTopic(normalTopic(topic)), ".", "_") + "_" + name
}

// DeadLetterSubject returns the subject the subscription name of topic
// dead-letters to: PREFIX.dlq.TOPIC.NAME, a pattern's wildcards escaped
// ('*' as '+', '>' as '#').
func (b *Bus) DeadLetterSubject(topic, name string) string {
	return b.cfg.prefix + ".dlq." + escapeTopic(normalTopic(topic)) + "." + name
}

// userHeaders returns h less the headers of NATS and leasebus.
func userHeaders(h nats.Header) queue.Headers {
	if len(h) == 0 || len(h) == 1 && h.Get(HeaderID) != "" {
		return queue.Headers{} // only leasebus's own
	}
	m := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) == 0 || k == HeaderID || isReserved(k) {
			continue
		}
		m[k] = vs[0]
	}
	return queue.NewHeaders(m)
}

func isReserved(k string) bool {
	switch k {
	case HeaderReason, HeaderAttempts, HeaderLastError, HeaderSubscription, HeaderTopic, HeaderStreamSeq, HeaderPublishedAt, HeaderRedrivenFrom, HeaderAttemptsSpent, HeaderTTL,
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
