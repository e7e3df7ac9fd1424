package brokertest

import (
	"context"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/poller"
)

// WaitClock is the clock a test on a mock clock gives its fakes of slow
// dependencies (a partner call that takes a second of the test's time):
// it is the mock (every method but After and Sleep is the mock's, and
// both of those wait on it), and it counts the waits begun by After and
// Sleep that the mock's time has not reached yet, so that AwaitWaiting
// can tell when every running handler has reached its wait. Give the
// broker and the pool the mock itself, and the handlers' fakes the
// WaitClock.
//
// A wait counts from the call of After (or Sleep) until the mock's time
// reaches its end, whether or not anyone still waits on it: an After whose
// channel a handler abandoned (it returned on its context's end instead)
// counts until its time comes. Timers, tickers and contexts made from the
// WaitClock are the mock's, and are not counted: a fake waits with After
// or Sleep. Its methods are safe for concurrent use.
type WaitClock struct {
	*clock.Mock

	mu      sync.Mutex
	ends    []time.Time   // the waits' ends, some of them passed
	changed chan struct{} // closed and replaced when a wait begins
}

// NewWaitClock returns a WaitClock over mock.
func NewWaitClock(mock *clock.Mock) *WaitClock {
	return &WaitClock{Mock: mock, changed: make(chan struct{})}
}

// After waits for d on the mock, as the mock's After does, and counts the
// wait until the mock's time reaches its end. d <= 0 is due at once, and
// not counted.
func (w *WaitClock) After(d time.Duration) <-chan time.Time {
	ch := w.Mock.After(d)
	if d > 0 {
		// Counted once armed, not before: a test that saw it counted
		// (AwaitWaiting) and moves the mock finds the timer there. Its end
		// is read after: the test moves the mock only once every running
		// handler's wait is counted, so no move comes between the two.
		end := w.Mock.Now().Add(d)
		w.mu.Lock()
		w.ends = append(w.ends, end)
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
	}
	return ch
}

// Sleep blocks until the mock's time has moved d on, counted as After's
// wait is.
func (w *WaitClock) Sleep(d time.Duration) { <-w.After(d) }

// Waiting returns how many waits of After and Sleep the mock's time has
// not reached yet.
func (w *WaitClock) Waiting() int {
	now := w.Mock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.ends[:0]
	for _, end := range w.ends {
		if end.After(now) {
			kept = append(kept, end)
		}
	}
	clear(w.ends[len(kept):])
	w.ends = kept
	return len(kept)
}

// changes returns a channel closed when a wait begins.
func (w *WaitClock) changes() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// AwaitWaiting waits until pool is at rest (pool.AwaitQuiet) and each of
// its running handlers waits on w (w.Waiting is at least the pool's
// Stats().Running), so that the next move of the mock clock finds every
// handler at its wait: a handler that a move or an ack has just started
// has reached its After before the test moves time under it. It fails the
// test after DefaultWait of real time, saying how many handlers ran and
// how many waits it saw: a handler that waits on something else (its
// context, a channel, a timer it made itself) is never seen waiting. For
// that, or for a pool of batch handlers (whose Running counts messages,
// not calls), run the test inside testing/synctest instead (NewReal),
// where the runtime knows what every goroutine waits on.
//
// The counts are read while nothing moves the clock: call it from the
// goroutine that moves it, between moves.
func AwaitWaiting[T any](tb TB, pool *poller.Poller[T], w *WaitClock) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultWait)
	defer cancel()
	var running, waiting int
	for {
		changed := w.changes()
		if err := pool.AwaitQuiet(ctx); err != nil {
			tb.Fatalf("brokertest.AwaitWaiting: the pool did not come to rest within %v of real time: %v", DefaultWait, err)
			return
		}
		running, waiting = pool.Stats().Running, w.Waiting()
		if waiting >= running {
			if pool.AwaitQuiet(ctx) == nil && pool.Stats().Running == running {
				return // still at rest, the same handlers: each at its wait
			}
			continue
		}
		select {
		case <-changed: // a wait began
		case <-time.After(time.Millisecond): // or a handler returned: look again
		case <-ctx.Done():
			tb.Fatalf("brokertest.AwaitWaiting: %d handlers running, %d waits on the WaitClock, after %v of real time: "+
				"a handler waits on something other than the WaitClock's After or Sleep, or has yet to return; "+
				"run such a test inside testing/synctest (brokertest.NewReal), where every wait is seen", running, waiting, DefaultWait)
			return
		}
	}
}
