package core

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFastNowWrapsOnlyTheRealClock(t *testing.T) {
	mock := clock.NewMock()
	assert.Same(t, mock, FastNow(mock), "a mock is used as given")
	real := clock.New()
	fast := FastNow(real)
	require.IsType(t, &monoClock{}, fast)
	assert.Same(t, fast, FastNow(fast), "wrapping twice changes nothing")
	assert.Equal(t, real, fast.(*monoClock).Clock, "timers and the rest are the real clock's")
}

// TestFastNowReadsAsTimeNow checks that the cheaper Now is time.Now on
// the monotonic clock, to the nanosecond order of the calls, and on the
// wall clock within a reading's span, and that it takes a fresh reading
// once anchorSpan has passed.
func TestFastNowReadsAsTimeNow(t *testing.T) {
	fast := FastNow(clock.New()).(*monoClock)
	var prev time.Time
	for i := range 10000 {
		before := time.Now()
		got := fast.Now()
		after := time.Now()
		require.False(t, got.Before(before), "call %d: %v before %v (monotonic)", i, got, before)
		require.False(t, got.After(after), "call %d: %v after %v (monotonic)", i, got, after)
		require.False(t, got.Before(prev), "call %d went back", i)
		wall := got.Round(0) // the wall reading alone
		assert.WithinRange(t, wall, before.Round(0).Add(-anchorSpan), after.Round(0).Add(anchorSpan))
		prev = got
	}
	// An anchor older than anchorSpan is replaced by a full reading.
	old := time.Now().Add(-2 * anchorSpan)
	fast.anchor.Store(&old)
	before := time.Now()
	got := fast.Now()
	assert.NotSame(t, &old, fast.anchor.Load(), "a full reading after anchorSpan")
	assert.Equal(t, got, *fast.anchor.Load(), "the full reading is the answer")
	assert.False(t, got.Before(before))
}

// TestFastNowInASynctestBubble: inside a bubble, time is the bubble's.
func TestFastNowInASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast := FastNow(clock.New())
		start := time.Now()
		assert.True(t, start.Equal(fast.Now()), "no time passes in a bubble until its goroutines block")
		time.Sleep(time.Hour) // the bubble's clock: returns at once
		assert.True(t, start.Add(time.Hour).Equal(fast.Now()))
		assert.True(t, time.Now().Equal(fast.Now()))
	})
}
