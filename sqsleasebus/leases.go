package sqsleasebus

import (
	"time"

	"github.com/leasebus/leasebus/lease"
)

// lateAck is how long after its deadline a lease is kept for a late Ack
// (which SQS honours on a standard queue until the message is received
// again). Past it, the lease is forgotten: its calls return
// queue.ErrLeaseNotFound.
const lateAck = time.Hour

// sweepLocked forgets, at most once a minute, the leases past their
// deadline by more than lateAck: what a Subscription keeps stays bounded
// by what it received lately.
func (s *Subscription[T]) sweepLocked(now time.Time) {
	s.leases.Sweep(now, time.Minute, func(h *held) bool { return now.Sub(h.deadline) > lateAck },
		func(_ lease.ID, h *held) { h.stopTimer() })
}

// retiredMax bounds the memory of retired leases.
const retiredMax = 1 << 14

// retired remembers the latest retiredMax leases that ended with their
// message still in the queue (nacked, failed, released, superseded), so
// that a call with one says queue.ErrLeaseExpired.
type retired struct {
	set  map[lease.ID]struct{}
	ring []lease.ID
	next int
}

func (r *retired) add(id lease.ID) {
	if r.set == nil {
		r.set = make(map[lease.ID]struct{})
	}
	if _, ok := r.set[id]; ok {
		return
	}
	if len(r.ring) < retiredMax {
		r.ring = append(r.ring, id)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % retiredMax
	}
	r.set[id] = struct{}{}
}

func (r *retired) has(id lease.ID) bool {
	_, ok := r.set[id]
	return ok
}
