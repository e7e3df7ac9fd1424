package core

// The sweep: what falls due on the clock (expired leases, delayed messages
// turning visible, TTLs passing) is applied lazily, by the next call that
// takes the queue's lock, so that every call is exact right after a mock
// clock moves. Settling one lease (Ack, Fail, ...) is in settle.go.

import (
	"runtime"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// sweepChunk bounds what one lock hold sweeps when much falls due at
// once: at most this many expired leases, delayed messages turning visible
// and TTLs passing before the sweep lets go of the lock and takes it
// again. docs/BENCHMARKS.md has how it was chosen (BenchmarkExpiry).
const sweepChunk = 512

// sweepLocked applies everything due at now: expired leases come back (or
// are dead-lettered on their last attempt), delayed messages turn visible
// and messages past their TTL are dead-lettered. This is the lazy expiry
// that makes every call exact right after a mock clock moves.
//
// It does so a chunk (sweepChunk) per lock hold, so that a million leases
// expiring at once do not stall the queue. Between chunks it
// unlocks the queue and commits what the chunk recorded (a durable
// queue's journal does not grow without bound either); its dead letters
// wait, in order, in q.backlog, and go to onDead when the call unlocks for
// good (onDead may call back into the queue, which must not find the sweep
// waiting on it). It returns, with q.mu held, once everything due at now is
// settled, or when the queue was closed meanwhile. A sweep stays one step
// at one time:
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
//   - Such an Offer does not begin a sweep either: it leaves the settle
//     due at its time (q.sweepLeft), and the next call that settles does
//     that one first, as the Offer would have, then its own. A publish
//     never does the sweep of the million expiries it found.
//
// So every outcome is one that the whole sweep settled under one hold
// gives, with the calls in the order they took the lock; and as the calls
// that go ahead need a sweep by another call, a single goroutine never
// sees a difference at all.
func (q *Queue[T]) sweepLocked(now time.Time) {
	if !q.sweeping && q.tickOf(now) < q.due {
		return // the common case: nothing due, known without a look
	}
	for q.sweeping {
		if q.sweepLeft { // an Offer's, at its time: do it, as the Offer would have
			q.sweepLeft = false
			q.runSweepLocked(q.sweepAt)
			if q.closed {
				return
			}
			continue
		}
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
	q.runSweepLocked(now)
}

// runSweepLocked settles everything due at now, a chunk per lock hold,
// for sweepLocked.
func (q *Queue[T]) runSweepLocked(now time.Time) {
	for !q.sweepChunkLocked(now) {
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
		if q.hooks != nil && q.hooks.gap != nil {
			q.hooks.gap()
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

// sweepChunkLocked settles at most sweepChunk items (or the tests'
// hooks.chunk) due at now and reports
// whether that was all of them.
func (q *Queue[T]) sweepChunkLocked(now time.Time) bool {
	t := q.tickOf(now)
	n := sweepChunk
	if q.hooks != nil && q.hooks.chunk > 0 {
		n = q.hooks.chunk
	}
	for range n {
		if e := q.inflight.PopExpired(t); e != nil {
			q.setErrKindLocked(e, errExpired)
			q.noteLocked(e.at, e, queue.AttemptExpired, "")
			if q.exhausted(e) {
				q.deadLetterLocked(now, e, queue.ReasonMaxAttempts)
			} else {
				q.backLocked(now, e, 0) // the lease stays current until redelivery
			}
			continue
		}
		// Settling leases makes nothing due in the heaps below, nor does
		// settling the delayed messages in the TTL heap: one pass in this
		// order is the three loops one after the other.
		if q.delayed.len() > 0 && q.delayed.top().at <= t {
			q.ready.push(q.delayed.remove(0), false)
			q.wakeLocked()
			continue
		}
		if q.limited.len() > 0 && q.limited.top().at <= t { // its key's token is due
			q.ready.push(q.limited.remove(0), false)
			q.wakeLocked()
			continue
		}
		if q.ttl.len() > 0 && t >= q.ttlOf(q.ttl.top()).expires {
			e := q.ttl.remove(0)
			q.unplaceLocked(e)
			q.deadLetterLocked(now, e, queue.ReasonExpired)
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
func (l *lanes[T]) dueAt(k tick) {
	if k < l.due {
		l.due = k
	}
}

// nextDueLocked returns the earliest time something falls due, farTick
// for nothing.
func (q *Queue[T]) nextDueLocked() tick {
	due := farTick
	if e := q.inflight.Peek(); e != nil {
		due = e.at
	}
	if q.limited.len() > 0 {
		due = min(due, q.limited.top().at)
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

// Sweep applies everything due at the clock's now: expired leases come
// back or are dead-lettered, delayed messages turn visible. Every call does
// this itself; Sweep is for a caller that reads state elsewhere (the
// broker's DeadLetters) and needs it current.
func (q *Queue[T]) Sweep() {
	if _, err := q.lock(); err == nil {
		_ = q.unlock() // a store's error shows on the next call that records
	}
}
