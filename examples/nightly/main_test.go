package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/benbjohnson/clock"
)

// nightlyApp runs the app on mock over dir until the test stops it.
type nightlyApp struct {
	*app
	cancel context.CancelFunc
	done   chan error
}

func startNightly(t *testing.T, cfg config) *nightlyApp {
	t.Helper()
	a, err := start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &nightlyApp{app: a, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- a.run(ctx) }()
	n.settle(t)
	return n
}

// settle waits until the scheduler has fired what is due and the pool
// has rolled it up and acked it: the clock must not move while a rollup
// runs, or its lease could expire and a second worker do it again (the
// pool's AwaitQuiet counts a running handler as at rest).
func (n *nightlyApp) settle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.sched.AwaitQuiet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.sub.AwaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.pool.AwaitQuiet(ctx); err != nil {
		t.Fatal(err)
	}
}

// advance moves mock by d, stopping at each fire on the way to let the
// pool do it: a move past a fire goes on while the pool works, and a
// rollup's lease could expire under it.
func (n *nightlyApp) advance(t *testing.T, mock *clock.Mock, d time.Duration) {
	t.Helper()
	end := mock.Now().Add(d)
	for {
		next := n.sched.Status()[0].NextFire
		if next.After(end) {
			mock.Add(end.Sub(mock.Now()))
			n.settle(t)
			return
		}
		mock.Add(next.Sub(mock.Now()))
		n.settle(t)
	}
}

func (n *nightlyApp) stop(t *testing.T) {
	t.Helper()
	n.cancel()
	if err := <-n.done; err != nil {
		t.Fatal(err)
	}
}

// TestAWeekOfNights drives a week of mock time (across the night Berlin
// moves its clocks to summer time) through the app on a durable queue,
// stops it for two nights, and starts it again: every night is rolled up
// once, the missed ones on restart.
func TestAWeekOfNights(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 3, 26, 12, 0, 0, 0, berlin))
	var mu sync.Mutex
	var rolled []string
	cfg := config{cron: "0 2 * * *", loc: berlin, state: t.TempDir(), clock: mock,
		roll: func(_ context.Context, r rollup) error {
			mu.Lock()
			defer mu.Unlock()
			rolled = append(rolled, r.Day)
			return nil
		}}
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := rolled
		rolled = nil
		return out
	}

	n := startNightly(t, cfg)
	n.advance(t, mock, 7*24*time.Hour)
	want := []string{"2026-03-26", "2026-03-27", "2026-03-28", "2026-03-29", "2026-03-30", "2026-03-31", "2026-04-01"}
	if got := take(); !slices.Equal(got, want) {
		t.Fatalf("a week: rolled up %v, want %v", got, want)
	}
	st := n.sched.Status()[0]
	if st.NextSlot.In(berlin).Format(time.DateTime) != "2026-04-03 02:00:00" {
		t.Fatalf("next %v", st.NextSlot)
	}
	n.stop(t)

	mock.Add(48 * time.Hour) // down for two nights
	n = startNightly(t, cfg)
	if got := take(); !slices.Equal(got, []string{"2026-04-02", "2026-04-03"}) {
		t.Fatalf("after two nights down: rolled up %v", got)
	}
	n.advance(t, mock, 24*time.Hour)
	if got := take(); !slices.Equal(got, []string{"2026-04-04"}) {
		t.Fatalf("the night after: rolled up %v", got)
	}
	n.stop(t)
}
