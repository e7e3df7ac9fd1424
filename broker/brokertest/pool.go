package brokertest

import (
	"context"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/poller"
)

// DrainLimit bounds, in real time, how long the end of a test waits for a
// pool that RunPool started to stop.
const DrainLimit = 10 * time.Second

// CleanupTB is what RunPool needs of a *testing.T (or B, or F).
type CleanupTB interface {
	TB
	Cleanup(func())
}

// RunPool runs pool (pool.Run) until the test ends, and then stops it
// with pool.Shutdown bounded by DrainLimit of real time, so that the end
// of a test on a mock clock never hangs: a drain that waits on the mock
// clock (a handler blocked on a timer or on its context, a retry's backoff
// that nobody moves the clock past) is cut short, the running handlers'
// contexts are cancelled, and the test fails saying what the pool was
// still doing. A Run that fails (a closed source, a Poll error it could
// not get past) fails the test too, as does a pool that was running
// already (poller.ErrRunning).
func RunPool[T any](tb CleanupTB, pool *poller.Poller[T]) {
	tb.Helper()
	runPoolWithin(tb, pool, DrainLimit)
}

func runPoolWithin[T any](tb CleanupTB, pool *poller.Poller[T], limit time.Duration) {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- pool.Run(context.Background()) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		err := pool.Shutdown(ctx)
		if err != nil {
			st := pool.Stats()
			err = fmt.Errorf("brokertest.RunPool: the pool did not stop within %v of real time (%d handlers still running, %d leases held): "+
				"its drain waited for handlers that waited in turn on the mock clock or on their context; "+
				"a test that moves a mock clock waits for pool.AwaitQuiet first, and lets every handler it started return; "+
				"a handler that waits on the mock clock itself is not seen by AwaitQuiet: wait with brokertest.AwaitWaiting (its fakes on a WaitClock), "+
				"or run such a test inside testing/synctest (brokertest.NewReal)", limit, st.Running, st.InFlight)
		}
		select { // the handlers' contexts are cancelled now: Run returns once they do
		case rerr := <-done:
			if err == nil && rerr != nil {
				err = fmt.Errorf("brokertest.RunPool: Run: %w", rerr)
			}
		case <-time.After(limit):
			if err == nil {
				err = fmt.Errorf("brokertest.RunPool: Run did not return within %v of real time after its shutdown", limit)
			}
			err = fmt.Errorf("%w; a handler ignores its context's end, and still runs", err)
		}
		if err != nil {
			tb.Fatalf("%v", err)
		}
	})
}
