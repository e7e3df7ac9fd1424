package core

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// Poll leases up to n visible messages (never more than MaxInFlight
// allows), blocking until at least one is visible, ctx is done (its error
// is returned and nothing is leased) or the queue closes (ErrClosed). n < 1
// is an error matching ErrInvalidArgument.
func (q *Queue[T]) Poll(ctx context.Context, n int) ([]queue.Delivery[T], error) {
	if n < 1 {
		return nil, invalid("Poll: n = %d, must be >= 1", n)
	}
	return q.poll(ctx, nil, n, true, 0, nil)
}

// PollWithVisibility is Poll with this call's own visibility timeout in
// place of the queue's (SQS ReceiveMessage's VisibilityTimeout).
// visibility must be > 0.
func (q *Queue[T]) PollWithVisibility(ctx context.Context, n int, visibility time.Duration) ([]queue.Delivery[T], error) {
	switch {
	case n < 1:
		return nil, invalid("PollWithVisibility: n = %d, must be >= 1", n)
	case visibility <= 0:
		return nil, invalid("PollWithVisibility: visibility = %v, must be > 0", visibility)
	}
	return q.poll(ctx, nil, n, true, visibility, nil)
}

// PollInto is Poll filling the caller's buffer: it leases up to len(dst)
// messages into dst and returns how many. A worker loop that reuses its
// buffer allocates nothing. An empty dst is an error matching
// ErrInvalidArgument.
func (q *Queue[T]) PollInto(ctx context.Context, dst []queue.Delivery[T]) (int, error) {
	if len(dst) == 0 {
		return 0, invalid("PollInto: empty buffer")
	}
	ds, err := q.poll(ctx, dst[:0], len(dst), true, 0, nil)
	return len(ds), err
}

// TryPoll is Poll that never blocks: it returns what is visible now, up to
// n, or nothing. It returns nil for n < 1 and after Close; TryPollInto
// reports those as errors.
func (q *Queue[T]) TryPoll(n int) []queue.Delivery[T] {
	if n < 1 {
		return nil
	}
	ds, _ := q.poll(context.Background(), nil, n, false, 0, nil)
	return ds
}

// TryPollInto is PollInto that never blocks: it fills dst with what is
// visible now and returns how many (possibly 0).
func (q *Queue[T]) TryPollInto(dst []queue.Delivery[T]) (int, error) {
	if len(dst) == 0 {
		return 0, invalid("TryPollInto: empty buffer")
	}
	ds, err := q.poll(context.Background(), dst[:0], len(dst), false, 0, nil)
	return len(ds), err
}

// poll leases up to n messages into dst for vis (0: the queue's visibility
// timeout, or h's hold), waiting for one if block; h (nil: none) is a
// pool's request.
func (q *Queue[T]) poll(ctx context.Context, dst []queue.Delivery[T], n int, block bool, vis time.Duration, h *hint) ([]queue.Delivery[T], error) {
	if ctx == nil {
		return dst, invalid("Poll: nil context")
	}
	if err := ctx.Err(); err != nil {
		return dst, err
	}
	for {
		now, err := q.lock()
		if err != nil {
			return dst, err
		}
		if q.canLeaseLocked(now) || !block {
			before := len(dst)
			dst = q.leaseLocked(now, dst, n, q.holdLocked(h, vis))
			if len(dst) > before || !block {
				return dst, q.unlock()
			}
			// Every visible message waited for its key's token: park.
		}
		// About to park: say so, then look at the inbox a last time. An
		// Offer that took it after this look sees the flag and drains it
		// (which wakes this Poll); one before, this look finds.
		q.in.waiting.Store(true)
		q.drainLocked()
		if q.canLeaseLocked(now) {
			before := len(dst)
			dst = q.leaseLocked(now, dst, n, q.holdLocked(h, vis))
			if len(dst) > before {
				q.in.waiting.Store(q.wake != nil) // set while a Poll waits
				return dst, q.unlock()
			}
		}
		next, timed := q.nextEventLocked(now)
		if q.wake == nil { // none yet, or the drain's wake-up closed it (and cleared waiting)
			q.wake = make(chan struct{})
			q.in.waiting.Store(true)
		}
		wake := q.wake
		q.unlock()

		if err := q.wait(ctx, h, wake, next, timed); err != nil {
			return dst, err
		}
	}
}

// wait blocks until woken is closed, the clock reaches next (if timed) or
// ctx is done. The wake-up is armed outside the lock (arming takes the
// clock's own lock), then the state is checked again before the poller
// counts as parked, and marks the Parking of h (nil: none).
func (q *Queue[T]) wait(ctx context.Context, h *hint, woken chan struct{}, next time.Time, timed bool) error {
	var fire <-chan struct{}
	if timed {
		t := backend.At(q.clock, next) // never a mock channel timer, never late (see package wake)
		defer t.Stop()
		fire = t.C
	}
	q.mu.Lock()
	select {
	case <-woken:
		q.mu.Unlock()
		return nil
	default:
	}
	if q.closed || (timed && !q.clock.Now().Before(next)) {
		q.mu.Unlock()
		return nil
	}
	var wake time.Time // zero: only a change wakes it
	if timed {
		wake = next
	}
	q.parkLocked(h.parking(), wake)
	q.mu.Unlock()

	select {
	case <-woken:
	case <-fire:
	case <-ctx.Done():
	}
	q.mu.Lock()
	select {
	case <-woken: // wakeLocked uncounted every parked poller when it closed it
	default:
		q.unparkLocked(h.parking())
	}
	q.mu.Unlock()
	return ctx.Err()
}

// setParkedLocked counts delta more parked Polls and wakes AwaitParked.
func (w *waiters) setParkedLocked(delta int) {
	w.parked += delta
	if w.parkCh != nil {
		close(w.parkCh)
		w.parkCh = nil
	}
}

// Parked returns how many Poll calls are waiting now, their timers armed.
// A poller stops counting the moment a publish, nack or close wakes it; one
// woken by its timer stops counting when it runs again.
func (q *Queue[T]) Parked() int {
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.parked
}

// AwaitParked blocks until at least n Poll calls are parked: waiting, with
// their wake-up timer armed on the clock. A test that drives a mock clock
// calls it before Add, so that the pollers it means to wake are sure to be
// asleep on the mock's timers rather than still on their way there. It
// returns ctx's error if ctx ends first, ErrClosed if the queue closes, and
// an error matching ErrInvalidArgument for n < 0.
func (q *Queue[T]) AwaitParked(ctx context.Context, n int) error {
	if q == nil {
		return errNilQueue
	}
	if ctx == nil {
		return invalid("AwaitParked: nil context")
	}
	if n < 0 {
		return invalid("AwaitParked: n = %d, must be >= 0", n)
	}
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return fmt.Errorf("await parked: %w", queue.ErrClosed)
		}
		if q.parked >= n {
			q.mu.Unlock()
			return nil
		}
		if q.parkCh == nil {
			q.parkCh = make(chan struct{})
		}
		ch := q.parkCh
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// AwaitIdle blocks until the queue holds nothing at all: no message
// visible, delayed, held back behind its ordering key or in flight. It
// settles what is due at the clock's now first, as every call does, so an
// expired lease on its last attempt counts as dead-lettered, and it is
// woken by every change that can empty the queue (an ack, a dead letter, a
// purge, an expiry settled by another call) and, on the injected clock, by
// the next time something falls due (a delay, a TTL, a lease's deadline),
// so a queue that time alone empties (a TTL passing, a lease abandoned on
// its last attempt) ends the wait. On a mock clock that is when the clock
// is moved there; a delayed message keeps the queue busy until then.
//
// Idle is a moment, not a promise: a publish right after it returns makes
// the queue busy again. A worker pool that stops at idle (poller's
// RunUntilIdle) relies on this: while it holds a lease the queue is not
// idle, and a message a handler publishes is held before its own lease is
// settled.
//
// It returns nil when the queue is idle, ctx's error if ctx ends first, an
// error matching ErrClosed if the queue closes, and an error matching
// ErrInvalidArgument for a nil ctx.
func (q *Queue[T]) AwaitIdle(ctx context.Context) error { return q.awaitIdle(ctx, nil) }

// awaitIdle is AwaitIdle marking pk (nil: none) while it waits.
func (q *Queue[T]) awaitIdle(ctx context.Context, pk *backend.Parking) error {
	if ctx == nil {
		return invalid("AwaitIdle: nil context")
	}
	for {
		if _, err := q.lock(); err != nil {
			return fmt.Errorf("await idle: %w", err)
		}
		if q.idleLocked() {
			return q.unlock()
		}
		if q.idle == nil {
			q.idle = make(chan struct{})
		}
		ch := q.idle
		// What time alone can settle (a delay, a TTL, a lease's deadline)
		// may empty the queue with no other call: wake for the earliest.
		due := q.nextDueLocked()
		if err := q.unlock(); err != nil {
			return err
		}
		var t backend.Timer
		if due != farTick {
			t = backend.At(q.clock, q.timeOf(due)) // armed outside the lock, as Poll's
		}
		marked := q.parkIdle(pk, ch, due)
		select {
		case <-ch:
		case <-t.C: // nil, so never, when nothing is due
		case <-ctx.Done():
		}
		t.Stop()
		q.unparkIdle(marked)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// idleLocked reports whether the queue holds nothing and has handed every
// dead letter it made to onDead.
func (q *Queue[T]) idleLocked() bool { return q.nheld == 0 && q.handing == 0 && !q.in.claimed() }

// signalIdleLocked wakes the AwaitIdle calls waiting, if the queue holds
// nothing or is closed.
func (q *Queue[T]) signalIdleLocked() {
	if q.idle != nil && (q.idleLocked() || q.closed) {
		close(q.idle)
		q.idle = nil
		q.idleParkings.clear()
	}
}

// canLeaseLocked reports whether a message is visible and nothing keeps
// it from being leased at now: not a pause, MaxInFlight or RateLimit (a
// key's rate limit is found message by message, by leaseLocked).
func (q *Queue[T]) canLeaseLocked(now time.Time) bool {
	return q.ready.len() > 0 && !q.paused && (q.cfg.MaxInFlight == 0 || q.inflight.Len() < q.cfg.MaxInFlight) &&
		(q.cfg.RateLimit.IsZero() || q.cfg.RateLimit.Tokens(q.rateFull, now) > 0)
}

// leaseLocked leases up to n ready messages into dst: fewer where
// MaxInFlight or RateLimit allows fewer, and none of a key whose
// KeyRateLimit has no token (those wait for it; see takeKeyTokenLocked).
func (q *Queue[T]) leaseLocked(now time.Time, dst []queue.Delivery[T], n int, vis time.Duration) []queue.Delivery[T] {
	k := min(n, q.ready.len())
	if q.cfg.MaxInFlight > 0 {
		k = min(k, q.cfg.MaxInFlight-q.inflight.Len())
	}
	rated := !q.cfg.RateLimit.IsZero()
	if rated {
		k = min(k, q.cfg.RateLimit.Tokens(q.rateFull, now))
	}
	if k <= 0 || q.paused {
		return dst
	}
	dst = slices.Grow(dst, k)
	if vis == 0 {
		vis = q.cfg.VisibilityTimeout
	}
	start := len(dst)
	deadline := now.Add(vis)
	at := q.tickOf(deadline)
	began := at - tick(vis)                  // the tick of now, without converting it again
	maxAttempts := max(q.cfg.MaxAttempts, 0) // UnlimitedAttempts is 0 in a Delivery
	keyRated := !q.cfg.KeyRateLimit.IsZero()
	for leased := 0; leased < k; {
		e := q.ready.pop()
		if e == nil {
			break // what was visible waits for its keys' tokens
		}
		if keyRated && e.is(keyed) && !q.takeKeyTokenLocked(now, e) {
			continue
		}
		leased++
		if q.ttlWaitingLocked(e) {
			q.ttl.remove(int(q.ttlOf(e).index))
		}
		e.delivery++
		e.attempt++
		e.flags |= leaseOpen
		e.state = stateLeased
		e.at = at
		e.leased = began
		q.inflight.Push(e)
		q.dueAt(at)
		q.stats.Delivered++
		if e.attempt > 1 {
			q.stats.Redelivered++
		}
		// Field by field into its slot (every field: a reused buffer holds
		// an older delivery), not a literal: the compiler builds a literal
		// on the stack and copies it over in 16-byte loads, which wait
		// for the lease ID's 8-byte stores to drain.
		dst = dst[:len(dst)+1]
		d := &dst[len(dst)-1]
		d.Message = *e.msg
		d.LeaseID = lease.NewID(q.scope, e.seq(), e.delivery)
		d.Attempt = int(e.attempt)
		d.Deadline = deadline
		d.MaxAttempts = maxAttempts
	}
	if rated {
		q.rateFull = q.cfg.RateLimit.Take(q.rateFull, now, len(dst)-start)
	}
	if q.rec != nil && len(dst) > start {
		q.dirty = true
		q.rec.Delivered(dst[start:])
	}
	return dst
}

// nextEventLocked returns the earliest future time at which the state
// changes by itself: a delayed message turns visible (or one waiting for
// its key's token gets it), a lease expires, or the subscription's bucket
// gains the token a visible message waits for.
func (q *Queue[T]) nextEventLocked(now time.Time) (time.Time, bool) {
	var next tick
	ok := false
	if q.delayed.len() > 0 {
		next, ok = q.delayed.top().at, true
	}
	if q.limited.len() > 0 && (!ok || q.limited.top().at < next) {
		next, ok = q.limited.top().at, true
	}
	if e := q.inflight.Peek(); e != nil && (!ok || e.at < next) {
		next, ok = e.at, true
	}
	if r := q.cfg.RateLimit; !r.IsZero() && q.ready.len() > 0 && r.Tokens(q.rateFull, now) == 0 {
		if at := q.tickOf(r.NextToken(q.rateFull, now)); !ok || at < next {
			next, ok = at, true
		}
	}
	return q.timeOf(next), ok
}
