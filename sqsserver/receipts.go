package sqsserver

import (
	"time"

	"github.com/leasebus/leasebus/lease"
)

// receives is what the server knows of a queue's receives beyond the
// broker, per message (by its sequence in the subscription, lease.ID.Seq):
// when it was first received (ApproximateFirstReceiveTimestamp), and of
// its latest receive the lease's delivery, the deadline the server gave it
// (a FIFO handle expires with it) and whether a visibility change to 0 (or
// a receive with VisibilityTimeout 0) made the message visible again since.
//
// That last part is what lets the handle of such a receive still delete
// the message, as in SQS, though the broker's Nack ended its lease: the
// delete marks the message deleted here, and the next receive (or move
// task) that takes it from the broker acks it and hands it to nobody.
// Until then it is not counted as visible (nor after the end of its
// retention period, when the broker drops it).
//
// It lives in memory: a durable server opened again has none of it (see
// the README).
type receives struct {
	m     map[uint64]*received
	order []firstReceive // the first receives, oldest first, to drop those past retention
	// tombs: the messages deleted after a reset that the broker still
	// holds, and when their retention ends.
	tombs map[uint64]time.Time
}

type received struct {
	first    time.Time // the first receive
	sent     time.Time // the message's SentTimestamp (its retention counts from it)
	delivery uint32    // the latest receive's lease.ID.Delivery
	deadline time.Time // the latest receive's visibility deadline, as last set
	reset    bool      // made visible at once since the latest receive
	deleted  bool      // reset, then deleted with the latest receive's handle
}

type firstReceive struct {
	seq uint64
	at  time.Time
}

// record records a receive of d at now, and returns when its message was
// first received. A receive supersedes any reset of an earlier one, and a
// delete with that one's handle.
func (q *sqsQueue) record(d delivery, now time.Time) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dropOldLocked(now)
	r := q.rcv.m[d.LeaseID.Seq()]
	if r == nil {
		if q.rcv.m == nil {
			q.rcv.m = make(map[uint64]*received)
		}
		r = &received{first: now}
		q.rcv.m[d.LeaseID.Seq()] = r
		q.rcv.order = append(q.rcv.order, firstReceive{d.LeaseID.Seq(), now})
	}
	delete(q.rcv.tombs, d.LeaseID.Seq())
	r.sent = sentAt(d.Message)
	r.delivery, r.deadline, r.reset, r.deleted = d.LeaseID.Delivery(), d.Deadline, false, false
	return r.first
}

// dropOldLocked drops the entries of messages first received a retention
// period ago or longer (the messages are gone), and compacts the order of
// first receives once most of its entries are of messages since deleted,
// so that what a queue keeps is bounded by the messages it holds.
func (q *sqsQueue) dropOldLocked(now time.Time) {
	keep := time.Duration(q.st.retention) * time.Second
	rc := &q.rcv
	for len(rc.order) > 0 && !now.Before(rc.order[0].at.Add(keep)) {
		if e := rc.order[0]; rc.m[e.seq] != nil && rc.m[e.seq].first.Equal(e.at) {
			q.forgetLocked(e.seq)
		}
		rc.order = rc.order[1:]
	}
	if len(rc.order) > 64 && len(rc.order) > 2*len(rc.m) {
		kept := make([]firstReceive, 0, 2*len(rc.m))
		for _, e := range rc.order {
			if r := rc.m[e.seq]; r != nil && r.first.Equal(e.at) {
				kept = append(kept, e)
			}
		}
		rc.order = kept
	}
}

// extended records that the receive of id is visible again at deadline.
func (q *sqsQueue) extended(id lease.ID, deadline time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if r := q.latestLocked(id); r != nil {
		r.deadline = deadline
	}
}

// reset records that the receive of id was made visible at once (its
// lease nacked): its handle still deletes the message until the next
// receive.
func (q *sqsQueue) reset(id lease.ID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if r := q.latestLocked(id); r != nil {
		r.reset = true
	}
}

// deleteReset deletes the message of id if id is its latest receive and
// was reset since: the next receive of the message drops it. It reports
// whether it did (or had done so already).
func (q *sqsQueue) deleteReset(id lease.ID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.latestLocked(id)
	if r == nil || !r.reset {
		return false
	}
	if !r.deleted {
		r.deleted = true
		if q.rcv.tombs == nil {
			q.rcv.tombs = make(map[uint64]time.Time)
		}
		q.rcv.tombs[id.Seq()] = r.sent.Add(time.Duration(q.st.retention) * time.Second)
	}
	return true
}

// deletedAfterReset reports whether id names a receive deleted after its
// reset: the message is gone to SQS's eyes.
func (q *sqsQueue) deletedAfterReset(id lease.ID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.latestLocked(id)
	return r != nil && r.deleted
}

// takeDeleted reports whether the message of a delivery just taken from
// the broker was deleted after a reset, and forgets it if so: the caller
// then acks the delivery and hands it to nobody.
func (q *sqsQueue) takeDeleted(d delivery) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.rcv.m[d.LeaseID.Seq()]
	if r == nil || !r.deleted {
		return false
	}
	q.forgetLocked(d.LeaseID.Seq())
	return true
}

// expired reports whether the handle of id no longer names an in-flight
// receive at now: the message was received again, reset, or its
// visibility passed. For a message the server knows nothing of (deleted,
// or received before a durable restart) it reports false: the broker
// decides.
func (q *sqsQueue) expired(id lease.ID, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.rcv.m[id.Seq()]
	if r == nil {
		return false
	}
	return r.delivery != id.Delivery() || r.reset || !now.Before(r.deadline)
}

// deletedWaiting returns how many messages deleted after a reset the
// broker still holds, visible, at now.
func (q *sqsQueue) deletedWaiting(now time.Time) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	for seq, end := range q.rcv.tombs {
		if !now.Before(end) {
			q.forgetLocked(seq) // past its retention: the broker dropped it
		}
	}
	return len(q.rcv.tombs)
}

// latestLocked returns the entry of id's message if id is its latest
// receive.
func (q *sqsQueue) latestLocked(id lease.ID) *received {
	if r := q.rcv.m[id.Seq()]; r != nil && r.delivery == id.Delivery() {
		return r
	}
	return nil
}

// forget forgets a message that is gone (deleted, moved, past retention).
func (q *sqsQueue) forget(seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.forgetLocked(seq)
}

func (q *sqsQueue) forgetLocked(seq uint64) {
	delete(q.rcv.m, seq)
	delete(q.rcv.tombs, seq)
}

// forgetAll forgets every message (PurgeQueue).
func (q *sqsQueue) forgetAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rcv = receives{}
}
