package backend

import (
	"context"
	"sync"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// Parking is how a source tells a worker pool that one of its blocking
// calls (a Poll, an AwaitIdle) is parked: waiting with nothing it could
// hand out, its wake-up armed on the clock, so that only something the
// caller does (a publish, a settle, a move of a mock clock) can end the
// wait. The pool reads it to know when it is at rest (poller's
// AwaitQuiet); a source marks it through PoolPoller and PoolIdleAwaiter.
//
// A source marks a call parked with Park once the call's wake-up is
// armed, and unparks it with Unpark before the call returns, and, for
// exactness, at the change that wakes it (under the lock that change
// takes), so that a reader never sees it parked after the change
// returned. A Parking may be marked by one call at a time. The methods of
// a nil *Parking do nothing, and Parked reports false.
type Parking struct {
	mu     sync.Mutex
	parked bool
	wake   time.Time // when it wakes by itself; zero: only a change wakes it
	notify func()    // called, outside mu, after every change; nil: none
}

// NewParking returns a Parking that calls notify (if not nil) after each
// Park and Unpark. notify runs in the source's call, perhaps under the
// source's lock: it must not call back into the source.
func NewParking(notify func()) *Parking { return &Parking{notify: notify} }

// Park marks the call parked until a change unparks it or the clock
// reaches wake; a zero wake means no time wakes it.
func (pk *Parking) Park(wake time.Time) { pk.set(true, wake) }

// Unpark marks the call no longer parked. Unparking a call that is not
// parked changes nothing (notify still runs).
func (pk *Parking) Unpark() { pk.set(false, time.Time{}) }

// Parked reports whether the call is parked and stays so until a change
// or until its wake-up, which now (the source's clock's time) has not
// reached.
func (pk *Parking) Parked(now time.Time) bool {
	if pk == nil {
		return false
	}
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return pk.parked && (pk.wake.IsZero() || now.Before(pk.wake))
}

func (pk *Parking) set(parked bool, wake time.Time) {
	if pk == nil {
		return
	}
	pk.mu.Lock()
	pk.parked, pk.wake = parked, wake
	pk.mu.Unlock()
	if pk.notify != nil {
		pk.notify()
	}
}

// PollRequest is what a worker pool asks of one Poll of a PoolPoller of
// T's.
type PollRequest[T any] struct {
	// Max is how many deliveries the Poll may return at most, as Poll's
	// n: at least 1.
	Max int
	// Hold asks for leases of this length where it is longer than the
	// source's visibility timeout: the pool's extension allowance, so
	// that a source that can lease for it spares the pool every
	// extension. Zero: the source's own length.
	Hold time.Duration
	// Parking, if not nil, is marked while the Poll is parked.
	Parking *Parking
	// Buf, if not nil, is a buffer whose array the Poll may write its
	// deliveries into, up to its capacity, and return a slice of, instead
	// of allocating one: a pool that copies each delivery out before its
	// next Poll asks for no allocation per Poll. A source may ignore it.
	Buf *[]queue.Delivery[T]
}

// PoolPoller is implemented by a source that takes what a worker pool
// asks of each Poll (PollRequest): a pool calls PollFor in place of Poll.
// It blocks and returns as Poll does; held reports that the deliveries
// were leased for req.Hold. A source that marks req.Parking as Parking
// says makes poller's AwaitQuiet exact over it: without this interface a
// pool counts a Poll as parked from the moment it is called, as it cannot
// tell a Poll at rest from one about to return. A *broker.Subscription
// implements it. A wrapper of a source implements it only where it passes
// every request on to a source that does: claiming it without marking
// the Parking would keep the pool from ever coming to rest.
type PoolPoller[T any] interface {
	PollFor(ctx context.Context, req PollRequest[T]) (ds []queue.Delivery[T], held bool, err error)
}

// PoolIdleAwaiter is implemented by an IdleAwaiter whose wait for idle can
// mark a Parking: AwaitIdleFor is AwaitIdle, with pk (if not nil) marked
// while the wait is parked, its wake-up (a delay, a deadline that time
// alone can settle) armed. poller.RunUntilIdle calls it in place of
// AwaitIdle.
type PoolIdleAwaiter interface {
	AwaitIdleFor(ctx context.Context, pk *Parking) error
}
