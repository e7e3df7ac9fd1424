// Package core is one subscription's queue: priorities, the bounded ready
// lanes, the delayed heap, the in-flight table, attempts, retry backoff,
// dead-lettering and the blocking Poll, with the hooks a durable broker
// needs (a Recorder, Restore, Freeze). Its words are package queue's.
//
// A Queue owns its lock and its wake-ups; the lease heap below it is pure
// data. Package broker builds topics and fan-out on top of it; users meet a
// Queue through a broker.Subscription.
package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/internal/leaseheap"
	"github.com/leasebus/leasebus/internal/vocab"
	"github.com/leasebus/leasebus/internal/wake"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// chunk is how many entries the arena allocates at once.
const chunk = 1024

// errExpiredText is what a dead letter records when its last lease expired.
const errExpiredText = vocab.LeaseExpired

// Queue is one subscription's bounded queue of leased messages. It is safe
// for concurrent use. Create one with New.
type Queue[T any] struct {
	cfg    Config // immutable after New; defaults filled in
	clock  clock.Clock
	scope  uint64          // the scope of every lease ID this queue issues
	onDead func(Letter[T]) // receives dead letters, called outside the lock; may be nil
	rec    Recorder[T]     // told of every change (durable mode); nil in memory

	mu       sync.Mutex // guards everything below
	closed   bool
	arena    [][]entry[T] // every entry, held or free, by slot, in chunks (pointers stay valid)
	slots    uint32       // slots in the arena
	free     []uint32     // free slots
	nheld    int          // entries held
	maxGen   uint32       // the highest generation handed out: a new chunk starts above it
	ready    ready[T]
	delayed  entryHeap[T] // by (visibleAt, place)
	ttl      entryHeap[T] // waiting entries that have a TTL, by expiresAt
	inflight leaseheap.Heap[*entry[T]]
	keys     map[string]*keyQueue[T] // ordering keys with a message held
	heldBack int                     // entries held back behind their key's head
	nextSeq  uint64                  // the last place handed out
	stats    Stats                   // the counters; Stats fills in the gauges
	pending  []Letter[T]             // dead letters to hand to onDead after unlocking
	dirty    bool                    // something was recorded since the last unlock

	wake   chan struct{} // closed and dropped to wake waiting Polls; nil when none wait
	parked int           // Polls waiting with their timer armed
	parkCh chan struct{} // closed and dropped when parked changes
	room   chan struct{} // closed and dropped when room appears (OverflowBlock)
	idle   chan struct{} // closed and dropped, on unlock, when the queue is empty or closed; nil when none wait
}

// New returns an empty queue. onDead, if not nil, receives every message the
// queue dead-letters, in order, outside the queue's lock (it may call back
// into the queue); with a nil onDead dead letters are only counted.
func New[T any](cfg Config, onDead func(Letter[T])) (*Queue[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = withDefaults(cfg)
	q := &Queue[T]{
		cfg:    cfg,
		clock:  cfg.Clock,
		scope:  rand.Uint64() | 1, // never 0: the zero ID is never issued
		onDead: onDead,
	}
	q.resetLocked()
	return q, nil
}

// resetLocked empties every structure. Freed slots keep their
// generation, so a lease issued before can never name a later entry.
func (q *Queue[T]) resetLocked() {
	q.free = q.free[:0]
	for slot := q.slots; slot > 0; slot-- {
		e := q.entryAt(slot - 1)
		*e = entry[T]{slot: e.slot, gen: e.gen}
		q.free = append(q.free, slot-1)
	}
	q.nheld = 0
	q.ready = ready[T]{}
	for i := range q.ready.lanes {
		q.ready.lanes[i].back = newEntryHeap(byPlace[T], false)
	}
	q.delayed = newEntryHeap(byVisibleAt[T], false)
	q.ttl = newEntryHeap(byExpiry[T], true)
	q.inflight.Clear()
	q.keys = nil
	q.heldBack = 0
}

// entryAt returns the entry in a slot, which must be below q.slots.
func (q *Queue[T]) entryAt(slot uint32) *entry[T] { return &q.arena[slot/chunk][slot%chunk] }

// OfferOption adjusts one Offer.
type OfferOption struct {
	kind offerKind
	ttl  time.Duration
	note any
}

type offerKind uint8

const (
	offerTTL      offerKind = iota // WithTTL (the zero OfferOption: TTL 0, invalid)
	offerNote                      // WithNote
	offerDeferred                  // WithDeferredCommit: the caller commits the Recorder
)

// WithTTL gives an offered message a time to live from its publish,
// overriding Config.TTL: if it has not been acked by then it is
// dead-lettered with ReasonExpired instead of being delivered (a message in
// flight may still be acked). d must be > 0.
func WithTTL(d time.Duration) OfferOption { return OfferOption{ttl: d} }

// Config returns the queue's configuration with every default filled in.
func (q *Queue[T]) Config() Config {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cfg
}

// Offer adds m to the queue, visible after delay (0: at once). m is shared,
// not copied: neither the caller nor the queue may change it afterwards.
// When the queue is full its overflow policy decides (see OverflowPolicy).
//
// With an ordering key (m.Key), the message is held back while an earlier
// message of its key is held, so a key's messages are delivered one at a
// time, in publish order.
//
// Offer takes m.PublishedAt, when set, as the current time: the delay
// counts from the publish, so every subscription of one publish agrees,
// and a fan-out reads the clock once. A zero PublishedAt means the clock's
// now.
func (q *Queue[T]) Offer(ctx context.Context, m *Message[T], delay time.Duration, opts ...OfferOption) error {
	var ttl time.Duration // 0: the queue's, read under the lock
	var note any
	deferred := false
	for _, o := range opts {
		switch {
		case o.kind == offerDeferred:
			deferred = true
		case o.kind == offerNote:
			note = o.note
		case o.ttl <= 0:
			return invalid("Offer: TTL = %v, must be > 0", o.ttl)
		default:
			ttl = o.ttl
		}
	}
	switch {
	case ctx == nil:
		return invalid("Offer: nil context")
	case m == nil:
		return invalid("Offer: nil message")
	case !m.Priority.Valid():
		return invalid("Offer: priority %v, must be PriorityLow..PriorityCritical", m.Priority)
	case delay < 0:
		return invalid("Offer: delay = %v, must be >= 0", delay)
	}
	at := m.PublishedAt
	for {
		now, err := q.lockAt(at)
		if err != nil {
			return err
		}
		if ttl == 0 {
			ttl = q.cfg.TTL
		}
		if q.nheld < q.cfg.MaxQueue {
			q.insertLocked(now, m, delay, ttl, note)
			return q.unlockOffer(deferred)
		}
		switch q.cfg.Overflow {
		case OverflowReject:
			q.stats.Rejected++
			q.unlock()
			return &FullError{Subscription: q.cfg.Name, Limit: q.cfg.MaxQueue}
		case OverflowDropOldest:
			if e := q.ready.popOldestLowest(); e != nil {
				q.stats.Dropped++
				if q.rec != nil {
					q.dirty = true
					q.rec.Removed(e.msg)
				}
				q.finishLocked(now, e)
				q.insertLocked(now, m, delay, ttl, note)
			} else { // nothing visible to drop: the newcomer goes
				q.stats.Published++
				q.stats.Dropped++
			}
			return q.unlockOffer(deferred)
		case OverflowBlock:
			if err := ctx.Err(); err != nil {
				q.stats.Rejected++
				q.unlock()
				return &FullError{Subscription: q.cfg.Name, Limit: q.cfg.MaxQueue, Err: err}
			}
			if q.room == nil {
				q.room = make(chan struct{})
			}
			room := q.room
			q.unlock()
			select {
			case <-room:
			case <-ctx.Done():
			}
			at = time.Time{} // time has passed: read the clock from now on
			continue         // re-check: closed, room, or ctx
		default: // OverflowDeadLetter
			q.stats.Published++
			q.stats.DeadLettered++
			q.nextSeq++ // its place, had it fitted: a redrive puts it there
			dl := Letter[T]{
				DeadLetter: queue.DeadLetter[T]{Subscription: q.cfg.Name, Message: *m, Reason: ReasonOverflow, At: now},
				origin:     q.scope, Place: q.nextSeq, TTL: ttl,
			}
			q.pending = append(q.pending, dl)
			if q.rec != nil {
				q.dirty = true
				q.rec.Offered(Entry[T]{Message: m, Place: dl.Place, TTL: ttl}, note)
				q.rec.DeadLettered(dl)
			}
			return q.unlockOffer(deferred)
		}
	}
}

// unlockOffer is unlock for Offer: with WithDeferredCommit it leaves the
// Recorder's Commit to the caller.
func (q *Queue[T]) unlockOffer(deferred bool) error {
	if deferred {
		q.dirty = false
	}
	return q.unlock()
}

// Redrive puts a dead letter back as a fresh message: attempts start again
// from zero, its TTL (if any) counts again from now, and it is visible at
// once (or, with an ordering key, when its key's turn comes). A dead letter of this queue keeps
// its place (priority and publish order); one from elsewhere queues as if
// just published. It never blocks, drops or dead-letters: when the queue
// is full it returns an error matching ErrQueueFull and changes nothing.
func (q *Queue[T]) Redrive(dl Letter[T]) error {
	if !dl.Message.Priority.Valid() {
		return invalid("Redrive: priority %v, must be PriorityLow..PriorityCritical", dl.Message.Priority)
	}
	now, err := q.lock()
	if err != nil {
		return err
	}
	if q.nheld >= q.cfg.MaxQueue {
		full := fmt.Errorf("redrive: %w", &FullError{Subscription: q.cfg.Name, Limit: q.cfg.MaxQueue})
		if err := q.unlock(); err != nil {
			return err
		}
		return full
	}
	m := dl.Message
	e := q.newEntryLocked(&m)
	ttl := q.cfg.TTL // a stranger queues as if just published here
	if dl.origin == q.scope {
		e.place, ttl = dl.Place, dl.TTL
	}
	if ttl > 0 {
		e.ttl, e.expiresAt = ttl, now.Add(ttl)
	}
	q.stats.Redriven++
	if q.rec != nil {
		q.dirty = true
		q.rec.Offered(Entry[T]{Message: e.msg, Place: e.place, TTL: e.ttl, ExpiresAt: e.expiresAt}, nil)
	}
	q.placeLocked(now, e, false)
	return q.unlock()
}

// Poll leases up to n visible messages (never more than MaxInFlight
// allows), blocking until at least one is visible, ctx is done (its error
// is returned and nothing is leased) or the queue closes (ErrClosed). n < 1
// is an error matching ErrInvalidArgument.
func (q *Queue[T]) Poll(ctx context.Context, n int) ([]Delivery[T], error) {
	if n < 1 {
		return nil, invalid("Poll: n = %d, must be >= 1", n)
	}
	return q.poll(ctx, nil, n, true, 0)
}

// PollWithVisibility is Poll with this call's own visibility timeout in
// place of the queue's (SQS ReceiveMessage's VisibilityTimeout).
// visibility must be > 0.
func (q *Queue[T]) PollWithVisibility(ctx context.Context, n int, visibility time.Duration) ([]Delivery[T], error) {
	switch {
	case n < 1:
		return nil, invalid("PollWithVisibility: n = %d, must be >= 1", n)
	case visibility <= 0:
		return nil, invalid("PollWithVisibility: visibility = %v, must be > 0", visibility)
	}
	return q.poll(ctx, nil, n, true, visibility)
}

// PollInto is Poll filling the caller's buffer: it leases up to len(dst)
// messages into dst and returns how many. A worker loop that reuses its
// buffer allocates nothing. An empty dst is an error matching
// ErrInvalidArgument.
func (q *Queue[T]) PollInto(ctx context.Context, dst []Delivery[T]) (int, error) {
	if len(dst) == 0 {
		return 0, invalid("PollInto: empty buffer")
	}
	ds, err := q.poll(ctx, dst[:0], len(dst), true, 0)
	return len(ds), err
}

// TryPoll is Poll that never blocks: it returns what is visible now, up to
// n, or nothing. It returns nil for n < 1 and after Close; TryPollInto
// reports those as errors.
func (q *Queue[T]) TryPoll(n int) []Delivery[T] {
	if n < 1 {
		return nil
	}
	ds, _ := q.poll(context.Background(), nil, n, false, 0)
	return ds
}

// TryPollInto is PollInto that never blocks: it fills dst with what is
// visible now and returns how many (possibly 0).
func (q *Queue[T]) TryPollInto(dst []Delivery[T]) (int, error) {
	if len(dst) == 0 {
		return 0, invalid("TryPollInto: empty buffer")
	}
	ds, err := q.poll(context.Background(), dst[:0], len(dst), false, 0)
	return len(ds), err
}

// poll leases up to n messages into dst for vis (0: the queue's visibility
// timeout), waiting for one if block.
func (q *Queue[T]) poll(ctx context.Context, dst []Delivery[T], n int, block bool, vis time.Duration) ([]Delivery[T], error) {
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
		if q.canLeaseLocked() || !block {
			dst = q.leaseLocked(now, dst, n, vis)
			return dst, q.unlock()
		}
		next, timed := q.nextEventLocked()
		if q.wake == nil {
			q.wake = make(chan struct{})
		}
		wake := q.wake
		q.unlock()

		if err := q.wait(ctx, wake, next, timed); err != nil {
			return dst, err
		}
	}
}

// wait blocks until woken is closed, the clock reaches next (if timed) or
// ctx is done. The wake-up is armed outside the lock (arming takes the
// clock's own lock), then the state is checked again before the poller
// counts as parked.
func (q *Queue[T]) wait(ctx context.Context, woken chan struct{}, next time.Time, timed bool) error {
	var fire <-chan struct{}
	if timed {
		t := wake.At(q.clock, next) // never a mock channel timer, never late (see package wake)
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
	q.setParkedLocked(+1)
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
		q.setParkedLocked(-1)
	}
	q.mu.Unlock()
	return ctx.Err()
}

func (q *Queue[T]) setParkedLocked(delta int) {
	q.parked += delta
	if q.parkCh != nil {
		close(q.parkCh)
		q.parkCh = nil
	}
}

// Parked returns how many Poll calls are waiting now, their timers armed.
// A poller stops counting the moment a publish, nack or close wakes it; one
// woken by its timer stops counting when it runs again.
func (q *Queue[T]) Parked() int {
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
			return fmt.Errorf("await parked: %w", ErrClosed)
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
// purge, an expiry settled by another call). It does not wait on the clock
// itself: a delayed message keeps the queue busy until whoever moves the
// clock, or a Poll waiting on it, makes it due.
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
func (q *Queue[T]) AwaitIdle(ctx context.Context) error {
	if ctx == nil {
		return invalid("AwaitIdle: nil context")
	}
	for {
		if _, err := q.lock(); err != nil {
			return fmt.Errorf("await idle: %w", err)
		}
		if q.nheld == 0 {
			return q.unlock()
		}
		if q.idle == nil {
			q.idle = make(chan struct{})
		}
		ch := q.idle
		if err := q.unlock(); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Ack settles a lease as done and deletes its message. It succeeds even
// after the deadline, as long as the message has not been delivered again
// (a late ack saves a duplicate and loses nothing). A lease whose message
// was delivered again, or that was nacked, failed or released, returns
// ErrLeaseExpired; an unknown lease, or one whose message is gone (a
// second Ack included), returns ErrLeaseNotFound. Either way nothing
// changes.
func (q *Queue[T]) Ack(id lease.ID) error {
	now, err := q.lock()
	if err != nil {
		return err
	}
	err = q.ackLocked(now, id)
	return cmp.Or(q.unlock(), err)
}

// AckBatch acks every lease in ids under one lock. It returns nil when all
// succeed, else the errors of those that did not (joined; each matches as
// Ack's would), having acked the rest.
func (q *Queue[T]) AckBatch(ids []lease.ID) error {
	now, err := q.lock()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := q.ackLocked(now, id); err != nil {
			errs = append(errs, err)
		}
	}
	return cmp.Or(q.unlock(), errors.Join(errs...))
}

func (q *Queue[T]) ackLocked(now time.Time, id lease.ID) error {
	e, err := q.lookupLocked("ack", id)
	if err != nil {
		return err
	}
	if e.state == stateLeased {
		q.inflight.Remove(&e.lz)
	} else { // expired, waiting, not yet delivered again
		q.unplaceLocked(e)
	}
	q.stats.Acked++
	if q.rec != nil {
		q.dirty = true
		q.rec.Removed(e.msg)
	}
	q.finishLocked(now, e)
	return nil
}

// Nack settles a lease as failed: the message is visible again after delay
// (0: at once) and the attempt is spent; on the last allowed attempt it is
// dead-lettered at once (ReasonMaxAttempts). It needs a live lease (now <
// Deadline): after the deadline it returns ErrLeaseExpired.
func (q *Queue[T]) Nack(id lease.ID, delay time.Duration) error {
	if delay < 0 {
		return invalid("Nack: delay = %v, must be >= 0", delay)
	}
	return q.settle("nack", id, func(now time.Time, e *entry[T]) {
		e.lastErr = "nacked"
		q.retryLocked(now, e, delay)
		q.recordRetry(e)
	})
}

// Fail settles a lease as failed with cause, kept as the dead letter's
// LastError: the message is visible again after the RetryPolicy's delay
// for this attempt; on the last allowed attempt it is dead-lettered at
// once. It needs a live lease, as Nack does. A nil cause is recorded as
// "failed"; the text kept is at most 4 KiB, cut with an ellipsis.
func (q *Queue[T]) Fail(id lease.ID, cause error) error {
	text := errText(cause) // cause.Error() is user code: not under the lock
	return q.settle("fail", id, func(now time.Time, e *entry[T]) {
		e.lastErr = text
		q.retryLocked(now, e, q.cfg.Retry.Delay(e.attempt))
		q.recordRetry(e)
	})
}

// Reject settles a lease by giving up on its message: it is dead-lettered
// at once (ReasonRejected) with cause as its LastError, whatever attempts
// remain. It needs a live lease, as Nack does. The text kept is at most
// 4 KiB, as with Fail.
func (q *Queue[T]) Reject(id lease.ID, cause error) error {
	text := errText(cause)
	return q.settle("reject", id, func(now time.Time, e *entry[T]) {
		e.lastErr = text
		q.deadLetterLocked(now, e, ReasonRejected)
	})
}

// Release hands a lease back unprocessed: the message is visible again at
// once and the attempt is not spent, so its next delivery has the same
// Attempt. It is for work leased but never started (shutdown, prefetch).
// It needs a live lease, as Nack does.
func (q *Queue[T]) Release(id lease.ID) error {
	return q.settle("release", id, func(now time.Time, e *entry[T]) {
		e.attempt--
		m := e.msg
		q.backLocked(now, e, 0)
		if q.rec != nil && e.msg != nil { // not dead-lettered by its TTL
			q.dirty = true
			q.rec.Released(m)
		}
	})
}

// Extend sets a live lease's deadline to now + timeout (SQS
// ChangeMessageVisibility), shorter or longer than before. timeout must be
// > 0; after the deadline Extend returns ErrLeaseExpired.
func (q *Queue[T]) Extend(id lease.ID, timeout time.Duration) error {
	if timeout <= 0 {
		return invalid("Extend: timeout = %v, must be > 0", timeout)
	}
	now, err := q.lock()
	if err != nil {
		return err
	}
	defer q.unlock()
	e, err := q.liveLocked("extend", id)
	if err != nil {
		return err
	}
	deadline := now.Add(timeout)
	if deadline.Before(e.lz.Lease.Deadline) {
		q.wakeLocked() // a waiting Poll's timer may now be too late
	}
	q.inflight.SetDeadline(&e.lz, deadline)
	return nil
}

// recordRetry records a failed entry that waits again; one that was
// dead-lettered instead (its last attempt, or its TTL) is recorded as such.
func (q *Queue[T]) recordRetry(e *entry[T]) {
	if q.rec != nil && e.msg != nil {
		q.dirty = true
		q.rec.Retried(e.msg, e.visibleAt, e.lastErr)
	}
}

// settle runs f on the entry of a live lease, after taking it out of the
// in-flight table.
func (q *Queue[T]) settle(op string, id lease.ID, f func(now time.Time, e *entry[T])) error {
	now, err := q.lock()
	if err != nil {
		return err
	}
	e, err := q.liveLocked(op, id)
	if err != nil {
		return cmp.Or(q.unlock(), err)
	}
	q.inflight.Remove(&e.lz)
	e.leaseOpen = false
	f(now, e)
	q.wakeLocked() // in-flight room for a poller held back by MaxInFlight
	return q.unlock()
}

// Stats returns a snapshot of the queue, after settling everything due.
func (q *Queue[T]) Stats() Stats {
	q.mu.Lock()
	if !q.closed {
		q.settleLocked(q.clock.Now())
	}
	s := q.stats
	s.Visible = q.ready.len()
	s.Delayed = q.delayed.len()
	s.InFlight = q.inflight.Len()
	s.HeldBack = q.heldBack
	q.unlock()
	return s
}

// Close closes the queue: every blocked Poll and blocked publisher returns
// ErrClosed, and so does every later call. A queue made by New discards the
// messages it still holds; one with a Recorder (a durable broker's) has
// them recorded already, and its broker keeps them. Close is idempotent and
// returns nil.
func (q *Queue[T]) Close() error {
	q.mu.Lock()
	defer q.unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	q.wakeLocked()
	for _, ch := range []*chan struct{}{&q.parkCh, &q.room} {
		if *ch != nil {
			close(*ch)
			*ch = nil
		}
	}
	return nil
}

// lock locks the queue, fails if it is closed, and settles everything due
// at the clock's now, which it returns. Pair it with unlock. The clock is
// read before the lock is taken, to keep the lock short.
func (q *Queue[T]) lock() (time.Time, error) { return q.lockAt(time.Time{}) }

// lockAt is lock with the current time given; the zero time means read the
// clock.
func (q *Queue[T]) lockAt(now time.Time) (time.Time, error) {
	if now.IsZero() {
		now = q.clock.Now()
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return time.Time{}, ErrClosed
	}
	q.settleLocked(now)
	return now, nil
}

// unlock unlocks the queue, commits what was recorded (a durable queue) and
// then hands pending dead letters to onDead. It returns the commit's error.
//
// Every change of what the queue holds passes through here (or through
// Restore, which ends the same way), so this is where AwaitIdle's waiters
// are woken: when the queue is empty or closed.
func (q *Queue[T]) unlock() error {
	q.signalIdleLocked()
	dirty := q.dirty
	q.dirty = false
	if len(q.pending) == 0 && !dirty {
		q.mu.Unlock()
		return nil
	}
	dls := q.pending
	q.pending = nil
	q.mu.Unlock()
	var err error
	if dirty {
		err = q.rec.Commit()
	}
	if q.onDead != nil {
		for _, dl := range dls {
			q.onDead(dl)
		}
	}
	return err
}

// signalIdleLocked wakes the AwaitIdle calls waiting, if the queue holds
// nothing or is closed.
func (q *Queue[T]) signalIdleLocked() {
	if q.idle != nil && (q.nheld == 0 || q.closed) {
		close(q.idle)
		q.idle = nil
	}
}

// settleLocked applies everything due at now: expired leases come back (or
// are dead-lettered on their last attempt) and delayed messages turn
// visible. This is the lazy expiry that makes every call exact right after
// a mock clock moves.
func (q *Queue[T]) settleLocked(now time.Time) {
	for {
		it, ok := q.inflight.PopExpired(now)
		if !ok {
			break
		}
		e := it.Value
		e.lastErr = errExpiredText
		if q.exhausted(e) {
			q.deadLetterLocked(now, e, ReasonMaxAttempts)
			continue
		}
		q.backLocked(now, e, 0) // the lease stays current until redelivery
	}
	for q.delayed.len() > 0 && !q.delayed.top().visibleAt.After(now) {
		e := q.delayed.remove(0)
		q.ready.push(e, false)
		q.wakeLocked()
	}
	for q.ttl.len() > 0 && !now.Before(q.ttl.top().expiresAt) {
		e := q.ttl.remove(0)
		q.unplaceLocked(e)
		q.deadLetterLocked(now, e, ReasonExpired)
	}
}

func (q *Queue[T]) canLeaseLocked() bool {
	return q.ready.len() > 0 && (q.cfg.MaxInFlight == 0 || q.inflight.Len() < q.cfg.MaxInFlight)
}

// leaseLocked leases up to n ready messages into dst.
func (q *Queue[T]) leaseLocked(now time.Time, dst []Delivery[T], n int, vis time.Duration) []Delivery[T] {
	k := min(n, q.ready.len())
	if q.cfg.MaxInFlight > 0 {
		k = min(k, q.cfg.MaxInFlight-q.inflight.Len())
	}
	if k <= 0 {
		return dst
	}
	if dst == nil {
		dst = make([]Delivery[T], 0, k)
	}
	if vis == 0 {
		vis = q.cfg.VisibilityTimeout
	}
	start := len(dst)
	deadline := now.Add(vis)
	maxAttempts := max(q.cfg.MaxAttempts, 0) // UnlimitedAttempts is 0 in a Delivery
	for range k {
		e := q.ready.pop()
		if e.ttlIndex >= 0 {
			q.ttl.remove(e.ttlIndex)
		}
		e.delivery++
		e.attempt++
		e.leaseOpen = true
		e.state = stateLeased
		l := lease.Lease{ID: lease.NewID(q.scope, e.seq(), e.delivery), Attempt: e.attempt, Deadline: deadline}
		e.lz.Lease, e.lz.Value = l, e
		q.inflight.Push(&e.lz)
		q.stats.Delivered++
		if e.attempt > 1 {
			q.stats.Redelivered++
		}
		dst = append(dst, Delivery[T]{Message: *e.msg, LeaseID: l.ID, Attempt: l.Attempt, Deadline: deadline, MaxAttempts: maxAttempts})
	}
	if q.rec != nil {
		q.dirty = true
		q.rec.Delivered(dst[start:])
	}
	return dst
}

// nextEventLocked returns the earliest future time at which the state
// changes by itself: a delayed message turns visible or a lease expires.
func (q *Queue[T]) nextEventLocked() (time.Time, bool) {
	var next time.Time
	ok := false
	if q.delayed.len() > 0 {
		next, ok = q.delayed.top().visibleAt, true
	}
	if it, has := q.inflight.Peek(); has && (!ok || it.Lease.Deadline.Before(next)) {
		next, ok = it.Lease.Deadline, true
	}
	return next, ok
}

// lookupLocked finds the entry a lease names and checks that the lease is
// current (not superseded by a later delivery, not already settled).
func (q *Queue[T]) lookupLocked(op string, id lease.ID) (*entry[T], error) {
	if id.Scope() != q.scope {
		return nil, fmt.Errorf("%s %v: %w", op, id, ErrLeaseNotFound)
	}
	e := q.lookupSeqLocked(id.Seq())
	if e == nil || id.Delivery() == 0 || id.Delivery() > e.delivery {
		return nil, fmt.Errorf("%s %v: %w", op, id, ErrLeaseNotFound)
	}
	if id.Delivery() != e.delivery || !e.leaseOpen {
		return nil, fmt.Errorf("%s %v: %w", op, id, ErrLeaseExpired)
	}
	return e, nil
}

// lookupSeqLocked returns the held entry a lease's seq names (its slot
// and generation), or nil.
func (q *Queue[T]) lookupSeqLocked(seq uint64) *entry[T] {
	slot, gen := uint32(seq>>32), uint32(seq)
	if seq>>32 >= uint64(q.slots) {
		return nil
	}
	if e := q.entryAt(slot); e.msg != nil && e.gen == gen {
		return e
	}
	return nil
}

// liveLocked is lookupLocked that also needs the lease not to have expired.
func (q *Queue[T]) liveLocked(op string, id lease.ID) (*entry[T], error) {
	e, err := q.lookupLocked(op, id)
	if err != nil {
		return nil, err
	}
	if e.state != stateLeased { // settleLocked already expired it
		return nil, fmt.Errorf("%s %v: %w", op, id, ErrLeaseExpired)
	}
	return e, nil
}

func (q *Queue[T]) exhausted(e *entry[T]) bool {
	return q.cfg.MaxAttempts != UnlimitedAttempts && e.attempt >= q.cfg.MaxAttempts
}

// retryLocked puts a failed entry back after delay, or dead-letters it if
// that was its last attempt.
func (q *Queue[T]) retryLocked(now time.Time, e *entry[T], delay time.Duration) {
	if q.exhausted(e) {
		q.deadLetterLocked(now, e, ReasonMaxAttempts)
		return
	}
	q.backLocked(now, e, delay)
}

// backLocked makes an entry that was leased wait again, visible after
// delay, unless its TTL has passed: then it is dead-lettered.
func (q *Queue[T]) backLocked(now time.Time, e *entry[T], delay time.Duration) {
	if !e.expiresAt.IsZero() && !now.Before(e.expiresAt) {
		q.deadLetterLocked(now, e, ReasonExpired)
		return
	}
	if !e.expiresAt.IsZero() {
		q.ttl.push(e)
	}
	e.visibleAt = time.Time{}
	if delay > 0 {
		e.visibleAt = now.Add(delay)
	}
	q.showLocked(now, e, false)
}

// placeLocked puts a new (or redriven) entry where it waits: behind its
// key's head, or delayed, or ready.
func (q *Queue[T]) placeLocked(now time.Time, e *entry[T], fresh bool) {
	if !e.expiresAt.IsZero() {
		q.ttl.push(e)
	}
	if e.key != "" {
		if q.keys == nil {
			q.keys = make(map[string]*keyQueue[T])
		}
		kq := q.keys[e.key]
		if kq == nil {
			kq = &keyQueue[T]{}
			q.keys[e.key] = kq
		}
		if kq.head != nil {
			kq.hold(e)
			q.heldBack++
			return
		}
		kq.head = e
	}
	q.showLocked(now, e, fresh)
}

// showLocked puts an entry that may be delivered in the delayed heap or
// the ready lanes.
func (q *Queue[T]) showLocked(now time.Time, e *entry[T], fresh bool) {
	if e.visibleAt.After(now) {
		e.state = stateDelayed
		q.delayed.push(e)
	} else {
		q.ready.push(e, fresh)
	}
	q.wakeLocked()
}

// unplaceLocked takes a waiting entry out of the ready lanes or the
// delayed heap (a held entry leaves its key in finishLocked).
func (q *Queue[T]) unplaceLocked(e *entry[T]) {
	switch e.state {
	case stateReady:
		q.ready.remove(e)
	case stateDelayed:
		q.delayed.remove(e.index)
	}
}

// deadLetterLocked records e as a dead letter and lets go of it. e must be
// out of every structure already.
func (q *Queue[T]) deadLetterLocked(now time.Time, e *entry[T], reason Reason) {
	q.stats.DeadLettered++
	continued := false
	if kq := q.keys[e.key]; e.key != "" && kq != nil {
		continued = kq.hasAfter(e.place)
	}
	dl := Letter[T]{
		DeadLetter: queue.DeadLetter[T]{
			Subscription: q.cfg.Name,
			Message:      *e.msg,
			Reason:       reason,
			Attempts:     e.attempt,
			LastError:    e.lastErr,
			At:           now,
			KeyContinued: continued,
		},
		origin: q.scope,
		Place:  e.place,
		TTL:    e.ttl,
	}
	q.pending = append(q.pending, dl)
	if q.rec != nil {
		q.dirty = true
		q.rec.DeadLettered(dl)
	}
	q.finishLocked(now, e)
}

func (q *Queue[T]) insertLocked(now time.Time, m *Message[T], delay, ttl time.Duration, note any) {
	e := q.newEntryLocked(m)
	q.stats.Published++
	if delay > 0 {
		e.visibleAt = now.Add(delay)
	}
	if ttl > 0 {
		e.ttl, e.expiresAt = ttl, now.Add(ttl)
	}
	if q.rec != nil {
		q.dirty = true
		q.rec.Offered(Entry[T]{Message: m, Place: e.place, VisibleAt: e.visibleAt, TTL: ttl, ExpiresAt: e.expiresAt}, note)
	}
	q.placeLocked(now, e, true)
}

func (q *Queue[T]) newEntryLocked(m *Message[T]) *entry[T] {
	var slot uint32
	if n := len(q.free); n > 0 {
		slot = q.free[n-1]
		q.free = q.free[:n-1]
	} else {
		if q.slots%chunk == 0 {
			c := make([]entry[T], chunk)
			for i := range c {
				c[i].gen = q.maxGen // above every generation handed out before
			}
			q.arena = append(q.arena, c)
		}
		slot = q.slots
		q.slots++
	}
	e := q.entryAt(slot)
	gen := e.gen + 1
	q.maxGen = max(q.maxGen, gen)
	q.nextSeq++
	*e = entry[T]{msg: m, place: q.nextSeq, slot: slot, gen: gen, prio: int(m.Priority) + 1, index: -1, ttlIndex: -1, key: m.Key}
	q.nheld++
	return e
}

// finishLocked lets go of e for good (acked, dead-lettered or dropped): it
// leaves the TTL heap and its key (the key's next message gets its turn),
// its leases become unknown, and there is room for another message. e must
// be out of the ready lanes, the delayed heap and the in-flight table.
func (q *Queue[T]) finishLocked(now time.Time, e *entry[T]) {
	if e.ttlIndex >= 0 {
		q.ttl.remove(e.ttlIndex)
	}
	if kq := q.keys[e.key]; e.key != "" && kq != nil {
		if kq.head == e {
			kq.head = kq.next()
			if kq.head != nil {
				q.heldBack--
				q.showLocked(now, kq.head, false)
			}
		} else if kq.drop(e) {
			q.heldBack--
		}
		if kq.head == nil && kq.len() == 0 {
			delete(q.keys, e.key)
		}
	}
	q.recycleLocked(e)
}

// recycleLocked forgets e and frees its slot. The slot keeps its
// generation, so e's leases become unknown.
func (q *Queue[T]) recycleLocked(e *entry[T]) {
	*e = entry[T]{slot: e.slot, gen: e.gen}
	q.free = append(q.free, e.slot)
	q.nheld--
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	q.wakeLocked() // MaxInFlight room, or a state change a poller must see
}

// wakeLocked wakes every waiting Poll so it looks again. The parked ones
// all wait on this channel, so none of them is parked any more: they stop
// counting now, not when they get the lock back, so that AwaitParked right
// after a publish waits for them to park again.
func (q *Queue[T]) wakeLocked() {
	if q.wake != nil {
		close(q.wake)
		q.wake = nil
		if q.parked > 0 {
			q.setParkedLocked(-q.parked)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return "failed"
	}
	return clipText(err.Error())
}

// maxErrText bounds the text of a failure's cause that a message keeps
// (LastError): a dead letter needs the gist, and a durable broker's journal
// records it beside the message.
const maxErrText = 4 << 10

// clipText cuts s to at most maxErrText bytes, at a rune boundary, marking
// the cut with an ellipsis.
func clipText(s string) string {
	if len(s) <= maxErrText {
		return s
	}
	const mark = "…"
	cut := maxErrText - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// Purge drops every message the queue holds — visible, delayed, held back
// and in flight (SQS PurgeQueue) — counting them in Stats.Dropped, and
// returns how many. Leases of purged messages become unknown
// (ErrLeaseNotFound).
func (q *Queue[T]) Purge() (int, error) {
	if _, err := q.lock(); err != nil {
		return 0, err
	}
	n := q.nheld
	q.stats.Dropped += uint64(n)
	q.resetLocked()
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	q.wakeLocked()
	if q.rec != nil {
		q.dirty = true
		q.rec.Purged()
	}
	return n, q.unlock()
}

// Settle applies everything due at the clock's now: expired leases come
// back or are dead-lettered, delayed messages turn visible. Every call does
// this itself; Settle is for a caller that reads state elsewhere (the
// broker's DeadLetters) and needs it current.
func (q *Queue[T]) Settle() {
	if _, err := q.lock(); err == nil {
		_ = q.unlock() // a store's error shows on the next call that records
	}
}
