package core

import (
	"cmp"
	"errors"
	"fmt"
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
	if q.cfg.MaxInFlight > 0 {
		q.wakeLocked() // in-flight room for a poller held back by MaxInFlight
	}
	return q.unlock()
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
