package pgleasebus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leasebus/leasebus/queue"
)

// Stats returns the subscription's figures, after settling what is due
// at the clock's now: its gauges (visible, delayed, in flight, held back,
// the oldest visible message's age) as the database holds them, counted
// over the subscription's rows by its indexes (no table scan, and none
// on a Poll, an Ack or a Publish: Stats costs what the subscription
// holds); its dead letters by reason from the dead-letter table; and, of
// the counters, what this handle counted (Delivered, Redelivered, Acked:
// the database keeps no history of what went through, so another
// process's handle counts its own). Published stays 0.
func (s *Subscription[T]) Stats(ctx context.Context) (queue.Stats, error) {
	if s.isClosed() {
		return queue.Stats{}, s.errClosed("stats")
	}
	st, err := s.bus.gauges(ctx, s.id, s.cfg)
	if err != nil {
		return queue.Stats{}, err
	}
	s.mu.Lock()
	st.Delivered, st.Redelivered, st.Acked = s.counters.delivered, s.counters.redelivered, s.counters.acked
	s.mu.Unlock()
	return st, nil
}

// gauges returns what the database holds of subscription id (of settings
// c), after settling what is due: Stats's gauges, dead letters and pause.
func (b *Bus) gauges(ctx context.Context, id int64, c subConfig) (queue.Stats, error) {
	ns := b.now()
	var st queue.Stats
	batch := &pgx.Batch{}
	batch.Queue(b.q.sweep, ns, id)
	batch.Queue(b.q.stats, id, ns, c.keyConcurrency, c.limit())
	batch.Queue(b.q.deadCount, id)
	batch.Queue(`SELECT paused FROM `+b.cfg.schema+`.subscriptions WHERE id = $1`, id)
	br := b.pool.SendBatch(ctx, batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return queue.Stats{}, fmt.Errorf("pgleasebus: stats: %w", err)
	}
	var visible, delayed, inflight, heldBack, oldest int64
	if err := br.QueryRow().Scan(&visible, &delayed, &inflight, &heldBack, &oldest); err != nil {
		return queue.Stats{}, fmt.Errorf("pgleasebus: stats: %w", err)
	}
	st.Visible, st.Delayed, st.InFlight, st.HeldBack = int(visible), int(delayed), int(inflight), int(heldBack)
	if oldest > 0 && ns > oldest {
		st.OldestVisibleAge = time.Duration(ns - oldest)
	}
	rows, err := br.Query()
	if err != nil {
		return queue.Stats{}, fmt.Errorf("pgleasebus: stats: %w", err)
	}
	for rows.Next() {
		var reason int16
		var n int64
		if err := rows.Scan(&reason, &n); err != nil {
			rows.Close()
			return queue.Stats{}, fmt.Errorf("pgleasebus: stats: %w", err)
		}
		st.DeadLettered += uint64(n)
		switch queue.Reason(reason) {
		case queue.ReasonMaxAttempts:
			st.DeadLetteredBy.MaxAttempts += uint64(n)
		case queue.ReasonExpired:
			st.DeadLetteredBy.Expired += uint64(n)
		case queue.ReasonRejected:
			st.DeadLetteredBy.Rejected += uint64(n)
		case queue.ReasonCancelled:
			st.DeadLetteredBy.Cancelled += uint64(n)
		case queue.ReasonOverflow:
			st.DeadLetteredBy.Overflow += uint64(n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return queue.Stats{}, fmt.Errorf("pgleasebus: stats: %w", err)
	}
	if err := br.QueryRow().Scan(&st.Paused); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			err = queue.ErrSubscriptionNotFound
		}
		return queue.Stats{}, fmt.Errorf("pgleasebus: stats: %w", err)
	}
	return st, nil
}

// Peek returns what the subscription holds, in publish order, leasing
// nothing and changing nothing, as q asks (queue.PeekQuery: a state, the
// messages after a Seq, a limit, one ID or one key), after settling what
// is due. The query runs in the database on the subscription's
// publish-order index; a message's Seq is its publish order, shared by
// every subscription's copy. A message whose payload the codec cannot
// decode is left out (the Poll that leases it dead-letters it).
func (s *Subscription[T]) Peek(ctx context.Context, q queue.PeekQuery) ([]queue.Held[T], error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, s.errClosed("peek")
	}
	return peek(ctx, s.bus, s.id, s.cfg, s.codec, q)
}

// peek is Peek of subscription id, of settings c, decoding with codec.
func peek[T any](ctx context.Context, b *Bus, id int64, c subConfig, codec queue.Codec[T], q queue.PeekQuery) ([]queue.Held[T], error) {
	ns := b.now()
	var only *uuid.UUID
	if q.ID != (uuid.UUID{}) {
		only = &q.ID
	}
	batch := &pgx.Batch{}
	batch.Queue(b.q.sweep, ns, id)
	batch.Queue(b.q.peek, id, ns, int64(min(q.After, math.MaxInt64)), c.keyConcurrency, q.Limit, only, q.Key, int(q.State))
	br := b.pool.SendBatch(ctx, batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("pgleasebus: peek: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("pgleasebus: peek: %w", err)
	}
	defer rows.Close()
	var out []queue.Held[T]
	for rows.Next() {
		var (
			seq, published, at    int64
			mid                   uuid.UUID
			topic, key, lastError string
			priority              int16
			attempts, state       int32
			headers               map[string]string
			payload, hist         []byte
		)
		if err := rows.Scan(&seq, &mid, &topic, &key, &priority, &headers, &payload, &published, &at, &attempts,
			&lastError, &hist, &state); err != nil {
			return nil, fmt.Errorf("pgleasebus: peek: %w", err)
		}
		p, err := codec.Decode(payload)
		if err != nil {
			continue
		}
		h := queue.Held[T]{
			Message: queue.Message[T]{ID: mid, Topic: topic, Key: key, Payload: p, Priority: queue.Priority(priority), PublishedAt: time.Unix(0, published)},
			Seq:     uint64(seq), State: queue.State(state), Attempts: int(attempts), LastError: lastError, History: history(hist),
		}
		if h.State == queue.StateDelayed || h.State == queue.StateInFlight {
			h.At = time.Unix(0, at)
		}
		if len(headers) > 0 {
			h.Message.Headers = queue.NewHeaders(headers)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgleasebus: peek: %w", err)
	}
	return out, nil
}

// Purge deletes every message the subscription holds, leased or not, and
// returns how many (a lease out then acks nothing: ErrLeaseNotFound).
func (s *Subscription[T]) Purge(ctx context.Context) (int, error) {
	if s.isClosed() {
		return 0, s.errClosed("purge")
	}
	return s.bus.purge(ctx, s.id, s.topic)
}

func (b *Bus) purge(ctx context.Context, id int64, topic string) (int, error) {
	tag, err := b.pool.Exec(ctx, b.q.purge, id)
	if err != nil {
		return 0, fmt.Errorf("pgleasebus: purge: %w", err)
	}
	b.wake(topic)
	return int(tag.RowsAffected()), nil
}

// Pause stops delivery of the subscription, in every process: a Poll
// leases nothing (it waits), and publishes go on. Resume starts it again.
func (s *Subscription[T]) Pause(ctx context.Context) error { return s.setPaused(ctx, true) }

// Resume starts delivery of a paused subscription again.
func (s *Subscription[T]) Resume(ctx context.Context) error { return s.setPaused(ctx, false) }

func (s *Subscription[T]) setPaused(ctx context.Context, paused bool) error {
	if s.isClosed() {
		return s.errClosed("pause")
	}
	return s.bus.setPaused(ctx, s.id, s.topic, paused)
}

func (b *Bus) setPaused(ctx context.Context, id int64, topic string, paused bool) error {
	var n int64
	var notified any
	if err := b.pool.QueryRow(ctx, b.q.setPaused, id, paused, b.cfg.schema, topic).Scan(&n, &notified); err != nil {
		return fmt.Errorf("pgleasebus: pause: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("pgleasebus: pause: %w", queue.ErrSubscriptionNotFound)
	}
	b.wake(topic)
	return nil
}
