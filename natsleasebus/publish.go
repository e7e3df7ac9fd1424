package natsleasebus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// ErrUnsupported is matched (errors.Is) by the error of an option that
// asks for what this backend cannot do correctly on JetStream: a message
// priority other than normal (queue.WithPriority), an ordering key
// (queue.WithKey); or for what the bus was not opened to do: a delay
// (queue.WithDelay) on a bus opened without WithDelays; and by Open's
// error for a server too old for the bus. It also matches
// errors.ErrUnsupported, as every backend's refusal of an option does.
// The error names the feature and says why; nothing is published.
var ErrUnsupported = fmt.Errorf("natsleasebus: not supported on JetStream: %w", errors.ErrUnsupported)

// headerTTL carries a message's time to live (queue.WithTTL), as a Go
// duration.
const headerTTL = "Leasebus-Ttl"

// Publisher publishes to the topics of a Bus, encoding payloads with its
// codec: the backend.Publisher of JetStream, which package schedule and
// the outbox's relay publish through. It carries of queue.PublishOptions:
//
//   - Headers, as NATS headers (a name JetStream or this package keeps for
//     itself, "Nats-" and the package's "Leasebus-" names, is refused:
//     queue.ErrInvalidArgument);
//   - DedupID, as Nats-Msg-Id: a second publish of one ID within the
//     topics' stream's duplicate window (WithDedupWindow) stores nothing
//     and returns the original message, or this call's if every
//     subscription has settled the original since (nil error either way);
//   - Delay, with JetStream's message schedules, on a bus opened
//     WithDelays (else refused: ErrUnsupported). The message's
//     PublishedAt is the publish; waiting spends no attempt. Every
//     subscription of the topic when the message comes due receives it
//     (the broker fans out at the publish): one created after the publish
//     gets it too, and one purged meanwhile does not drop it. It comes
//     due at the publisher's clock's now + Delay, as the server's clock
//     reads it, and the server fires schedules on a timer of at least
//     250ms: it may come a little late, never early;
//   - TTL, emulated by the handles at delivery: a delivery at or after
//     PublishedAt + TTL dead-letters it (queue.ReasonExpired) instead of
//     handing it out; a lease taken before may still be acked. (JetStream's
//     own per-message TTL would delete the message for every subscription,
//     without a dead letter.) A redriven message counts its TTL from the
//     redrive.
//
// It refuses, by name (ErrUnsupported), a Priority other than
// queue.PriorityNormal (a stream delivers each consumer's messages in
// stream order; JetStream's priority groups rank the pulling clients, not
// the messages, and a client cannot reorder correctly either: to see a
// message's priority a handle must lease it, and no handle sees the
// messages the others hold) and a Key (an ordering key holds back the
// later messages of a key across every handle of a subscription, in every
// process; JetStream bounds what is in flight per consumer, not per
// subject, and a handle only knows its own leases). Its methods are safe
// for concurrent use.
type Publisher[T any] struct {
	b     *Bus
	codec queue.Codec[T]
}

// NewPublisher returns a Publisher to b's topics that encodes payloads
// with codec (nil: queue.DefaultCodec, JSON but for []byte and string). A
// nil b is an error matching queue.ErrInvalidArgument.
func NewPublisher[T any](b *Bus, codec queue.Codec[T]) (*Publisher[T], error) {
	if b == nil {
		return nil, backend.Invalid("NewPublisher: nil *Bus")
	}
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	return &Publisher[T]{b: b, codec: codec}, nil
}

// CheckPublish returns the error Publish returns for a publish to topic
// with o that is refused whatever the stream holds, or nil (see
// backend.PublishChecker): a topic name NATS does not take, an option
// JetStream cannot carry, a reserved header name.
func (p *Publisher[T]) CheckPublish(topic string, o queue.PublishOptions) error {
	if err := validTopic(topic, false); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	switch {
	case o.Priority != queue.PriorityNormal:
		return fmt.Errorf("WithPriority(%v): %w: a stream delivers in publish order, and JetStream's priority groups rank clients, not messages", o.Priority, ErrUnsupported)
	case o.Key != "":
		return fmt.Errorf("WithKey(%q): %w: JetStream bounds what is in flight per consumer, not per key, and one handle does not see another's leases", o.Key, ErrUnsupported)
	case o.Delay > 0 && p.b.schedStream == nil:
		return fmt.Errorf("publish to %q with a delay of %v: %w: open the bus WithDelays (JetStream message schedules, in a stream of their own)", topic, o.Delay, ErrUnsupported)
	}
	for k := range o.Headers {
		if k == headerID || k == headerTTL || k == headerPublishedAt || k == headerAttemptsSpent || k == headerStreamSeq || k == headerRedrivenFrom || strings.HasPrefix(k, "Nats-") {
			return backend.Invalid("WithHeaders: %q is a header JetStream or natsleasebus keeps for itself", k)
		}
	}
	return nil
}

// Publish encodes payload and publishes it to topic, waiting for the
// stream to store it (a delayed one: the schedules' stream). It returns
// the message as subscribers will see it (ID, Topic, Payload, Headers,
// PublishedAt). A duplicate (queue.WithDedupID) returns the original, or
// this call's message if the original is no longer in the stream.
func (p *Publisher[T]) Publish(ctx context.Context, topic string, payload T, opts ...queue.PublishOption) (queue.Message[T], error) {
	var o queue.PublishOptions
	if err := o.Apply(opts...); err != nil {
		return queue.Message[T]{}, err
	}
	if o.DedupIDs != nil {
		return queue.Message[T]{}, backend.Invalid("WithDedupIDs: only for PublishBatch; Publish takes WithDedupID")
	}
	if err := p.CheckPublish(topic, o); err != nil {
		return queue.Message[T]{}, err
	}
	if err := ctx.Err(); err != nil {
		return queue.Message[T]{}, err
	}
	m, out, err := prepare(p.b, topic, payload, &o, p.codec, o.DedupID, time.Now())
	if err != nil {
		return queue.Message[T]{}, err
	}
	ack, err := p.b.js.PublishMsg(ctx, m)
	if err != nil {
		return queue.Message[T]{}, publishError(topic, err)
	}
	if ack.Duplicate {
		return original(ctx, p.b.storedIn(ack), topic, ack.Sequence, p.codec, out)
	}
	return out, nil
}

// PublishBatch publishes each payload to topic, in order, as Publish
// would with the same options, and returns the messages as stored. It
// sends them all before it waits for the stream's acks (asynchronous
// publish, in order on the bus's connection), so a batch costs about one
// round trip rather than one per message. queue.WithDedupIDs gives each
// payload its dedup ID (a duplicate returns the original message in its
// place); WithDedupID is invalid here. A payload whose publish failed has
// the zero Message in its place, and the error joins each failure (a
// timeout means the stream may or may not have stored it: publish again
// with the same dedup ID to be sure it is stored once). An empty batch
// returns nil.
func (p *Publisher[T]) PublishBatch(ctx context.Context, topic string, payloads []T, opts ...queue.PublishOption) ([]queue.Message[T], error) {
	var o queue.PublishOptions
	if err := o.Apply(opts...); err != nil {
		return nil, err
	}
	if o.DedupID != "" {
		return nil, backend.Invalid("WithDedupID: one ID cannot name many messages; PublishBatch takes WithDedupIDs")
	}
	if o.DedupIDs != nil && len(o.DedupIDs) != len(payloads) {
		return nil, backend.Invalid("WithDedupIDs: %d ids for %d payloads", len(o.DedupIDs), len(payloads))
	}
	if err := p.CheckPublish(topic, o); err != nil {
		return nil, err
	}
	if len(payloads) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, codec := p.b, p.codec
	now := time.Now()
	out := make([]queue.Message[T], len(payloads))
	msgs := make([]*nats.Msg, len(payloads))
	var err error
	for i, payload := range payloads {
		var msgID string
		if o.DedupIDs != nil {
			msgID = o.DedupIDs[i]
		}
		if msgs[i], out[i], err = prepare(b, topic, payload, &o, codec, msgID, now); err != nil {
			return nil, fmt.Errorf("payload %d: %w", i, err)
		}
	}
	futures := make([]js.PubAckFuture, len(msgs))
	var errs []error
	for i, m := range msgs {
		if futures[i], err = b.js.PublishMsgAsync(m); err != nil {
			errs = append(errs, fmt.Errorf("payload %d: %w", i, publishError(topic, err)))
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
			if out[i], err = original(ctx, b.storedIn(ack), topic, ack.Sequence, codec, out[i]); err != nil {
				errs = append(errs, fmt.Errorf("payload %d: %w", i, err))
			}
		}
	}
	return out, errors.Join(errs...)
}

// publishError is the error of a publish to topic that err failed: one
// the server refuses for good (a message over its max_payload) matches
// queue.ErrInvalidArgument too.
func publishError(topic string, err error) error {
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("publish to %q: %w: %w", topic, queue.ErrInvalidArgument, err)
	}
	return fmt.Errorf("publish to %q: %w", topic, err)
}

// Publish publishes payload to topic on b with the default codec
// (queue.DefaultCodec): NewPublisher(b, nil).Publish, for a publish
// without a Publisher at hand.
func Publish[T any](ctx context.Context, b *Bus, topic string, payload T, opts ...queue.PublishOption) (queue.Message[T], error) {
	if b == nil {
		return queue.Message[T]{}, backend.Invalid("Publish: nil *Bus")
	}
	return (&Publisher[T]{b: b, codec: queue.DefaultCodec[T]()}).Publish(ctx, topic, payload, opts...)
}

// PublishBatch publishes payloads to topic on b with the default codec:
// NewPublisher(b, nil).PublishBatch.
func PublishBatch[T any](ctx context.Context, b *Bus, topic string, payloads []T, opts ...queue.PublishOption) ([]queue.Message[T], error) {
	if b == nil {
		return nil, backend.Invalid("PublishBatch: nil *Bus")
	}
	return (&Publisher[T]{b: b, codec: queue.DefaultCodec[T]()}).PublishBatch(ctx, topic, payloads, opts...)
}

// prepare encodes payload into a message to topic, published at now (a
// schedule, with a delay), and the message as subscribers will see it.
func prepare[T any](b *Bus, topic string, payload T, pc *queue.PublishOptions, codec queue.Codec[T], msgID string, now time.Time) (*nats.Msg, queue.Message[T], error) {
	data, err := codec.Encode(nil, payload)
	if err != nil {
		return nil, queue.Message[T]{}, fmt.Errorf("publish to %q: encode: %w", topic, err)
	}
	id := uuid.New()
	m := nats.NewMsg(b.Subject(topic))
	m.Data = data
	for k, v := range pc.Headers {
		m.Header.Set(k, v)
	}
	m.Header.Set(headerID, id.String())
	if pc.TTL > 0 {
		m.Header.Set(headerTTL, pc.TTL.String())
	}
	if msgID != "" {
		// Per topic, as every backend's dedup is (JetStream's is per
		// stream), and apart from the IDs the package gives its own
		// publishes (a release's, a redrive's, a dead letter's).
		m.Header.Set(nats.MsgIdHdr, "pub."+topic+" "+msgID)
	}
	if pc.Delay > 0 {
		m.Header.Set(headerPublishedAt, now.Format(time.RFC3339Nano)) // not the time it is sourced
		b.schedule(m, topic, now.Add(pc.Delay))
	}
	return m, queue.Message[T]{ID: id, Topic: topic, Payload: payload, Headers: queue.NewHeaders(pc.Headers), PublishedAt: now}, nil
}

// storedIn returns the stream of b that a publish ack names.
func (b *Bus) storedIn(ack *js.PubAck) js.Stream {
	if b.schedStream != nil && ack.Stream == b.cfg.schedName() {
		return b.schedStream
	}
	return b.stream
}

// original reads back the message stored at seq, of which a publish was a
// duplicate, or returns this, the duplicate's own message, if the stream
// no longer holds it (every subscription settled it; for a delayed one,
// its schedule fired).
func original[T any](ctx context.Context, st js.Stream, topic string, seq uint64, codec queue.Codec[T], this queue.Message[T]) (queue.Message[T], error) {
	raw, err := st.GetMsg(ctx, seq)
	if errors.Is(err, js.ErrMsgNotFound) {
		return this, nil
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
