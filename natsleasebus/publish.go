package natsleasebus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// ErrDuplicateGone is returned by Publish for a message whose WithDedupID
// names one published within the stream's duplicate window that is no
// longer in the stream (every subscription has settled it; for a delayed
// one, its schedule has fired), so it cannot be returned in place of the
// new one. Nothing was published.
var ErrDuplicateGone = errors.New("natsleasebus: duplicate of a message no longer in the stream")

// PublishOption adjusts one Publish or PublishBatch.
type PublishOption struct{ apply func(*publishConfig) }

type publishConfig struct {
	ttl     time.Duration
	ttlSet  bool
	delay   time.Duration
	headers map[string]string
	msgID   string
	msgIDs  []string
	codec   any
	err     error // the first option's error
}

func (c *publishConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// ErrUnsupported is matched (errors.Is) by the error of an option that
// asks for what this backend cannot do correctly on JetStream: a message
// priority other than normal (WithPriority), an ordering key (WithKey); or
// for what the bus was not opened to do: a delay (WithDelay) on a bus
// opened without WithDelays; and by Open's error for a server too old
// for the bus. It also matches errors.ErrUnsupported. The error names the
// feature and says why; nothing is published.
var ErrUnsupported = fmt.Errorf("natsleasebus: not supported on JetStream: %w", errors.ErrUnsupported)

// WithPriority is the broker's WithPriority, refused: any priority but
// queue.PriorityNormal (the default, which is accepted) makes Publish and
// PublishBatch fail with an error matching ErrUnsupported, and an invalid
// one with one matching queue.ErrInvalidArgument. A stream delivers each
// consumer's messages in stream order. JetStream's priority groups rank
// the pulling clients (overflow, pinned client, prioritized pulls), not
// the messages. A client cannot reorder correctly either: to see a
// message's priority a handle must lease it, and no handle sees the
// messages the others hold, so a handle would work on a low-priority
// message while a critical one waits behind another handle's leases.
func WithPriority(p queue.Priority) PublishOption {
	return PublishOption{func(c *publishConfig) {
		switch {
		case p < queue.PriorityLow || p > queue.PriorityCritical:
			c.fail(backend.Invalid("WithPriority: %d is not a priority", p))
		case p != queue.PriorityNormal:
			c.fail(fmt.Errorf("WithPriority(%v): %w: a stream delivers in publish order, and JetStream's priority groups rank clients, not messages", p, ErrUnsupported))
		}
	}}
}

// WithKey is the broker's WithKey, refused: a non-empty key makes Publish
// and PublishBatch fail with an error matching ErrUnsupported ("" means no
// key and is accepted). An ordering key holds back the later messages of
// a key while an earlier one is leased or waits out a retry, across every
// handle of a subscription, in every process. JetStream bounds what is in
// flight per consumer (MaxAckPending), not per subject, and a handle only
// knows the leases it holds itself: holding back in the client would be
// correct within one handle only.
func WithKey(key string) PublishOption {
	return PublishOption{func(c *publishConfig) {
		if key != "" {
			c.fail(fmt.Errorf("WithKey(%q): %w: JetStream bounds what is in flight per consumer, not per key, and one handle does not see another's leases", key, ErrUnsupported))
		}
	}}
}

// WithDelay makes the message visible d after the publish, as the
// broker's WithDelay does, with JetStream's message schedules (the bus
// must be opened WithDelays; else Publish fails with an error matching
// ErrUnsupported). The message's PublishedAt is the publish; waiting spends
// no attempt. Every subscription of the topic when the message comes due
// receives it (the broker fans out at the publish): one created after the
// publish gets it too, and one purged meanwhile does not drop it. It
// comes due at the publisher's clock's now + d, as the server's clock
// reads it, and the server fires schedules on a timer of at least 250ms:
// it may come a little late, never early. 0, the default, is at once; d
// must be >= 0.
func WithDelay(d time.Duration) PublishOption {
	return PublishOption{func(c *publishConfig) {
		if d < 0 {
			c.fail(backend.Invalid("WithDelay: %v, must be >= 0", d))
		}
		c.delay = d
	}}
}

// WithHeaders adds headers to the message.
func WithHeaders(h map[string]string) PublishOption {
	return PublishOption{func(c *publishConfig) { c.headers = maps.Clone(h) }}
}

// WithDedupID sets the JetStream deduplication id (Nats-Msg-Id): a second
// publish of one id within the topics' stream's duplicate window
// (WithDedupWindow) stores nothing and returns the original message,
// or ErrDuplicateGone if every subscription has settled it since. Invalid
// in PublishBatch (see WithDedupIDs).
func WithDedupID(id string) PublishOption {
	return PublishOption{func(c *publishConfig) { c.msgID = id }}
}

// WithDedupIDs gives each payload of a PublishBatch its deduplication id, as
// WithDedupID does for one ("" for none). It must hold one id per payload.
func WithDedupIDs(ids []string) PublishOption {
	return PublishOption{func(c *publishConfig) { c.msgIDs = append([]string(nil), ids...) }}
}

// headerTTL carries a message's time to live (WithTTL), as a Go duration.
const headerTTL = "Leasebus-Ttl"

// WithTTL gives the message a time to live, as the broker's WithTTL does:
// a delivery at or after PublishedAt + d dead-letters it (ReasonExpired)
// instead of handing it out. A lease taken before may still be acked. It
// is emulated by the handles, at delivery: JetStream's own per-message
// TTL would delete the message for every subscription, without a dead
// letter. A redriven message counts its TTL from the redrive. d must be >
// 0.
func WithTTL(d time.Duration) PublishOption {
	return PublishOption{func(c *publishConfig) { c.ttl, c.ttlSet = d, true }}
}

// WithPublishCodec encodes the payload with c instead of the default
// (JSON; []byte and string payloads pass through as the data).
func WithPublishCodec[T any](c queue.Codec[T]) PublishOption {
	return PublishOption{func(p *publishConfig) { p.codec = c }}
}

func publishSetup[T any](topic string, opts []PublishOption) (publishConfig, queue.Codec[T], error) {
	var pc publishConfig
	for _, o := range opts {
		if o.apply == nil {
			pc.fail(errZeroOption)
			continue
		}
		o.apply(&pc)
	}
	if err := validTopic(topic, false); err != nil {
		return pc, nil, err
	}
	if pc.err != nil {
		return pc, nil, pc.err
	}
	if pc.ttlSet && pc.ttl <= 0 {
		return pc, nil, backend.Invalid("WithTTL: %v, must be > 0", pc.ttl)
	}
	codec, ok := codecFor[T](pc.codec)
	if !ok {
		return pc, nil, backend.Invalid("WithPublishCodec: %T does not encode the payload type", pc.codec)
	}
	return pc, codec, nil
}

// prepare encodes payload into a message to topic, published at now (a
// schedule, with a delay), and the message as subscribers will see it.
func prepare[T any](b *Bus, topic string, payload T, pc *publishConfig, codec queue.Codec[T], msgID string, now time.Time) (*nats.Msg, queue.Message[T], error) {
	data, err := codec.Encode(nil, payload)
	if err != nil {
		return nil, queue.Message[T]{}, fmt.Errorf("publish to %q: encode: %w", topic, err)
	}
	id := uuid.New()
	m := nats.NewMsg(b.Subject(topic))
	m.Data = data
	for k, v := range pc.headers {
		m.Header.Set(k, v)
	}
	m.Header.Set(headerID, id.String())
	if pc.ttl > 0 {
		m.Header.Set(headerTTL, pc.ttl.String())
	}
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	if pc.delay > 0 {
		m.Header.Set(headerPublishedAt, now.Format(time.RFC3339Nano)) // not the time it is sourced
		b.schedule(m, topic, now.Add(pc.delay))
	}
	return m, queue.Message[T]{ID: id, Topic: topic, Payload: payload, Headers: queue.NewHeaders(pc.headers), PublishedAt: now}, nil
}

// checkDelay refuses a delay on a bus without the schedules' stream.
func checkDelay(b *Bus, topic string, pc *publishConfig) error {
	if pc.delay > 0 && b.schedStream == nil {
		return fmt.Errorf("publish to %q with a delay of %v: %w: open the bus WithDelays (JetStream message schedules, in a stream of their own)", topic, pc.delay, ErrUnsupported)
	}
	return nil
}

// storedIn returns the stream of b that a publish ack names.
func (b *Bus) storedIn(ack *js.PubAck) js.Stream {
	if b.schedStream != nil && ack.Stream == b.cfg.schedName() {
		return b.schedStream
	}
	return b.stream
}

// Publish encodes payload and publishes it to topic, waiting for the
// stream to store it (a delayed one: the schedules' stream). It returns
// the message as subscribers will see it (ID, Topic, Payload, Headers,
// PublishedAt; a priority or key is refused, see WithPriority and
// WithKey). A duplicate (WithDedupID) returns the original.
func Publish[T any](ctx context.Context, b *Bus, topic string, payload T, opts ...PublishOption) (queue.Message[T], error) {
	pc, codec, err := publishSetup[T](topic, opts)
	if err != nil {
		return queue.Message[T]{}, err
	}
	if pc.msgIDs != nil {
		return queue.Message[T]{}, backend.Invalid("WithDedupIDs: only for PublishBatch; Publish takes WithDedupID")
	}
	if err := checkDelay(b, topic, &pc); err != nil {
		return queue.Message[T]{}, err
	}
	m, out, err := prepare(b, topic, payload, &pc, codec, pc.msgID, time.Now())
	if err != nil {
		return queue.Message[T]{}, err
	}
	ack, err := b.js.PublishMsg(ctx, m)
	if err != nil {
		return queue.Message[T]{}, fmt.Errorf("publish to %q: %w", topic, err)
	}
	if ack.Duplicate {
		return original(ctx, b.storedIn(ack), topic, ack.Sequence, codec)
	}
	return out, nil
}

// PublishBatch publishes each payload to topic, in order, as Publish
// would with the same options, and returns the messages as stored. It
// sends them all before it waits for the stream's acks (asynchronous
// publish, in order on the bus's connection), so a batch costs about one
// round trip rather than one per message. WithDedupIDs gives each payload
// its dedup ID (a duplicate returns the original message in its place);
// WithDedupID is invalid here. A payload whose publish failed has the zero
// Message in its place, and the error joins each failure (a timeout means
// the stream may or may not have stored it: publish again with the same
// dedup ID to be sure it is stored once). An empty batch returns nil.
func PublishBatch[T any](ctx context.Context, b *Bus, topic string, payloads []T, opts ...PublishOption) ([]queue.Message[T], error) {
	pc, codec, err := publishSetup[T](topic, opts)
	if err != nil {
		return nil, err
	}
	if pc.msgID != "" {
		return nil, backend.Invalid("WithDedupID: one ID cannot name many messages; PublishBatch takes WithDedupIDs")
	}
	if pc.msgIDs != nil && len(pc.msgIDs) != len(payloads) {
		return nil, backend.Invalid("WithDedupIDs: %d ids for %d payloads", len(pc.msgIDs), len(payloads))
	}
	if err := checkDelay(b, topic, &pc); err != nil {
		return nil, err
	}
	if len(payloads) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]queue.Message[T], len(payloads))
	msgs := make([]*nats.Msg, len(payloads))
	for i, p := range payloads {
		var msgID string
		if pc.msgIDs != nil {
			msgID = pc.msgIDs[i]
		}
		if msgs[i], out[i], err = prepare(b, topic, p, &pc, codec, msgID, now); err != nil {
			return nil, fmt.Errorf("payload %d: %w", i, err)
		}
	}
	futures := make([]js.PubAckFuture, len(msgs))
	var errs []error
	for i, m := range msgs {
		if futures[i], err = b.js.PublishMsgAsync(m); err != nil {
			errs = append(errs, fmt.Errorf("publish to %q, payload %d: %w", topic, i, err))
		}
	}
	for i, f := range futures {
		if f == nil {
			out[i] = queue.Message[T]{}
			continue
		}
		var ack *js.PubAck
		select {
		case ack = <-f.Ok():
		case err = <-f.Err():
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			out[i] = queue.Message[T]{}
			errs = append(errs, fmt.Errorf("publish to %q, payload %d: %w", topic, i, err))
			continue
		}
		if ack.Duplicate {
			if out[i], err = original(ctx, b.storedIn(ack), topic, ack.Sequence, codec); err != nil {
				errs = append(errs, fmt.Errorf("payload %d: %w", i, err))
			}
		}
	}
	return out, errors.Join(errs...)
}

// original reads back the message stored at seq, of which a publish was a
// duplicate.
func original[T any](ctx context.Context, st js.Stream, topic string, seq uint64, codec queue.Codec[T]) (queue.Message[T], error) {
	raw, err := st.GetMsg(ctx, seq)
	if errors.Is(err, js.ErrMsgNotFound) {
		return queue.Message[T]{}, fmt.Errorf("publish to %q: duplicate of stream sequence %d: %w", topic, seq, ErrDuplicateGone)
	}
	if err != nil {
		return queue.Message[T]{}, fmt.Errorf("publish to %q: duplicate of stream sequence %d: %w", topic, seq, err)
	}
	payload, err := codec.Decode(raw.Data)
	if err != nil {
		return queue.Message[T]{}, fmt.Errorf("publish to %q: duplicate of stream sequence %d: decode: %w", topic, seq, err)
	}
	id, _ := uuid.Parse(raw.Header.Get(headerID))
	published := raw.Time
	if t, err := time.Parse(time.RFC3339Nano, raw.Header.Get(headerPublishedAt)); err == nil {
		published = t // a delayed message's schedule
	}
	return queue.Message[T]{ID: id, Topic: topic, Payload: payload, Headers: userHeaders(raw.Header), PublishedAt: published}, nil
}
