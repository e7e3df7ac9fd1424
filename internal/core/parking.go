package core

import (
	"context"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// PollFor is Poll as a worker pool asks for it (backend.PoolPoller): at
// most req.Max, leased for req.Hold where that is longer than the
// queue's visibility timeout (held reports it), with req.Parking marked
// while the Poll is parked.
func (q *Queue[T]) PollFor(ctx context.Context, req backend.PollRequest[T]) ([]queue.Delivery[T], bool, error) {
	if req.Max < 1 {
		return nil, false, invalid("PollFor: Max = %d, must be >= 1", req.Max)
	}
	if req.Hold < 0 {
		return nil, false, invalid("PollFor: Hold = %v, must be >= 0", req.Hold)
	}
	h := &hint{hold: req.Hold, pk: req.Parking}
	var dst []queue.Delivery[T]
	if req.Buf != nil {
		dst = (*req.Buf)[:0] // the pool's: leaseLocked grows it only past its capacity
	}
	ds, err := q.poll(ctx, dst, req.Max, true, 0, h)
	return ds, h.held && len(ds) > 0, err
}

// hint is a pool's request to one Poll (backend.PollRequest).
type hint struct {
	hold time.Duration    // lease for this long where it is longer than the queue's visibility timeout; 0: never
	pk   *backend.Parking // marked while the Poll is parked; nil: none
	held bool             // the Poll leased for hold
}

func (h *hint) parking() *backend.Parking {
	if h == nil {
		return nil
	}
	return h.pk
}

// holdLocked returns the visibility a Poll with hint h leases for: vis
// if given, else h's hold where it is longer than the queue's, else 0
// (the queue's).
func (q *Queue[T]) holdLocked(h *hint, vis time.Duration) time.Duration {
	if vis != 0 || h == nil || h.hold <= q.cfg.VisibilityTimeout {
		return vis
	}
	h.held = true
	return h.hold
}

// AwaitIdleFor is AwaitIdle with pk (if not nil) marked while the wait is
// parked (backend.PoolIdleAwaiter).
func (q *Queue[T]) AwaitIdleFor(ctx context.Context, pk *backend.Parking) error {
	return q.awaitIdle(ctx, pk)
}

// parkings is the Parkings of the calls waiting on one of the queue's
// channels (q.wake, q.idle), kept under the queue's lock.
type parkings []*backend.Parking

// add marks pk parked until wake (zero: until a change) and keeps it.
func (l *parkings) add(pk *backend.Parking, wake time.Time) {
	pk.Park(wake)
	*l = append(*l, pk)
}

// remove marks pk no longer parked and lets it go, if it is still kept:
// a wake-up of them all (clear) may have done so first.
func (l *parkings) remove(pk *backend.Parking) {
	s := *l
	for i, p := range s {
		if p == pk {
			last := len(s) - 1
			s[i], s[last] = s[last], nil
			*l = s[:last]
			pk.Unpark()
			return
		}
	}
}

// clear marks every one no longer parked: their calls are woken.
func (l *parkings) clear() {
	for i, pk := range *l {
		pk.Unpark()
		(*l)[i] = nil
	}
	*l = (*l)[:0]
}

// parkLocked counts one more parked Poll, and marks its Parking pk (nil:
// none), waking at wake (zero: only a change wakes it), until
// unparkLocked or wakeLocked.
func (q *Queue[T]) parkLocked(pk *backend.Parking, wake time.Time) {
	q.setParkedLocked(+1)
	if pk != nil {
		q.parkings.add(pk, wake)
	}
}

// unparkLocked counts one parked Poll fewer: it woke by itself (its timer
// or its context), not by wakeLocked, which unparks them all.
func (q *Queue[T]) unparkLocked(pk *backend.Parking) {
	q.setParkedLocked(-1)
	if pk != nil {
		q.parkings.remove(pk)
	}
}

// parkIdle marks pk (nil: none), an AwaitIdle's Parking, until the queue
// signals idle (ch closed) or unparkIdle; due is its wake-up (farTick:
// none). It returns pk if it marked it.
func (q *Queue[T]) parkIdle(pk *backend.Parking, ch chan struct{}, due tick) *backend.Parking {
	if pk == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-ch: // signalled meanwhile: not waiting
		return nil
	default:
	}
	var wake time.Time
	if due != farTick {
		wake = q.timeOf(due)
	}
	q.idleParkings.add(pk, wake)
	return pk
}

// unparkIdle ends an AwaitIdle's wait: its Parking, if signalIdleLocked
// has not cleared it.
func (q *Queue[T]) unparkIdle(pk *backend.Parking) {
	if pk == nil {
		return
	}
	q.mu.Lock()
	q.idleParkings.remove(pk)
	q.mu.Unlock()
}
