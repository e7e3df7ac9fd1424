package brokertest_test

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker/brokertest"
)

// The same test on a mock clock: the partner waits on a WaitClock over
// the mock, and the test moves the mock 50ms at a time (every instant of
// the schedule is a multiple), waiting before each move with AwaitWaiting
// for the pool to rest and each running handler to reach its wait. The
// schedule is the bubble's, exactly.
func TestPacedPoolOnMockClock(t *testing.T) {
	b, mock := brokertest.New[string](t)
	w := brokertest.NewWaitClock(mock)
	p := &partner{clk: w, start: mock.Now()}
	sub, pool := pacedPool(t, b, p)
	brokertest.RunPool(t, pool)
	for range 100 { // 5s
		brokertest.AwaitWaiting(t, pool, w)
		mock.Add(50 * time.Millisecond)
	}
	brokertest.AwaitWaiting(t, pool, w)
	if st := sub.Stats(); st.Acked != 12 {
		t.Fatalf("%+v, want 12 acked", st)
	}
	p.mu.Lock()
	got := slices.Clone(p.calls)
	p.mu.Unlock()
	if !sameSchedule(got, pacedSchedule) {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(pacedSchedule, "\n"))
	}
}

// A wait counts until the mock's time reaches its end, whoever waits; a
// Sleep counts as its After.
func TestWaitClockCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // for synctest.Wait: the sleeper is at its wait
		mock := clock.NewMock()
		w := brokertest.NewWaitClock(mock)
		a := w.After(time.Second)
		w.After(2 * time.Second) // abandoned: counts until 2s all the same
		w.After(0)               // due at once: not counted
		if n := w.Waiting(); n != 2 {
			t.Fatalf("Waiting() = %d, want 2", n)
		}
		mock.Add(time.Second)
		<-a
		if n := w.Waiting(); n != 1 {
			t.Fatalf("at 1s Waiting() = %d, want 1", n)
		}
		done := make(chan struct{})
		go func() { w.Sleep(time.Second); close(done) }()
		synctest.Wait()
		if n := w.Waiting(); n != 2 {
			t.Fatalf("with a Sleep begun Waiting() = %d, want 2", n)
		}
		mock.Add(time.Second)
		<-done
		if n := w.Waiting(); n != 0 {
			t.Fatalf("at 2s Waiting() = %d, want 0", n)
		}
	})
}
