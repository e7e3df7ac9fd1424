package core

import (
	"cmp"
	"fmt"
	"time"

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
	return q.ackNow(id, nil)
}

// AckBatch acks every lease in ids under one lock. It returns nil when all
// succeed, else a *queue.BatchError with each lease's error (each matches
// as Ack's would), having acked the rest; an error of the queue as a whole
// (closed) acks none.
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
	for i, id := range ids {
		errs = batchErr(errs, len(ids), i, q.ackLocked(now, id, nil))
	}
	return cmp.Or(q.unlock(), queue.NewBatchError(errs))
}

// batchErr records err as the i-th of n results of a batch call in errs,
// which it makes, n long, at the first error: a batch that succeeds
// allocates nothing.
func batchErr(errs []error, n, i int, err error) []error {
	if err != nil {
		if errs == nil {
			errs = make([]error, n)
		}
		errs[i] = err
	}
	return errs
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
		return true, queue.ErrClosed
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
		q.ackEntryLocked(time.Time{}, one, nil)
		return true, q.unlock()
	}
	var errs []error
	for i, id := range ids { // now is unused: no key, no TTL
		errs = batchErr(errs, len(ids), i, q.ackLocked(time.Time{}, id, nil)) // an error: the same lease twice in ids
	}
	return true, cmp.Or(q.unlock(), queue.NewBatchError(errs))
}

func (q *Queue[T]) ackLocked(now time.Time, id lease.ID, note any) error {
	e, err := q.lookupLocked("ack", id)
	if err != nil {
		return err
	}
	q.ackEntryLocked(now, e, note)
	return nil
}

// AckNoted is Ack whose Recorder's Removed gets note: a durable caller
// passes the record's destination (an operation's group, appended with
// the rest of it), and commits itself. A nil note is Ack's.
func (q *Queue[T]) AckNoted(id lease.ID, note any) error { return q.ackNow(id, note) }

// ackNow acks id on the path that reads the clock and settles what is due
// first; note goes to the Recorder's Removed, and a non-nil one leaves the
// commit to the caller.
func (q *Queue[T]) ackNow(id lease.ID, note any) error {
	now, err := q.lockUnsettled(time.Time{})
	if err != nil {
		return err
	}
	if !q.notDueLocked(now, false, id) {
		if err := q.settleOpenLocked(now); err != nil {
			return err
		}
	}
	err = q.ackLocked(now, id, note)
	if err == nil && note != nil {
		q.dirty = false // the caller commits, with the record it noted
	}
	return cmp.Or(q.unlock(), err)
}

// Current returns nil if id is a current lease of q (an Ack of it now
// would succeed, unless the lease is settled or its message delivered
// again first), else the error an Ack would return. It changes nothing.
func (q *Queue[T]) Current(id lease.ID) error {
	if q == nil {
		return errNilQueue
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return queue.ErrClosed
	}
	_, err := q.lookupLocked("ack", id)
	return err
}

// ackEntryLocked acks e, whose lease was found current; note goes to the
// Recorder's Removed.
func (q *Queue[T]) ackEntryLocked(now time.Time, e *entry[T], note any) {
	q.stats.Acked++
	q.removeLocked(now, e, note)
}

// removeLocked takes e out of wherever it is (in flight, expired, waiting,
// held back), records its removal and lets go of it; the caller counts it.
func (q *Queue[T]) removeLocked(now time.Time, e *entry[T], note any) {
	if e.state == stateLeased {
		q.inflight.Remove(e)
	} else { // expired, waiting, not yet delivered again
		q.unplaceLocked(e)
	}
	if q.rec != nil {
		q.dirty = true
		q.rec.Removed(e.msg, note)
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
		q.noteLocked(q.tickOf(now), e, queue.AttemptNacked, "")
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
		q.noteLocked(q.tickOf(now), e, queue.AttemptFailed, text)
		d := delay
		if d < 0 {
			d = q.cfg.Retry.Delay(int(e.attempt))
		}
		q.retryLocked(now, e, d)
		q.recordRetry(e)
	})
}

// Reject settles a lease by giving up on its message: it is dead-lettered
// at once (queue.RejectReason: ReasonRejected, or ReasonCancelled for a
// cancellation) with cause as its LastError, whatever attempts
// remain. It needs a live lease, as Nack does. The text kept is at most
// 4 KiB, as with Fail.
func (q *Queue[T]) Reject(id lease.ID, cause error) error {
	text := errText(cause)
	return q.settle("reject", id, func(now time.Time, e *entry[T]) {
		q.setLastErrLocked(e, text)
		q.noteLocked(q.tickOf(now), e, queue.AttemptRejected, text)
		q.deadLetterLocked(now, e, queue.RejectReason(cause))
	})
}

// Release hands a lease back unprocessed: the message is visible again at
// once and the attempt is not spent, so its next delivery has the same
// Attempt. It is for work leased but never started (shutdown, prefetch).
// It needs a live lease, as Nack does.
func (q *Queue[T]) Release(id lease.ID) error { return q.release("release", id, 0) }

// ReleaseAfter is Release with a delay: the message gives its attempt back
// and is visible again after delay (0: at once). delay must be >= 0. A
// durable store records the release, then the wait (Retried): after a
// crash between the two the message is visible at once.
func (q *Queue[T]) ReleaseAfter(id lease.ID, delay time.Duration) error {
	if delay < 0 {
		return invalid("ReleaseAfter: delay = %v, must be >= 0", delay)
	}
	return q.release("release after", id, delay)
}

func (q *Queue[T]) release(op string, id lease.ID, delay time.Duration) error {
	return q.settle(op, id, func(now time.Time, e *entry[T]) {
		q.noteLocked(q.tickOf(now), e, queue.AttemptReleased, "")
		e.attempt--
		m := e.msg
		q.backLocked(now, e, delay)
		if q.rec != nil && e.msg != nil { // not dead-lettered by its TTL
			q.dirty = true
			q.rec.Released(m)
			if e.state == stateDelayed {
				q.rec.Retried(m, q.timeOf(e.at), q.lastErrLocked(e))
			}
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

// lookupLocked finds the entry a lease names and checks that the lease is
// current (not superseded by a later delivery, not already settled).
func (q *Queue[T]) lookupLocked(op string, id lease.ID) (*entry[T], error) {
	if id.Scope() != q.scope {
		return nil, fmt.Errorf("%s %v: %w", op, id, queue.ErrLeaseNotFound)
	}
	e := q.lookupSeqLocked(id.Seq())
	if e == nil || id.Delivery() == 0 || id.Delivery() > e.delivery {
		return nil, fmt.Errorf("%s %v: %w", op, id, queue.ErrLeaseNotFound)
	}
	if id.Delivery() != e.delivery || !e.is(leaseOpen) {
		return nil, fmt.Errorf("%s %v: %w", op, id, queue.ErrLeaseExpired)
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
	if e.state != stateLeased { // sweepLocked already expired it
		return nil, fmt.Errorf("%s %v: %w", op, id, queue.ErrLeaseExpired)
	}
	return e, nil
}

func (q *Queue[T]) exhausted(e *entry[T]) bool {
	return q.cfg.MaxAttempts != queue.UnlimitedAttempts && int(e.attempt) >= q.cfg.MaxAttempts
}

// retryLocked puts a failed entry back after delay, or dead-letters it if
// that was its last attempt.
func (q *Queue[T]) retryLocked(now time.Time, e *entry[T], delay time.Duration) {
	if q.exhausted(e) {
		q.deadLetterLocked(now, e, queue.ReasonMaxAttempts)
		return
	}
	q.backLocked(now, e, delay)
}

// backLocked makes an entry that was leased wait again, visible after
// delay, unless its TTL has passed: then it is dead-lettered.
func (q *Queue[T]) backLocked(now time.Time, e *entry[T], delay time.Duration) {
	// now as a tick only when it is needed: on a clock without monotonic
	// readings (a mock) the conversion is a real part of a redelivery.
	if e.is(hasTTL) {
		if q.tickOf(now) >= q.ttlOf(e).expires {
			q.deadLetterLocked(now, e, queue.ReasonExpired)
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
