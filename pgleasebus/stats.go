package pgleasebus

import (
	"context"
	"fmt"
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
	now := s.bus.cfg.clk.Now()
	ns := now.UnixNano()
	var st queue.Stats
	batch := &pgx.Batch{}
	batch.Queue(s.bus.q.sweep, ns, s.id)
	batch.Queue(s.bus.q.stats, s.id, ns, s.cfg.keyConcurrency, s.cfg.limit())
	batch.Queue(s.bus.q.deadCount, s.id)
	batch.Queue(`SELECT paused FROM `+s.bus.cfg.schema+`.subscriptions WHERE id = $1`, s.id)
	br := s.bus.pool.SendBatch(ctx, batch)
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
		case queue.ReasonOverflow:
			st.DeadLetteredBy.Overflow += uint64(n)
		}
	}
	rows.Close()
	if err := br.QueryRow().Scan(&st.Paused); err != nil {
		return queue.Stats{}, fmt.Errorf("pgleasebus: stats: %w", err)
	}
	s.mu.Lock()
	st.Delivered, st.Redelivered, st.Acked = s.counters.delivered, s.counters.redelivered, s.counters.acked
	s.mu.Unlock()
	return st, nil
}

// Peek returns what the subscription holds, in publish order, leasing
// nothing and changing nothing, as q asks (queue.PeekQuery: a state, the
// messages after a Seq, a limit, one ID or one key), after settling what
// is due. A message's Seq is its publish order, shared by every
// subscription's copy.
func (s *Subscription[T]) Peek(ctx context.Context, q queue.PeekQuery) ([]queue.Held[T], error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, s.errClosed("peek")
	}
	now := s.bus.cfg.clk.Now()
	ns := now.UnixNano()
	if _, err := s.bus.pool.Exec(ctx, s.bus.q.sweep, ns, s.id); err != nil {
		return nil, fmt.Errorf("pgleasebus: peek: %w", err)
	}
	limit := q.Limit
	if limit == 0 {
		limit = queue.MaxPeek
	}
	var out []queue.Held[T]
	for after := int64(q.After); len(out) < limit; {
		rows, err := s.bus.pool.Query(ctx, s.bus.q.peek, s.id, after, 500, s.cfg.keyConcurrency, s.cfg.limit())
		if err != nil {
			return nil, fmt.Errorf("pgleasebus: peek: %w", err)
		}
		n := 0
		for rows.Next() {
			n++
			var (
				seq, published, visibleAt int64
				id                        uuid.UUID
				topic, key, lastError     string
				priority, state           int16
				attempts                  int32
				headers                   map[string]string
				payload, hist             []byte
				keyOK, deliverable        bool
			)
			if err := rows.Scan(&seq, &id, &topic, &key, &priority, &headers, &payload, &published, &state, &visibleAt, &attempts,
				&lastError, &hist, &keyOK, &deliverable); err != nil {
				rows.Close()
				return nil, fmt.Errorf("pgleasebus: peek: %w", err)
			}
			after = seq
			h := queue.Held[T]{Seq: uint64(seq), Attempts: int(attempts), LastError: lastError, History: history(hist)}
			switch {
			case state == stateLeased && visibleAt > ns:
				h.State, h.At = queue.StateInFlight, time.Unix(0, visibleAt)
			case visibleAt > ns:
				h.State, h.At = queue.StateDelayed, time.Unix(0, visibleAt)
			case !keyOK:
				h.State = queue.StateHeldBack
			default:
				h.State = queue.StateVisible
			}
			if q.State != 0 && h.State != q.State || q.ID != (uuid.UUID{}) && id != q.ID || q.Key != "" && key != q.Key {
				continue
			}
			p, err := s.codec.Decode(payload)
			if err != nil {
				continue // shown by no peek: the next Poll dead-letters it
			}
			h.Message = queue.Message[T]{ID: id, Topic: topic, Key: key, Payload: p, Priority: queue.Priority(priority), PublishedAt: time.Unix(0, published)}
			if len(headers) > 0 {
				h.Message.Headers = queue.NewHeaders(headers)
			}
			out = append(out, h)
			if len(out) == limit {
				break
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("pgleasebus: peek: %w", err)
		}
		if n < 500 {
			break
		}
	}
	return out, nil
}

// Purge deletes every message the subscription holds, leased or not, and
// returns how many (a lease out then acks nothing: ErrLeaseNotFound).
func (s *Subscription[T]) Purge(ctx context.Context) (int, error) {
	if s.isClosed() {
		return 0, s.errClosed("purge")
	}
	tag, err := s.bus.pool.Exec(ctx, s.bus.q.purge, s.id)
	if err != nil {
		return 0, fmt.Errorf("pgleasebus: purge: %w", err)
	}
	s.bus.wake(s.topic)
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
	if _, err := s.bus.pool.Exec(ctx, s.bus.q.setPaused, s.id, paused, s.bus.cfg.schema, s.topic); err != nil {
		return fmt.Errorf("pgleasebus: pause: %w", err)
	}
	s.bus.wake(s.topic)
	return nil
}
