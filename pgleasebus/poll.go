package pgleasebus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// Poll leases up to n messages, by priority then publish order, and
// blocks until at least one is visible, ctx ends (its error, nothing
// leased) or the handle closes (queue.ErrClosed). Each delivery's lease
// runs the subscription's visibility timeout from the clock's now. A
// message of an ordering key waits while an earlier one of its key is
// leased or waits out a retry. It wakes at a publish of this process at
// once, at another process's through LISTEN/NOTIFY, and at the time the
// next message turns visible, on the bus's clock. n < 1 is an error
// matching queue.ErrInvalidArgument.
func (s *Subscription[T]) Poll(ctx context.Context, n int) ([]queue.Delivery[T], error) {
	if n < 1 {
		return nil, backend.Invalid("Poll: n = %d, must be >= 1", n)
	}
	ds, err := s.poll(ctx, n, s.cfg.vis, nil, true)
	return ds, err
}

// PollWithVisibility is Poll with this call's own visibility timeout in
// place of the subscription's (SQS ReceiveMessage's VisibilityTimeout);
// visibility > 0.
func (s *Subscription[T]) PollWithVisibility(ctx context.Context, n int, visibility time.Duration) ([]queue.Delivery[T], error) {
	if n < 1 {
		return nil, backend.Invalid("PollWithVisibility: n = %d, must be >= 1", n)
	}
	if visibility <= 0 {
		return nil, backend.Invalid("PollWithVisibility: visibility %v, must be > 0", visibility)
	}
	ds, err := s.poll(ctx, n, visibility, nil, true)
	return ds, err
}

// TryPoll leases up to n messages visible now, and never blocks: an error
// (the database's) or none leased returns nil.
func (s *Subscription[T]) TryPoll(n int) []queue.Delivery[T] {
	if n < 1 {
		return nil
	}
	ds, _ := s.poll(context.Background(), n, s.cfg.vis, nil, false)
	return ds
}

// PollFor is Poll as a worker pool asks for it (backend.PoolPoller): it
// marks req.Parking while it waits with nothing to lease, and unparks it
// at the change that wakes it (a publish or settle of this process before
// that returns; another process's at its NOTIFY). It leases for the
// visibility timeout whatever req.Hold asks (held is false), so that the
// pool extends its leases while it holds them: a pool whose process dies
// lets its messages go after one visibility timeout, not after its whole
// extension allowance.
func (s *Subscription[T]) PollFor(ctx context.Context, req backend.PollRequest[T]) ([]queue.Delivery[T], bool, error) {
	if req.Max < 1 {
		return nil, false, backend.Invalid("PollFor: Max = %d, must be >= 1", req.Max)
	}
	if req.Hold < 0 {
		return nil, false, backend.Invalid("PollFor: Hold = %v, must be >= 0", req.Hold)
	}
	ds, err := s.poll(ctx, req.Max, s.cfg.vis, req.Parking, true)
	return ds, false, err
}

func (s *Subscription[T]) poll(ctx context.Context, n int, vis time.Duration, pk *backend.Parking, block bool) ([]queue.Delivery[T], error) {
	if s.isClosed() {
		return nil, s.errClosed("poll")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for {
		ch, closed := s.w.channel() // before the look: a change after it closes ch
		if closed {
			return nil, s.errClosed("poll")
		}
		now := s.bus.cfg.clk.Now()
		ds, err := s.lease(ctx, now, n, vis)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if s.isClosed() {
				return nil, s.errClosed("poll")
			}
			return nil, fmt.Errorf("pgleasebus: poll %s/%s: %w", s.topic, s.name, err)
		}
		if len(ds) > 0 || !block {
			return ds, nil
		}
		next, err := s.nextLook(ctx, now)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("pgleasebus: poll %s/%s: %w", s.topic, s.name, err)
		}
		if err := s.wait(ctx, ch, pk, next); err != nil {
			return nil, err
		}
	}
}

// wait waits on ch (a change), until next on the bus's clock (zero: no
// time), or until ctx ends or the handle closes.
func (s *Subscription[T]) wait(ctx context.Context, ch <-chan struct{}, pk *backend.Parking, next time.Time) error {
	var t backend.Timer
	if !next.IsZero() {
		t = backend.At(s.bus.cfg.clk, next)
		defer t.Stop()
	}
	if !s.w.parkIf(ch, pk, next) {
		return nil // a change since the look: look again
	}
	select {
	case <-ch:
		return nil // the wake-up unparked it
	case <-t.C:
	case <-ctx.Done():
	}
	s.w.unpark(ch, pk)
	return ctx.Err()
}

// nextLook returns when a Poll that found nothing at now looks again: when
// the next message turns visible, or at the poll interval, whichever comes
// first.
func (s *Subscription[T]) nextLook(ctx context.Context, now time.Time) (time.Time, error) {
	next, err := s.nextVisible(ctx, now)
	if look := time.Unix(0, after(now, s.bus.cfg.pollEvery)); err == nil && (next.IsZero() || look.Before(next)) {
		next = look
	}
	return next, err
}

// nextVisible returns when the next message of the subscription turns
// visible (or its lease or TTL runs out), after now; zero if none will
// by itself.
func (s *Subscription[T]) nextVisible(ctx context.Context, now time.Time) (time.Time, error) {
	var at *int64
	if err := s.bus.pool.QueryRow(ctx, s.bus.q.nextVisible, s.id, now.UnixNano()).Scan(&at); err != nil {
		return time.Time{}, err
	}
	if at == nil {
		return time.Time{}, nil
	}
	return time.Unix(0, *at), nil
}

// lease leases up to n messages for vis at now. The lease dead-letters
// the due rows it meets in its walk (their places count toward n); while
// it leases fewer than n and dead-lettered some, it goes on. Then, with
// fewer than n leased, it dead-letters what else is due (a TTL that passed
// while a message waited out a delay, or behind its key) and, if there was
// any, leases again: a key whose head was due may have its next message
// free now. A busy subscription's Poll is one round trip.
func (s *Subscription[T]) lease(ctx context.Context, now time.Time, n int, vis time.Duration) ([]queue.Delivery[T], error) {
	var ds []queue.Delivery[T]
	for {
		got, dead, err := s.leaseOnce(ctx, now, n-len(ds), vis)
		ds = append(ds, got...)
		if err != nil || len(ds) == n {
			return ds, err
		}
		if dead == 0 {
			break
		}
	}
	swept, err := s.sweep(ctx, now)
	if err != nil || swept == 0 {
		return ds, err
	}
	more, _, err := s.leaseOnce(ctx, now, n-len(ds), vis)
	return append(ds, more...), err
}

// sweep dead-letters what is due at now and says how many.
func (s *Subscription[T]) sweep(ctx context.Context, now time.Time) (int64, error) {
	var tag pgconn.CommandTag
	err := s.bus.genericTx(ctx, s.bus.q.sweep, []any{now.UnixNano(), s.id}, func(br pgx.BatchResults) (err error) {
		tag, err = br.Exec()
		return err
	})
	return tag.RowsAffected(), err
}

// leaseOnce leases up to n messages for vis at now, in one round trip,
// and says how many due rows it dead-lettered.
func (s *Subscription[T]) leaseOnce(ctx context.Context, now time.Time, n int, vis time.Duration) ([]queue.Delivery[T], int64, error) {
	ns := now.UnixNano()
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(planSettings)
	batch.Queue(s.bus.q.lease, s.id, ns, n, int64(vis), s.cfg.limit(), s.cfg.keyConcurrency)
	batch.Queue("COMMIT")
	br := s.bus.pool.SendBatch(ctx, batch)
	defer br.Close()
	for range 2 { // BEGIN, the settings
		if _, err := br.Exec(); err != nil {
			return nil, 0, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, 0, err
	}
	type leased struct {
		seq, published, deadline int64
		delivery, attempts       int32
		priority                 int16
		id                       uuid.UUID
		topic, key               string
		headers                  map[string]string
		payload                  []byte
	}
	var (
		got  []leased
		dead int64
	)
	for rows.Next() {
		var l leased
		if err := rows.Scan(&l.seq, &l.delivery, &l.attempts, &l.id, &l.topic, &l.key, &l.priority, &l.headers, &l.payload, &l.published, &l.deadline); err != nil {
			rows.Close()
			return nil, 0, err
		}
		if l.seq < 0 { // the last row: how many were dead-lettered
			dead = l.deadline
			continue
		}
		got = append(got, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return nil, 0, err
	}
	if err := br.Close(); err != nil {
		return nil, 0, err
	}
	slices.SortFunc(got, func(a, b leased) int { // the statement's order, which RETURNING does not keep
		if a.priority != b.priority {
			return int(b.priority) - int(a.priority)
		}
		return cmpInt(a.seq, b.seq)
	})
	ds := make([]queue.Delivery[T], 0, len(got))
	for _, l := range got {
		id := lease.NewID(uint64(s.id), uint64(l.seq), uint32(l.delivery))
		payload, err := s.codec.Decode(l.payload)
		if err != nil {
			_ = s.rejectAt(ctx, id, now, queue.ReasonRejected, "decode: "+err.Error()) // dead-lettered, not delivered
			continue
		}
		m := queue.Message[T]{ID: l.id, Topic: l.topic, Key: l.key, Payload: payload, Priority: queue.Priority(l.priority), PublishedAt: time.Unix(0, l.published)}
		if len(l.headers) > 0 {
			m.Headers = queue.NewHeaders(l.headers)
		}
		ds = append(ds, queue.Delivery[T]{Message: m, LeaseID: id, Attempt: int(l.attempts), Deadline: time.Unix(0, l.deadline), MaxAttempts: s.cfg.limit()})
	}
	s.mu.Lock()
	for _, d := range ds {
		s.counters.delivered++
		if d.Attempt > 1 {
			s.counters.redelivered++
		}
	}
	s.mu.Unlock()
	return ds, dead, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// headersJSON encodes a message's headers for its jsonb column (nil: none).
func headersJSON(h map[string]string) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	return json.Marshal(h)
}

// AwaitParked waits until n of this handle's Polls are parked: waiting
// with nothing to lease, their wake-up armed on the bus's clock, so that
// a test that moves a mock clock knows whom it will wake. It returns
// ctx's error if ctx ends first, and queue.ErrClosed if the handle closes.
func (s *Subscription[T]) AwaitParked(ctx context.Context, n int) error {
	if n < 0 {
		return backend.Invalid("AwaitParked: n = %d, must be >= 0", n)
	}
	return s.w.awaitParked(ctx, n)
}

// AwaitIdle blocks until the subscription holds nothing (no message
// visible, delayed, held back or in flight), returning nil then, ctx's
// error if ctx ends first, or queue.ErrClosed if the handle closes
// (backend.IdleAwaiter: poller.RunUntilIdle needs it).
func (s *Subscription[T]) AwaitIdle(ctx context.Context) error { return s.AwaitIdleFor(ctx, nil) }

// AwaitIdleFor is AwaitIdle with pk marked while it waits
// (backend.PoolIdleAwaiter).
func (s *Subscription[T]) AwaitIdleFor(ctx context.Context, pk *backend.Parking) error {
	for {
		if s.isClosed() {
			return s.errClosed("await idle")
		}
		ch, _ := s.w.channel()
		now := s.bus.cfg.clk.Now()
		var left int64
		batch := &pgx.Batch{}
		batch.Queue(s.bus.q.sweep, now.UnixNano(), s.id)
		batch.Queue(`SELECT count(*) FROM `+s.bus.cfg.schema+`.messages WHERE sub_id = $1`, s.id)
		br := s.bus.pool.SendBatch(ctx, batch)
		_, err := br.Exec()
		if err == nil {
			err = br.QueryRow().Scan(&left)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("pgleasebus: await idle %s/%s: %w", s.topic, s.name, err)
		}
		if left == 0 {
			return nil
		}
		next, err := s.nextLook(ctx, now)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("pgleasebus: await idle %s/%s: %w", s.topic, s.name, err)
		}
		if err := s.wait(ctx, ch, pk, next); err != nil {
			if errors.Is(err, ctx.Err()) {
				return err
			}
			return err
		}
	}
}
