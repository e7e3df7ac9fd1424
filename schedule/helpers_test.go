package schedule_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/schedule"
)

// epoch is where the tests' mock clocks start: a Thursday, on the hour.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fired is one fire a recorder saw, with the clock's time then.
type fired struct {
	schedule.Fire
	now time.Time
}

// recorder is a Job that keeps every fire; fail, if set, decides the
// job's error.
type recorder struct {
	clk  clock.Clock
	mu   sync.Mutex
	got  []fired
	fail func(schedule.Fire) error
}

func (r *recorder) job(_ context.Context, f schedule.Fire) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(f); err != nil {
			return err
		}
	}
	r.got = append(r.got, fired{f, r.clk.Now()})
	return nil
}

// take returns the fires recorded since the last take.
func (r *recorder) take() []fired {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

func (r *recorder) slots(name string) []time.Time {
	var out []time.Time
	for _, f := range r.take() {
		if name == "" || f.Schedule == name {
			out = append(out, f.Slot)
		}
	}
	return out
}

// newScheduler returns a Scheduler on a mock clock at epoch.
func newScheduler(t *testing.T, opts ...schedule.Option) (*schedule.Scheduler, *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	mock.Set(epoch)
	s, err := schedule.New(append([]schedule.Option{schedule.WithClock(mock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s, mock
}

// run runs s until stop is called or the test ends, and waits for it to
// be at rest.
func run(t *testing.T, s *schedule.Scheduler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	quiet(t, s)
	return stop
}

// quiet waits until s is at rest, failing the test if it is not within
// a minute (a hang, not a timing: each wait ends on a condition).
func quiet(t *testing.T, s *schedule.Scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.AwaitQuiet(ctx); err != nil {
		t.Fatalf("AwaitQuiet: %v", err)
	}
}

// advance moves mock by d and waits until s is at rest.
func advance(t *testing.T, s *schedule.Scheduler, mock *clock.Mock, d time.Duration) {
	t.Helper()
	mock.Add(d)
	quiet(t, s)
}

func status(t *testing.T, s *schedule.Scheduler, name string) schedule.Status {
	t.Helper()
	for _, st := range s.Status() {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no status for %s", name)
	return schedule.Status{}
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// hours returns the slots epoch+h for each h.
func hours(hs ...int) []time.Time {
	out := make([]time.Time, len(hs))
	for i, h := range hs {
		out[i] = epoch.Add(time.Duration(h) * time.Hour)
	}
	return out
}

// span returns hours(from, from+1, ..., to).
func span(from, to int) []time.Time {
	var hs []int
	for h := from; h <= to; h++ {
		hs = append(hs, h)
	}
	return hours(hs...)
}
