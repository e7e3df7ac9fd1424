package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/testkit"
)

// TestFakeClockMovedWhilePollsWait moves a mock clock from one goroutine
// while eight others wait in Poll, each with a wake-up armed on that clock.
// benbjohnson/clock v1.3.5 can tick one timer twice when Add races the
// arming of another; the second tick of a channel timer blocks on its full
// channel while holding the mock's mutex, and then every Now() hangs. The
// broker must wait in a way that never lets that happen.
//
// The rounds are bounded; the wall-clock limit is a watchdog for a hang,
// not a wait for state.
func TestFakeClockMovedWhilePollsWait(t *testing.T) {
	const pollers = 8
	rounds := testkit.Scale(1500, 150)
	mock := clock.NewMock()
	b, err := broker.New[int](broker.WithClock(mock))
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("t"))
	sub, err := b.Subscribe("t", "s", broker.WithVisibilityTimeout(time.Millisecond), broker.WithMaxAttempts(1<<20))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range pollers {
		wg.Go(func() {
			for ctx.Err() == nil {
				ds, err := sub.Poll(ctx, 1)
				if err != nil {
					return
				}
				for _, d := range ds {
					if d.Payload%2 == 0 { // leave odd ones to expire: they keep timers armed
						_ = sub.Ack(d.LeaseID)
					}
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range rounds {
			if _, err := b.Publish(ctx, "t", i); err != nil {
				panic(fmt.Sprintf("publish %d: %v", i, err))
			}
			mock.Add(time.Duration(1+i%3) * time.Millisecond / 2)
			runtime.Gosched()
		}
	}()
	watchdog := time.NewTimer(time.Minute)
	defer watchdog.Stop()
	select {
	case <-done:
	case <-watchdog.C:
		buf := make([]byte, 1<<20)
		require.Failf(t, "mock clock deadlocked", "goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	}
	cancel()
	wg.Wait()
	require.NoError(t, b.Close())
}
