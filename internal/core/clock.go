package core

import (
	"reflect"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// realClock is the type of clock.New(): the wall clock.
var realClock = reflect.TypeOf(clock.New())

// anchorSpan is how long a monoClock reuses one full reading of the wall
// clock: at most this long after a step of the wall clock (settimeofday,
// an NTP step; slewing moves both clocks alike), the wall reading of a
// time from Now lags it by the step.
const anchorSpan = time.Millisecond

// FastNow returns c, or for the real clock (clock.New()'s type) one whose
// Now reads only the monotonic clock between full readings (see monoClock).
// Everything else, its timers included, is c's.
func FastNow(c clock.Clock) clock.Clock {
	if reflect.TypeOf(c) != realClock {
		return c
	}
	m := &monoClock{Clock: c}
	now := time.Now()
	m.anchor.Store(&now)
	return m
}

// monoClock is the real clock with a cheaper Now. time.Now reads two
// clocks, the wall and the monotonic one; time.Since on a time that carries
// a monotonic reading reads the monotonic one only, which is cheaper, and a
// Publish reads the clock once and a Poll once. Now is the last full reading (the
// anchor) plus the monotonic time since: its monotonic reading is exactly
// time.Now's, so every duration and comparison the queue makes is too; its
// wall reading is the anchor's advanced by the same amount, and a full
// reading replaces the anchor every anchorSpan. Inside a testing/synctest
// bubble time.Since reads time.Now, and Now is still the bubble's time.
type monoClock struct {
	clock.Clock
	anchor atomic.Pointer[time.Time]
}

// Now returns the current time.
func (m *monoClock) Now() time.Time {
	a := m.anchor.Load()
	if d := time.Since(*a); d >= 0 && d < anchorSpan {
		return a.Add(d)
	}
	now := time.Now()
	m.anchor.Store(&now)
	return now
}
