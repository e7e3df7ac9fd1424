package backend

import (
	"time"

	"github.com/benbjohnson/clock"
)

// Timer is a one-shot wake-up: C receives once the clock has reached the
// time it was armed for, unless Stop ran first. After and At arm it on an
// injected clock in a way that cannot deadlock benbjohnson/clock's Mock.
//
// Mock (v1.3.5) can tick one timer twice when Add runs while another
// goroutine arms a timer: both find it due before either removes it. A
// channel timer's second tick then blocks on its full channel while holding
// the mock's mutex, and from then on every Now, Add and Stop hangs. A timer
// made by AfterFunc never sends: the mock starts its func in a goroutine,
// after unlocking. So the wake-ups here are AfterFunc timers whose func
// does a send that never blocks, which makes a second tick harmless. On the
// real clock (and inside testing/synctest) AfterFunc is time.AfterFunc.
type Timer struct {
	C <-chan struct{}
	t *clock.Timer
}

// After arms a wake-up d from now on c. d must be positive: the mock's
// AfterFunc does not fire a timer already due until the clock moves again,
// so callers handle d <= 0 themselves, without waiting.
func After(c clock.Clock, d time.Duration) Timer {
	ch := make(chan struct{}, 1)
	return Timer{C: ch, t: c.AfterFunc(d, signal(ch))}
}

// At arms a wake-up for when c reaches at, and signals at once if it has.
// A mock registers a timer relative to its time at registration, so if the
// mock moves between the read of its time and the registration (another
// goroutine moving it), a timer for at - now would fire late, or never in
// a test that waits for it before moving the mock again. At detects that
// and arms again, until the mock stood still while it armed. (A clock with
// an Add method is taken for a mock; on another, a timer can be late only
// by the nanoseconds that arming takes.)
func At(c clock.Clock, at time.Time) Timer {
	ch := make(chan struct{}, 1)
	fire := signal(ch)
	_, mock := c.(interface{ Add(time.Duration) }) // a clock moved by hand: clock.Mock, or one that embeds it
	for {
		now := c.Now()
		if !now.Before(at) {
			fire()
			return Timer{C: ch}
		}
		t := c.AfterFunc(at.Sub(now), fire)
		if !mock || c.Now().Equal(now) { // a real clock's timer is late by nanoseconds at most
			return Timer{C: ch, t: t}
		}
		t.Stop() // the mock moved while it was armed
	}
}

// signal returns a func that sends on ch without blocking: a second tick
// of a mock timer finds the signal already there.
func signal(ch chan struct{}) func() {
	return func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Stop disarms the wake-up. It is safe on the zero Timer and more than once.
func (t Timer) Stop() {
	if t.t != nil {
		t.t.Stop()
	}
}
