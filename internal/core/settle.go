package core

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unicode/utf8"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// Ack settles a lease as done and deletes its message. It succeeds even
// after the deadline, as long as the message has not been delivered again
// (a late ack saves a duplicate and loses nothing). A lease whose message
// was delivered again, or that was nacked, failed or released, returns
// ErrLeaseExpired; an unknown lease, or one whose message is gone (a
// second Ack included), returns ErrLeaseNotFound. Either way nothing
// changes.
//
// Ack reads the clock only when the time can change its outcome (see
// ackTimeless): most acks settle nothing else and leave what is due to
// the next call that reads the clock.
func (q *Queue[T]) Ack(id lease.ID) error {
	if done, err := q.ackTimeless(id); done {
		return err
	}
	now, err := q.lockUnsettled(time.Time{})
	if err != nil {
		return err
	}
	if !q.notDueLocked(now, false, id) {
		if err := q.settleOpenLocked(now); err != nil {
			return err
		}
	}
	err = q.ackLocked(now, id)
	return cmp.Or(q.unlock(), err)
}

// AckBatch acks every lease in ids under one lock. It returns nil when all
// succeed, else the errors of those that did not (joined; each matches as
// Ack's would), having acked the rest.
func (q *Queue[T]) AckBatch(ids []lease.ID) error {
	if done, err := q.ackTimeless(ids...); done {
		return err
	}
	now, err := q.lockUnsettled(time.Time{})
	if err != nil {
		return err
	}
	if !q.notDueLocked(now, false, ids...) {
		if err := q.settleOpenLocked(now); err != nil {
			return err
		}
	}
	var errs []error
	for _, id := range ids {
		if err := q.ackLocked(now, id); err != nil {
			errs = append(errs, err)
		}
	}
	return cmp.Or(q.unlock(), errors.Join(errs...))
}

// ackTimeless acks ids without reading the clock when their outcome is the
// same at every time from the last settle on: that is, when every lease is
// current, its message has no ordering key (whose next message's turn
// depends on the time) and no TTL, and either the lease has not been
// settled as expired yet and is not on its last attempt, or it has (its
// message waits, to be delivered again). Then an expiry that is due but
// not yet settled changes nothing an Ack can see: the lease stays current
// until its message is delivered again, and only a delivery (a Poll, which
// reads the clock and settles first) or a last attempt's expiry
// (dead-lettered at once) ends it. Acking a message settles nothing else,
// so the next call that reads the clock settles what is due exactly as it
// would have. It reports whether it acked; if not, it changed nothing, and
// the caller takes the path that reads the clock.
func (q *Queue[T]) ackTimeless(ids ...lease.ID) (bool, error) {
	if q == nil {
		return true, errNilQueue
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return true, ErrClosed
	}
	if q.sweeping || len(ids) == 0 {
		q.mu.Unlock()
		return false, nil
	}
	var one *entry[T] // ids[0]'s entry, when it is the only one
	for _, id := range ids {
		e, err := q.lookupLocked("ack", id)
		if err != nil || e.is(keyed) || e.is(hasTTL) || (e.state == stateLeased && q.exhausted(e)) {
			q.mu.Unlock()
			return false, nil
		}
		one = e
	}
	if len(ids) == 1 { // the common Ack: found once, not twice
		q.ackEntryLocked(time.Time{}, one)
		return true, q.unlock()
	}
	var errs []error
	for _, id := range ids {
		if err := q.ackLocked(time.Time{}, id); err != nil { // now is unused: no key, no TTL
			errs = append(errs, err) // the same lease twice in ids
		}
	}
	return true, cmp.Or(q.unlock(), errors.Join(errs...))
}

func (q *Queue[T]) ackLocked(now time.Time, id lease.ID) error {
	e, err := q.lookupLocked("ack", id)
	if err != nil {
		return err
	}
	q.ackEntryLocked(now, e)
	return nil
}

// ackEntryLocked acks e, whose lease was found current.
func (q *Queue[T]) ackEntryLocked(now time.Time, e *entry[T]) {
	if e.state == stateLeased {
		q.inflight.Remove(e)
	} else { // expired, waiting, not yet delivered again
		q.unplaceLocked(e)
	}
	q.stats.Acked++
	if q.rec != nil {
		q.dirty = true
		q.rec.Removed(e.msg)
	}
	q.finishLocked(now, e)
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
		q.setErrKindLocked(e, errNacked)
		q.retryLocked(now, e, delay)
		q.recordRetry(e)
	})
}

// Fail settles a lease as failed with cause, kept as the dead letter's
// LastError: the message is visible again after the RetryPolicy's delay
// for this attempt; on the last allowed attempt it is dead-lettered at
// once. It needs a live lease, as Nack does. A nil cause is recorded as
// "failed"; the text kept is at most 4 KiB, cut with an ellipsis.
func (q *Queue[T]) Fail(id lease.ID, cause error) error { return q.fail(id, cause, -1) }

// FailAfter is Fail with the delay named by the caller instead of the
// RetryPolicy's: the message is visible again after delay (0: at once),
// cause is kept as its LastError, and on the last allowed attempt it is
// dead-lettered at once with it. delay must be >= 0; it needs a live lease,
// as Nack does.
func (q *Queue[T]) FailAfter(id lease.ID, delay time.Duration, cause error) error {
	if delay < 0 {
		return invalid("FailAfter: delay = %v, must be >= 0", delay)
	}
	return q.fail(id, cause, delay)
}

// fail is Fail (delay < 0: the RetryPolicy's) and FailAfter.
func (q *Queue[T]) fail(id lease.ID, cause error, delay time.Duration) error {
	text := errText(cause) // cause.Error() is user code: not under the lock
	return q.settle("fail", id, func(now time.Time, e *entry[T]) {
		q.setLastErrLocked(e, text)
		d := delay
		if d < 0 {
			d = q.cfg.Retry.Delay(int(e.attempt))
		}
		q.retryLocked(now, e, d)
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
		q.setLastErrLocked(e, text)
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
	now, err := q.lockUnsettled(time.Time{})
	if err != nil {
		return err
	}
	if !q.notDueLocked(now, true, id) {
		if err := q.settleOpenLocked(now); err != nil {
			return err
		}
	}
	defer q.unlock()
	e, err := q.liveLocked("extend", id)
	if err != nil {
		return err
	}
	deadline := q.tickOf(now).after(timeout)
	if deadline < e.at {
		q.wakeLocked() // a waiting Poll's timer may now be too late
	}
	q.inflight.SetDeadline(e, deadline)
	q.dueAt(deadline)
	return nil
}

// recordRetry records a failed entry that waits again; one that was
// dead-lettered instead (its last attempt, or its TTL) is recorded as such.
func (q *Queue[T]) recordRetry(e *entry[T]) {
	if q.rec != nil && e.msg != nil {
		q.dirty = true
		q.rec.Retried(e.msg, q.timeOf(e.at), q.lastErrLocked(e))
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
	q.inflight.Remove(e)
	e.flags &^= leaseOpen
	f(now, e)
	if q.cfg.MaxInFlight > 0 {
		q.wakeLocked() // in-flight room for a poller held back by MaxInFlight
	}
	return q.unlock()
}

// settleChunk bounds what one lock hold settles when much falls due at
// once: at most this many expired leases, delayed messages turning visible
// and TTLs passing before the settle lets go of the lock and takes it
// again. In memory that is about 0.03 ms of redelivery or 0.06 ms of
// dead-lettering (BenchmarkExpiry); of 256, 512, 1024 and 4096, larger
// chunks saved next to nothing per message, and dead-lettering, which
// allocates, got slower and held the lock longer.
const settleChunk = 512

// settleLocked applies everything due at now: expired leases come back (or
// are dead-lettered on their last attempt), delayed messages turn visible
// and messages past their TTL are dead-lettered. This is the lazy expiry
// that makes every call exact right after a mock clock moves.
//
// It does so a chunk (settleChunk) per lock hold, so that a million leases
// expiring at once do not stall the queue (issue 15). Between chunks it
// unlocks the queue and commits what the chunk recorded (a durable
// queue's journal does not grow without bound either); its dead letters
// wait, in order, in q.backlog, and go to onDead when the call unlocks for
// good (onDead may call back into the queue, which must not find the sweep
// waiting on it). It returns, with q.mu held, once everything due at now is
// settled, or when the queue was closed meanwhile. Such a settle (a sweep)
// stays one step at one time:
//
//   - One call does all of it, at its own now (q.sweepAt): it pops and
//     settles the due items one at a time, each under the lock, in the
//     order a single hold takes them (leases by deadline and lease order,
//     then delayed messages, then TTLs). Nothing is ever half settled.
//   - A call that takes the lock while a sweep is unfinished (q.sweeping)
//     waits here until it is done, then settles at its own now and does
//     its work (a Poll leases nothing from a half-settled queue), unless
//     its outcome is the same whether the rest of the sweep is done before
//     it or after: an Offer with room and no held key
//     (offerNeedsNoSettleLocked), an Ack or Extend of a lease not due
//     (notDueLocked). Those go ahead without settling.
//
// So every outcome is one that the whole sweep settled under one hold
// gives, with the calls in the order they took the lock; and as the calls
// that go ahead need a sweep by another call, a single goroutine never
// sees a difference at all.
func (q *Queue[T]) settleLocked(now time.Time) {
	if !q.sweeping && q.tickOf(now) < q.due {
		return // the common case: nothing due, known without a look
	}
	for q.sweeping {
		if q.swept == nil {
			q.swept = make(chan struct{})
		}
		swept := q.swept
		q.sweepWaiters++
		q.mu.Unlock()
		<-swept
		q.mu.Lock()
		q.sweepWaiters--
		if q.closed {
			return
		}
	}
	for !q.settleChunkLocked(now) {
		q.sweeping, q.sweepAt = true, now
		if n := len(q.pending); n > 0 {
			q.backlog = append(q.backlog, q.pending)
			// The next chunk likely dead-letters as many: one allocation
			// for them, not a dozen as append doubles (each of which may
			// make this call, lock held, assist the garbage collector).
			q.pending = make([]deadNote[T], 0, n)
		}
		dirty := q.dirty
		q.dirty = false
		q.mu.Unlock()
		if dirty {
			_ = q.rec.Commit() // a store's error shows on the next call that records
		}
		if q.gap != nil {
			q.gap()
		}
		// Let a call waiting for the lock take it now: a sync.Mutex hands
		// itself over only to a waiter that has waited for 1 ms, and this
		// goroutine would otherwise take it back at once.
		runtime.Gosched()
		q.mu.Lock()
		if q.closed {
			break
		}
	}
	if q.sweeping {
		q.sweeping = false
		if q.swept != nil {
			close(q.swept)
			q.swept = nil
		}
	}
}

// settleChunkLocked settles at most q.chunk items due at now and reports
// whether that was all of them.
func (q *Queue[T]) settleChunkLocked(now time.Time) bool {
	t := q.tickOf(now)
	for range q.chunk {
		if e := q.inflight.PopExpired(t); e != nil {
			q.setErrKindLocked(e, errExpired)
			if q.exhausted(e) {
				q.deadLetterLocked(now, e, ReasonMaxAttempts)
			} else {
				q.backLocked(now, e, 0) // the lease stays current until redelivery
			}
			continue
		}
		// Settling leases makes nothing due in the heaps below, nor does
		// settling the delayed messages in the TTL heap: one pass in this
		// order is the three loops one after the other.
		if q.delayed.len() > 0 && q.delayed.top().at <= t {
			e := q.delayed.remove(0)
			q.ready.push(e, false)
			q.wakeLocked()
			continue
		}
		if q.ttl.len() > 0 && t >= q.ttlOf(q.ttl.top()).expires {
			e := q.ttl.remove(0)
			q.unplaceLocked(e)
			q.deadLetterLocked(now, e, ReasonExpired)
			continue
		}
		q.due = q.nextDueLocked()
		return true
	}
	return false
}

// dueAt tells the queue that something in the in-flight table, the
// delayed heap or the TTL heap falls due at k: q.due stays a lower bound
// of every such time, so that a settle before it has nothing to do and
// returns at once. Removals leave it be (an early bound only costs the
// next settle a look, which sets it exactly).
func (q *Queue[T]) dueAt(k tick) {
	if k < q.due {
		q.due = k
	}
}

// nextDueLocked returns the earliest time something falls due, farTick
// for nothing.
func (q *Queue[T]) nextDueLocked() tick {
	due := farTick
	if e := q.inflight.Peek(); e != nil {
		due = e.at
	}
	if q.delayed.len() > 0 {
		due = min(due, q.delayed.top().at)
	}
	if q.ttl.len() > 0 {
		due = min(due, q.ttlOf(q.ttl.top()).expires)
	}
	return due
}

// notDueLocked reports whether a call at now on the leases ids may go
// ahead without settling, leaving an unfinished sweep (another call's,
// between two chunks) to that call: whether its outcome is the same before
// and after the rest of the sweep and its own settle at now. That holds
// when now is no earlier than the sweep's time and every lease is current
// and live past now, so neither touches it; and for an Ack, which lets the
// next message of a key go, when the leases are unkeyed (keysToo false).
// Without an unfinished sweep it reports false: every call settles first.
func (q *Queue[T]) notDueLocked(now time.Time, keysToo bool, ids ...lease.ID) bool {
	if !q.sweeping || now.Before(q.sweepAt) {
		return false
	}
	t := q.tickOf(now)
	for _, id := range ids {
		if id.Scope() != q.scope {
			return false
		}
		e := q.lookupSeqLocked(id.Seq())
		if e == nil || id.Delivery() != e.delivery || !e.is(leaseOpen) || e.state != stateLeased ||
			t >= e.at || (!keysToo && e.key() != "") {
			return false
		}
	}
	return true
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
	if id.Delivery() != e.delivery || !e.is(leaseOpen) {
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
	return q.cfg.MaxAttempts != UnlimitedAttempts && int(e.attempt) >= q.cfg.MaxAttempts
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
	// now as a tick only when it is needed: on a clock without monotonic
	// readings (a mock) the conversion is 15 ns, a fifth of a redelivery.
	if e.is(hasTTL) {
		if q.tickOf(now) >= q.ttlOf(e).expires {
			q.deadLetterLocked(now, e, ReasonExpired)
			return
		}
		q.ttl.push(e)
		q.dueAt(q.ttlOf(e).expires)
	}
	e.at = noTick
	if delay > 0 {
		e.at = q.tickOf(now).after(delay)
	}
	q.showLocked(now, e, false)
}

// deadLetterLocked records e as a dead letter and lets go of it. e must be
// out of every structure already.
func (q *Queue[T]) deadLetterLocked(now time.Time, e *entry[T], reason Reason) {
	q.countDeadLocked(reason)
	_, ttl := q.expiresLocked(e)
	n := deadNote[T]{msg: e.msg, reason: reason, attempts: int(e.attempt), lastErr: q.lastErrLocked(e), at: now, place: e.place, ttl: ttl}
	if key := e.key(); key != "" {
		if kq := q.keys[key]; kq != nil {
			n.continued = kq.hasAfter(e.place)
		}
	}
	q.pending = append(q.pending, n)
	if q.rec != nil {
		q.dirty = true
		q.rec.DeadLettered(q.letter(n))
	}
	q.finishLocked(now, e)
}

// countDeadLocked counts a dead letter, in all and by its reason.
func (q *Queue[T]) countDeadLocked(reason Reason) {
	q.stats.DeadLettered++
	c := &q.stats.DeadLetteredBy
	switch reason {
	case ReasonMaxAttempts:
		c.MaxAttempts++
	case ReasonOverflow:
		c.Overflow++
	case ReasonExpired:
		c.Expired++
	case ReasonRejected:
		c.Rejected++
	}
}

// deadNote is a dead letter on its way to onDead: the shared envelope and
// what the letter adds to it, a third of a Letter's size, so that a sweep
// that dead-letters a million messages allocates (and keeps, until it is
// done) less under the lock. letter makes the Letter, outside the lock.
type deadNote[T any] struct {
	msg       *Message[T]
	reason    Reason
	continued bool // KeyContinued
	attempts  int
	lastErr   string
	at        time.Time
	place     uint64
	ttl       time.Duration
}

// letter returns the dead letter n stands for. It reads no state that
// changes after New, so it needs no lock.
func (q *Queue[T]) letter(n deadNote[T]) Letter[T] {
	return Letter[T]{
		DeadLetter: queue.DeadLetter[T]{
			Subscription: q.cfg.Name,
			Message:      *n.msg,
			Reason:       n.reason,
			Attempts:     n.attempts,
			LastError:    n.lastErr,
			At:           n.at,
			KeyContinued: n.continued,
		},
		origin: q.scope,
		Place:  n.place,
		TTL:    n.ttl,
	}
}

func errText(err error) string {
	if err == nil {
		return failedText
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
