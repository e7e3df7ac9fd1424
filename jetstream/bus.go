package jetstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/internal/vocab"
	"github.com/leasebus/leasebus/queue"
)

// Header names that leasebus sets on messages and dead letters. Those a
// dead letter shares with the broker's dead-letter topics are the broker's
// names, so one consumer reads both.
const (
	HeaderID           = "Leasebus-Id"            // the message's uuid, set by Publish
	HeaderReason       = vocab.HeaderReason       // dead letters: queue.Reason.String()
	HeaderAttempts     = vocab.HeaderAttempts     // dead letters: deliveries spent
	HeaderLastError    = vocab.HeaderLastError    // dead letters: the last failure
	HeaderSubscription = vocab.HeaderSubscription // dead letters: the subscription's name
	HeaderTopic        = vocab.HeaderTopic        // dead letters: the source topic
	HeaderStreamSeq    = "Leasebus-Stream-Seq"    // dead letters: the source stream sequence
	HeaderPublishedAt  = "Leasebus-Published-At"  // dead letters: the source's publish time, RFC 3339
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
)

// Bus is leasebus on one JetStream stream: topics are subjects in it, and
// dead letters go to a second stream beside it. Its methods are safe for
// concurrent use. It does not own the connection.
type Bus struct {
	nc       *nats.Conn
	js       js.JetStream
	stream   js.Stream // the topics' stream
	dlStream js.Stream // the dead letters' stream
	cfg      busConfig
}

type busConfig struct {
	stream   string
	prefix   string
	storage  js.StorageType
	replicas int
	err      error
}

// Option configures Open.
type Option func(*busConfig)

// WithStream names the stream of the topics (default DefaultStream); the
// dead letters' stream is named the same with the suffix "_DLQ".
func WithStream(name string) Option {
	return func(c *busConfig) {
		if name == "" {
			c.err = core.Invalid("WithStream: empty name")
		}
		c.stream = name
	}
}

// WithSubjectPrefix sets the subject prefix (default DefaultSubjectPrefix):
// topic T is the subject PREFIX.topic.T and the dead letters of its
// subscription S go to PREFIX.dlq.T.S.
func WithSubjectPrefix(p string) Option {
	return func(c *busConfig) {
		if p == "" {
			c.err = core.Invalid("WithSubjectPrefix: empty prefix")
		}
		c.prefix = p
	}
}

// WithMemoryStorage keeps the streams in memory rather than in files (the
// default): faster, and lost when the server stops.
func WithMemoryStorage() Option { return func(c *busConfig) { c.storage = js.MemoryStorage } }

// WithReplicas sets the streams' replica count in a cluster (default 1).
func WithReplicas(n int) Option {
	return func(c *busConfig) {
		if n < 1 {
			c.err = core.Invalid("WithReplicas: %d, must be >= 1", n)
		}
		c.replicas = n
	}
}

// Open creates (or updates) the two streams on nc's server and returns the
// bus. The topics' stream has interest retention: a message is kept until
// every subscription (durable consumer) of its topic has acked or
// terminated it, and one published to a topic with no subscription is
// dropped, as the in-memory broker does.
func Open(ctx context.Context, nc *nats.Conn, opts ...Option) (*Bus, error) {
	if nc == nil {
		return nil, core.Invalid("jetstream.Open: nil connection")
	}
	cfg := busConfig{stream: DefaultStream, prefix: DefaultSubjectPrefix, storage: js.FileStorage, replicas: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	j, err := js.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream.Open: %w", err)
	}
	st, err := j.CreateOrUpdateStream(ctx, js.StreamConfig{
		Name:      cfg.stream,
		Subjects:  []string{cfg.prefix + ".topic.>"},
		Retention: js.InterestPolicy,
		Storage:   cfg.storage,
		Replicas:  cfg.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream.Open: stream %s: %w", cfg.stream, err)
	}
	dl, err := j.CreateOrUpdateStream(ctx, js.StreamConfig{
		Name:       cfg.stream + "_DLQ",
		Subjects:   []string{cfg.prefix + ".dlq.>"},
		Retention:  js.LimitsPolicy,
		Storage:    cfg.storage,
		Replicas:   cfg.replicas,
		Duplicates: 10 * time.Minute, // the window that drops a dead letter copied twice
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream.Open: stream %s_DLQ: %w", cfg.stream, err)
	}
	return &Bus{nc: nc, js: j, stream: st, dlStream: dl, cfg: cfg}, nil
}

// JetStream returns the JetStream context the bus uses.
func (b *Bus) JetStream() js.JetStream { return b.js }

// validToken checks a topic or subscription name: letters, digits and
// dashes, so that it is one subject token and fits a consumer name.
func validToken(kind, s string) error {
	if s == "" {
		return core.Invalid("%s name is empty", kind)
	}
	for _, r := range s {
		if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return core.Invalid("%s name %q: only letters, digits and '-' are allowed", kind, s)
		}
	}
	return nil
}

// CreateTopic checks the topic's name. Every topic lives in the bus's
// stream, so there is nothing to create; it exists for parity with the
// broker.
func (b *Bus) CreateTopic(topic string) error { return validToken("topic", topic) }

// Subject returns the subject of topic.
func (b *Bus) Subject(topic string) string { return b.cfg.prefix + ".topic." + topic }

// DeadLetterSubject returns the subject the subscription name of topic
// dead-letters to.
func (b *Bus) DeadLetterSubject(topic, name string) string {
	return b.cfg.prefix + ".dlq." + topic + "." + name
}

// PublishOption adjusts one Publish.
type PublishOption func(*publishConfig)

type publishConfig struct {
	headers map[string]string
	msgID   string
	codec   any
}

// WithHeaders adds headers to the message.
func WithHeaders(h map[string]string) PublishOption {
	return func(c *publishConfig) { c.headers = maps.Clone(h) }
}

// WithMsgID sets the JetStream deduplication id (Nats-Msg-Id): a second
// publish of one id within the stream's duplicate window is dropped.
func WithMsgID(id string) PublishOption { return func(c *publishConfig) { c.msgID = id } }

// WithPublishCodec encodes the payload with c instead of DefaultCodec.
func WithPublishCodec[T any](c Codec[T]) PublishOption {
	return func(p *publishConfig) { p.codec = c }
}

// Publish encodes payload and publishes it to topic, waiting for the
// stream to store it. It returns the message as subscribers will see it
// (ID, Topic, Payload, Headers, PublishedAt; Priority and Key are not
// carried on JetStream).
func Publish[T any](ctx context.Context, b *Bus, topic string, payload T, opts ...PublishOption) (queue.Message[T], error) {
	var pc publishConfig
	for _, o := range opts {
		o(&pc)
	}
	if err := validToken("topic", topic); err != nil {
		return queue.Message[T]{}, err
	}
	codec, ok := codecFor[T](pc.codec)
	if !ok {
		return queue.Message[T]{}, core.Invalid("WithPublishCodec: %T does not encode the payload type", pc.codec)
	}
	data, err := codec.Encode(nil, payload)
	if err != nil {
		return queue.Message[T]{}, fmt.Errorf("publish to %q: encode: %w", topic, err)
	}
	id := uuid.New()
	m := nats.NewMsg(b.Subject(topic))
	m.Data = data
	for k, v := range pc.headers {
		m.Header.Set(k, v)
	}
	m.Header.Set(HeaderID, id.String())
	if pc.msgID != "" {
		m.Header.Set(nats.MsgIdHdr, pc.msgID)
	}
	now := time.Now()
	if _, err := b.js.PublishMsg(ctx, m); err != nil {
		return queue.Message[T]{}, fmt.Errorf("publish to %q: %w", topic, err)
	}
	return queue.Message[T]{ID: id, Topic: topic, Payload: payload, Headers: queue.NewHeaders(pc.headers), PublishedAt: now}, nil
}

// userHeaders returns h less the headers of NATS and leasebus.
func userHeaders(h nats.Header) queue.Headers {
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
	case HeaderReason, HeaderAttempts, HeaderLastError, HeaderSubscription, HeaderTopic, HeaderStreamSeq, HeaderPublishedAt,
		"Leasebus-Reason", "Leasebus-Attempts", "Leasebus-Last-Error", "Leasebus-Subscription", "Leasebus-Topic":
		return true
	}
	return len(k) >= 5 && k[:5] == "Nats-"
}

// reasonOf reads a dead letter's reason; 0 for a word it does not know.
func reasonOf(s string) queue.Reason {
	r, _ := core.ParseReason(s)
	return r
}

// FetchDeadLetters reads the dead letters of the subscription name of
// topic, oldest first, from the dead letters' stream: it waits until it
// has n or ctx ends (then it returns what it has and ctx's error). n < 1
// reads what is there now.
func FetchDeadLetters[T any](ctx context.Context, b *Bus, topic, name string, n int, opts ...SubscribeOption) ([]queue.DeadLetter[T], error) {
	cfg, err := newSubConfig(opts)
	if err != nil {
		return nil, err
	}
	codec, ok := codecFor[T](cfg.codec)
	if !ok {
		return nil, core.Invalid("WithCodec: %T does not decode the payload type", cfg.codec)
	}
	oc, err := b.dlStream.OrderedConsumer(ctx, js.OrderedConsumerConfig{FilterSubjects: []string{b.DeadLetterSubject(topic, name)}})
	if err != nil {
		return nil, fmt.Errorf("dead letters of %s/%s: %w", topic, name, err)
	}
	var out []queue.DeadLetter[T]
	for {
		if n < 1 {
			info, err := oc.Info(ctx)
			if err != nil {
				return out, err
			}
			if info.NumPending == 0 {
				return out, nil
			}
		} else if len(out) >= n {
			return out, nil
		}
		wait, err := slice(ctx, cfg.pollSlice)
		if err != nil {
			return out, err
		}
		want := max(n-len(out), 100)
		batch, err := oc.Fetch(want, js.FetchMaxWait(wait))
		if err != nil {
			return out, fmt.Errorf("dead letters of %s/%s: %w", topic, name, err)
		}
		for m := range batch.Messages() {
			dl, err := decodeDeadLetter(m, codec)
			if err != nil {
				return out, err
			}
			out = append(out, dl)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, js.ErrNoMessages) {
			return out, fmt.Errorf("dead letters of %s/%s: %w", topic, name, err)
		}
	}
}

// dlHeader reads a dead letter's header, under its legacy name if need be.
func dlHeader(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	return h.Get(legacyHeaders[name])
}

func decodeDeadLetter[T any](m js.Msg, codec Codec[T]) (queue.DeadLetter[T], error) {
	h := m.Headers()
	payload, err := codec.Decode(m.Data())
	if err != nil {
		return queue.DeadLetter[T]{}, fmt.Errorf("dead letter: decode: %w", err)
	}
	attempts, _ := strconv.Atoi(dlHeader(h, HeaderAttempts))
	id, _ := uuid.Parse(h.Get(HeaderID))
	published, _ := time.Parse(time.RFC3339Nano, h.Get(HeaderPublishedAt))
	var at time.Time
	if md, err := m.Metadata(); err == nil {
		at = md.Timestamp
	}
	return queue.DeadLetter[T]{
		Subscription: dlHeader(h, HeaderSubscription),
		Message: queue.Message[T]{
			ID: id, Topic: dlHeader(h, HeaderTopic), Payload: payload,
			Headers: userHeaders(h), PublishedAt: published,
		},
		Reason:    reasonOf(dlHeader(h, HeaderReason)),
		Attempts:  attempts,
		LastError: dlHeader(h, HeaderLastError),
		At:        at,
	}, nil
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
