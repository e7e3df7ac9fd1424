package pgleasebus

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Publisher publishes to a bus's topics, encoding payloads with its codec:
// the backend.Publisher of PostgreSQL, which package schedule and the
// outbox's relay publish through. It carries every option of a publish
// (queue.PublishOptions): a key, a priority, headers, a delay, a TTL and a
// dedup ID (per topic, within the bus's window, WithDedupWindow). A
// publish stores the message on every subscription of its topic in one
// statement; a topic without subscriptions accepts and drops it. Its
// methods are safe for concurrent use.
type Publisher[T any] struct {
	b     *Bus
	codec queue.Codec[T]
}

// NewPublisher returns a Publisher to b's topics that encodes payloads
// with codec (nil: queue.DefaultCodec). A nil b is an error matching
// queue.ErrInvalidArgument.
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
// with o that is refused whatever the database holds, or nil (see
// backend.PublishChecker): a topic name the bus does not take, an option
// out of range.
func (p *Publisher[T]) CheckPublish(topic string, o queue.PublishOptions) error {
	if err := validName("topic", topic); err != nil {
		return err
	}
	return o.Validate()
}

// notNil returns b, or an empty slice for nil: an empty payload is an
// empty bytea, never NULL.
func notNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// dbtx is what a publish runs its statement on: the pool, or the caller's
// transaction.
type dbtx interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Publish publishes payload to topic and returns the message as
// subscribers will see it: every subscription of the topic holds it once
// the statement returns, and the Polls of this process wake at once
// (another process's, at the NOTIFY). A publish whose dedup ID was
// published to topic within the bus's window stores nothing and returns
// the original message while a subscription holds it, else this call's.
// A topic that does not exist is an error matching queue.ErrTopicNotFound;
// a done ctx publishes nothing.
func (p *Publisher[T]) Publish(ctx context.Context, topic string, payload T, opts ...queue.PublishOption) (queue.Message[T], error) {
	m, err := p.publish(ctx, p.b.pool, topic, payload, opts)
	if err == nil {
		p.b.wake(topic)
	}
	return m, err
}

// PublishTx publishes payload to topic in the caller's transaction tx: the
// message is there when tx commits, and never was if it rolls back (the
// NOTIFY that wakes Polls is sent at commit too). Its arguments and
// results are Publish's.
func (p *Publisher[T]) PublishTx(ctx context.Context, tx pgx.Tx, topic string, payload T, opts ...queue.PublishOption) (queue.Message[T], error) {
	if tx == nil {
		return queue.Message[T]{}, backend.Invalid("PublishTx: nil pgx.Tx")
	}
	return p.publish(ctx, tx, topic, payload, opts)
}

func (p *Publisher[T]) publish(ctx context.Context, db dbtx, topic string, payload T, opts []queue.PublishOption) (queue.Message[T], error) {
	var o queue.PublishOptions
	if err := o.Apply(opts...); err != nil {
		return queue.Message[T]{}, err
	}
	if o.DedupIDs != nil {
		return queue.Message[T]{}, backend.Invalid("Publish: WithDedupIDs is for PublishBatch (WithDedupID names one message)")
	}
	if err := p.CheckPublish(topic, o); err != nil {
		return queue.Message[T]{}, err
	}
	if err := ctx.Err(); err != nil {
		return queue.Message[T]{}, err
	}
	if p.b.isClosed() {
		return queue.Message[T]{}, fmt.Errorf("pgleasebus: publish to %q: %w", topic, queue.ErrClosed)
	}
	body, err := p.codec.Encode(nil, payload)
	if err != nil {
		return queue.Message[T]{}, fmt.Errorf("pgleasebus: publish to %q: encode: %w", topic, err)
	}
	body = notNil(body)
	headers, err := headersJSON(o.Headers)
	if err != nil {
		return queue.Message[T]{}, fmt.Errorf("pgleasebus: publish to %q: headers: %w", topic, err)
	}
	if n := len(body) + len(headers); n > p.b.cfg.maxSize {
		return queue.Message[T]{}, fmt.Errorf("pgleasebus: publish to %q: %w: %d bytes, the limit is %d", topic, ErrTooLarge, n, p.b.cfg.maxSize)
	}
	now := p.b.cfg.clk.Now()
	m := queue.Message[T]{ID: uuid.New(), Topic: topic, Key: o.Key, Payload: payload, Priority: o.Priority, Headers: queue.NewHeaders(o.Headers), PublishedAt: now}
	var (
		exists, own bool
		took        int64
		notified    int64
	)
	err = db.QueryRow(ctx, p.b.q.publish, topic, m.ID, o.Key, int16(o.Priority), after(now, o.Delay), int64(o.TTL), now.UnixNano(),
		headers, body, p.b.notify.channel(topic), o.DedupID, int64(p.b.cfg.dedupWindow)).Scan(&exists, &took, &own, &notified)
	if err != nil {
		return queue.Message[T]{}, fmt.Errorf("pgleasebus: publish to %q: %w", topic, err)
	}
	switch {
	case !exists:
		return queue.Message[T]{}, fmt.Errorf("pgleasebus: publish to %q: %w", topic, queue.ErrTopicNotFound)
	case o.DedupID != "" && !own: // a duplicate: stored nothing
		return p.original(ctx, db, topic, o.DedupID, m), nil
	case o.DedupID != "" && rand.IntN(64) == 0:
		p.pruneDedup(ctx, db, now) // now and then, the IDs past their window
	}
	return m, nil
}

// original returns the message a duplicate's dedup ID names while a
// subscription holds it, else this, the duplicate's.
func (p *Publisher[T]) original(ctx context.Context, db dbtx, topic, dedupID string, this queue.Message[T]) queue.Message[T] {
	var id uuid.UUID
	if err := db.QueryRow(ctx, p.b.q.dedupOriginal, topic, dedupID).Scan(&id); err != nil {
		return this
	}
	var (
		m         queue.Message[T]
		prio      int16
		headers   map[string]string
		body      []byte
		published int64
	)
	if err := db.QueryRow(ctx, p.b.q.messageByID, id).Scan(&m.ID, &m.Topic, &m.Key, &prio, &headers, &body, &published); err != nil {
		return this
	}
	payload, err := p.codec.Decode(body)
	if err != nil {
		return this
	}
	m.Payload, m.Priority, m.PublishedAt = payload, queue.Priority(prio), time.Unix(0, published)
	if len(headers) > 0 {
		m.Headers = queue.NewHeaders(headers)
	}
	return m
}

// pruneDedup forgets dedup IDs past the window, a thousand at most.
func (p *Publisher[T]) pruneDedup(ctx context.Context, db dbtx, now time.Time) {
	_, _ = db.Exec(ctx, p.b.q.dedupPrune, now.Add(-p.b.cfg.dedupWindow).UnixNano()) // best effort: the next one prunes too
}

// PublishBatch publishes payloads to topic, in order, in one statement,
// with the same options for each (queue.WithDedupIDs gives each its dedup
// ID: a payload whose ID was published within the window, before or
// earlier in the batch, is not stored again, and its place has the
// original message while a subscription holds it, else its own). It
// returns the messages; an empty batch returns nil.
func (p *Publisher[T]) PublishBatch(ctx context.Context, topic string, payloads []T, opts ...queue.PublishOption) ([]queue.Message[T], error) {
	return p.publishBatch(ctx, p.b.pool, topic, payloads, opts, true)
}

// PublishBatchTx is PublishBatch in the caller's transaction tx.
func (p *Publisher[T]) PublishBatchTx(ctx context.Context, tx pgx.Tx, topic string, payloads []T, opts ...queue.PublishOption) ([]queue.Message[T], error) {
	if tx == nil {
		return nil, backend.Invalid("PublishBatchTx: nil pgx.Tx")
	}
	return p.publishBatch(ctx, tx, topic, payloads, opts, false)
}

func (p *Publisher[T]) publishBatch(ctx context.Context, db dbtx, topic string, payloads []T, opts []queue.PublishOption, wake bool) ([]queue.Message[T], error) {
	var o queue.PublishOptions
	if err := o.Apply(opts...); err != nil {
		return nil, err
	}
	switch {
	case o.DedupID != "":
		return nil, backend.Invalid("PublishBatch: WithDedupID cannot name a batch (WithDedupIDs names each message)")
	case o.DedupIDs != nil && len(o.DedupIDs) != len(payloads):
		return nil, backend.Invalid("PublishBatch: %d dedup IDs for %d payloads", len(o.DedupIDs), len(payloads))
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
	if p.b.isClosed() {
		return nil, fmt.Errorf("pgleasebus: publish to %q: %w", topic, queue.ErrClosed)
	}
	headers, err := headersJSON(o.Headers)
	if err != nil {
		return nil, fmt.Errorf("pgleasebus: publish to %q: headers: %w", topic, err)
	}
	now := p.b.cfg.clk.Now()
	n := len(payloads)
	out := make([]queue.Message[T], n)
	var (
		ids      = make([]uuid.UUID, 0, n)
		keys     = make([]string, 0, n)
		prios    = make([]int16, 0, n)
		visible  = make([]int64, 0, n)
		ttls     = make([]int64, 0, n)
		hdrs     = make([][]byte, 0, n)
		bodies   = make([][]byte, 0, n) // an empty payload: an empty slice, not nil (NULL)
		dedupIDs = make([]string, 0, n)
		first    = map[string]int{} // a dedup ID's first payload in the batch
	)
	for i, payload := range payloads {
		out[i] = queue.Message[T]{ID: uuid.New(), Topic: topic, Key: o.Key, Payload: payload, Priority: o.Priority, Headers: queue.NewHeaders(o.Headers), PublishedAt: now}
		dedup := ""
		if o.DedupIDs != nil {
			dedup = o.DedupIDs[i]
			if j, ok := first[dedup]; ok {
				out[i] = out[j] // earlier in the batch: one message
				continue
			}
			first[dedup] = i
		}
		body, err := p.codec.Encode(nil, payload)
		if err != nil {
			return nil, fmt.Errorf("pgleasebus: publish to %q: payload %d: encode: %w", topic, i, err)
		}
		if n := len(body) + len(headers); n > p.b.cfg.maxSize {
			return nil, fmt.Errorf("pgleasebus: publish to %q: payload %d: %w: %d bytes, the limit is %d", topic, i, ErrTooLarge, n, p.b.cfg.maxSize)
		}
		ids, keys, prios = append(ids, out[i].ID), append(keys, o.Key), append(prios, int16(o.Priority))
		visible, ttls = append(visible, after(now, o.Delay)), append(ttls, int64(o.TTL))
		hdrs, bodies, dedupIDs = append(hdrs, headers), append(bodies, notNil(body)), append(dedupIDs, dedup)
	}
	var (
		exists   bool
		took     int64
		owned    []string
		notified int64
	)
	err = db.QueryRow(ctx, p.b.q.publishBatch, topic, ids, keys, prios, visible, now.UnixNano(), ttls, hdrs, bodies,
		p.b.notify.channel(topic), dedupIDs, int64(p.b.cfg.dedupWindow)).Scan(&exists, &took, &owned, &notified)
	if err != nil {
		return nil, fmt.Errorf("pgleasebus: publish to %q: %w", topic, err)
	}
	if !exists {
		return nil, fmt.Errorf("pgleasebus: publish to %q: %w", topic, queue.ErrTopicNotFound)
	}
	if o.DedupIDs != nil {
		mine := map[string]bool{}
		for _, id := range owned {
			mine[id] = true
		}
		for i := range out {
			if id := o.DedupIDs[i]; !mine[id] && first[id] == i {
				out[i] = p.original(ctx, db, topic, id, out[i])
			} else if !mine[id] {
				out[i] = out[first[id]]
			}
		}
	}
	if wake {
		p.b.wake(topic)
	}
	return out, nil
}
