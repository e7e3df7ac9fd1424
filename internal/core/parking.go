package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Parking tells whoever made a Poll whether that Poll is parked: waiting
// with nothing it could lease, its wake-up armed (or an AwaitIdle waiting
// for the queue to empty). The poller passes one in the context of its
// Polls and of its AwaitIdle (PollHooks) to know when its pool is at rest
// (poller's AwaitQuiet). Its state changes under the queue's lock,
// so it is never behind the queue: a publish that wakes the Poll (an ack
// that empties the queue) clears it before the call returns, and a wait
// whose wake-up time the clock has reached no longer counts as parked,
// though its goroutine has yet to run.
type Parking struct {
	mu     sync.Mutex
	parked bool
	timed  bool      // the wake-up is for next; otherwise only a change wakes it
	next   time.Time // when it wakes, if timed
	notify func()    // called, outside mu, after every change; nil: none
}

// NewParking returns a Parking that calls notify (if not nil) after every
// change of its state. notify must not call into the queue.
func NewParking(notify func()) *Parking { return &Parking{notify: notify} }

// Parked reports whether the Poll is parked and will stay so until
// something changes the queue or the clock reaches its wake-up: now must
// be the queue's clock's time.
func (pk *Parking) Parked(now time.Time) bool {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return pk.parked && (!pk.timed || now.Before(pk.next))
}

func (pk *Parking) set(parked, timed bool, next time.Time) {
	pk.mu.Lock()
	pk.parked, pk.timed, pk.next = parked, timed, next
	pk.mu.Unlock()
	if pk.notify != nil {
		pk.notify()
	}
}

// PollHooks is what a worker pool passes in the context of its Polls
// (WithHooks), and of its AwaitIdle: a Parking to mark, and a lease length
// to hold its leases for. A source that is not this queue, or that calls
// it with another context, ignores them.
type PollHooks struct {
	Parking *Parking      // marked while the call is parked; nil: none
	Hold    time.Duration // lease for this long where it is longer than the queue's visibility timeout; 0: never
	held    atomic.Bool   // a Poll leased for Hold since TakeHeld
}

// TakeHeld reports whether a Poll leased for Hold since the last call.
func (h *PollHooks) TakeHeld() bool { return h.held.Swap(false) }

type hooksKey struct{}

// WithHooks returns ctx carrying h.
func WithHooks(ctx context.Context, h *PollHooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

// hooksFrom returns the hooks ctx carries, or nil.
func hooksFrom(ctx context.Context) *PollHooks {
	h, _ := ctx.Value(hooksKey{}).(*PollHooks)
	return h
}

// holdLocked returns the visibility a Poll with hooks h leases for: vis
// if given, else h's Hold where it is longer than the queue's, else 0
// (the queue's).
func (q *Queue[T]) holdLocked(h *PollHooks, vis time.Duration) time.Duration {
	if vis != 0 || h == nil || h.Hold <= q.cfg.VisibilityTimeout {
		return vis
	}
	h.held.Store(true)
	return h.Hold
}

// parkings is the Parkings of the calls waiting on one of the queue's
// channels (q.wake, q.idle), kept under the queue's lock.
type parkings []*Parking

// add marks pk parked, with its wake-up, and keeps it.
func (l *parkings) add(pk *Parking, timed bool, next time.Time) {
	pk.set(true, timed, next)
	*l = append(*l, pk)
}

// remove marks pk no longer parked and lets it go, if it is still kept:
// a wake-up of them all (clear) may have done so first.
func (l *parkings) remove(pk *Parking) {
	s := *l
	for i, p := range s {
		if p == pk {
			last := len(s) - 1
			s[i], s[last] = s[last], nil
			*l = s[:last]
			pk.set(false, false, time.Time{})
			return
		}
	}
}

// clear marks every one no longer parked: their calls are woken.
func (l *parkings) clear() {
	for i, pk := range *l {
		pk.set(false, false, time.Time{})
		(*l)[i] = nil
	}
	*l = (*l)[:0]
}

// parkLocked counts one more parked Poll, made with hooks h, and marks its
// Parking, if it has one, until unparkLocked or wakeLocked.
func (q *Queue[T]) parkLocked(h *PollHooks, timed bool, next time.Time) {
	q.setParkedLocked(+1)
	if h != nil && h.Parking != nil {
		q.parkings.add(h.Parking, timed, next)
	}
}

// unparkLocked counts one parked Poll fewer: it woke by itself (its timer
// or its context), not by wakeLocked, which unparks them all.
func (q *Queue[T]) unparkLocked(h *PollHooks) {
	q.setParkedLocked(-1)
	if h != nil && h.Parking != nil {
		q.parkings.remove(h.Parking)
	}
}

// parkIdle marks the Parking of an AwaitIdle's ctx, if it has one, until
// the queue signals idle (ch closed) or unparkIdle; due is its wake-up
// (farTick: none).
func (q *Queue[T]) parkIdle(ctx context.Context, ch chan struct{}, due tick) *Parking {
	h := hooksFrom(ctx)
	if h == nil || h.Parking == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-ch: // signalled meanwhile: not waiting
		return nil
	default:
	}
	q.idleParkings.add(h.Parking, due != farTick, q.timeOf(due))
	return h.Parking
}

// unparkIdle ends an AwaitIdle's wait: its Parking, if signalIdleLocked
// has not cleared it.
func (q *Queue[T]) unparkIdle(pk *Parking) {
	if pk == nil {
		return
	}
	q.mu.Lock()
	q.idleParkings.remove(pk)
	q.mu.Unlock()
}

// Parks marks a source whose Polls and AwaitIdle honor PollHooks: the
// queue itself, and what embeds Parks (a *broker.Subscription, under an
// unexported alias). Only this package can name the method, so no other
// type claims it by accident.
type Parks struct{}

func (Parks) honorsParking() {}

// ParkingSource is implemented by the types that embed Parks.
type ParkingSource interface{ honorsParking() }
