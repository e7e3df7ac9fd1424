package brokertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// fakeTB records a helper's failures and runs its cleanups when told.
type fakeTB struct {
	testing.TB // only for the methods not overridden; never called
	failures   []string
	cleanups   []func()
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

func (f *fakeTB) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// The hang the pattern of cancelling Run and waiting for it met on a mock
// clock: a handler waits on the mock clock (or its context), nobody moves
// the clock, and the drain's own timeout is on the mock clock too. RunPool's
// cleanup returns anyway, and the test fails saying what the pool was
// doing.
func TestRunPoolCannotHangOnAMockClock(t *testing.T) {
	b, mock := New[string](t)
	sub := Subscribe(t, b, "jobs", "work")
	started := make(chan struct{})
	pool, err := poller.New(sub, func(ctx context.Context, _ queue.Delivery[string]) error {
		close(started)
		select {
		case <-mock.After(time.Hour): // nobody moves the clock
		case <-ctx.Done():
		}
		return nil
	}, poller.WithClock(mock))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTB{}
	runPoolWithin(f, pool, 100*time.Millisecond)
	Publish(t, b, "jobs", "x")
	<-started
	f.end() // returns: the bound is real time
	if len(f.failures) != 1 || !strings.Contains(f.failures[0], "did not stop within 100ms") || !strings.Contains(f.failures[0], "1 handlers still running") {
		t.Fatalf("failures: %q", f.failures)
	}
}

// A pool whose work is done stops at the test's end and fails nothing.
func TestRunPoolStopsCleanly(t *testing.T) {
	b, _ := New[string](t)
	sub := Subscribe(t, b, "jobs", "work")
	rec := NewRecorder[string]()
	pool, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error { return nil }, rec.Option())
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTB{}
	RunPool(f, pool)
	m := Publish(t, b, "jobs", "x")[0]
	RequireAcked(t, rec, m.ID)
	f.end()
	if len(f.failures) != 0 {
		t.Fatalf("failures: %q", f.failures)
	}
}

// A Require helper's wait is the recorder's, and its failure names the
// message and what the pool did with it.
func TestRequireWaitIsSettable(t *testing.T) {
	rec := NewRecorder[string]()
	rec.SetWait(10 * time.Millisecond)
	f := &fakeTB{}
	var id [16]byte
	RequireAcked(f, rec, id)
	if len(f.failures) != 1 || !strings.Contains(f.failures[0], "after 10ms of real time") || !strings.Contains(f.failures[0], "00000000-0000-0000-0000-000000000000") {
		t.Fatalf("failures: %q", f.failures)
	}
}
