package natsleasebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/schedule"
)

// TestTwoSchedulersOneStream: two schedulers fire the same schedule into
// one JetStream stream; its duplicate window keeps one message a slot. A
// third, started later on a store that is a slot behind, fires that slot
// again after it was acked: ErrDuplicateGone, which the Job takes for
// done, and nothing more is stored.
func TestTwoSchedulersOneStream(t *testing.T) {
	bus, billing, audit := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC))
	job := natsleasebus.SchedulePublish(bus, "orders", func(f schedule.Fire) string { return f.Slot.Format(time.RFC3339) })
	var reps []*schedule.Scheduler
	for range 2 {
		s, err := schedule.New(schedule.WithClock(mock))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add("report", schedule.Every(time.Hour), job); err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
		reps = append(reps, s)
	}
	settle := func() {
		t.Helper()
		for _, s := range reps {
			if err := s.AwaitQuiet(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle()
	for range 3 {
		mock.Add(time.Hour)
		settle()
	}
	for _, s := range reps {
		if st := s.Status()[0]; st.Fired != 3 || st.Failures != 0 {
			t.Fatalf("status %+v: each replica fired each slot", st)
		}
	}
	st, err := billing.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Visible != 3 {
		t.Fatalf("the stream holds %d for billing, want 3 (one a slot)", st.Visible)
	}
	for _, sub := range []*natsleasebus.Subscription[string]{billing, audit} { // settled everywhere: gone from the stream
		got := map[string]bool{}
		for len(got) < 3 {
			ds, err := sub.Poll(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if got[d.Payload] {
					t.Fatalf("slot %s twice", d.Payload)
				}
				got[d.Payload] = true
				if err := sub.Ack(d.LeaseID); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, want := range []string{"2026-12-05T01:00:00Z", "2026-12-05T02:00:00Z", "2026-12-05T03:00:00Z"} {
			if !got[want] {
				t.Fatalf("%s: slots %v: %s missing", sub.Name(), got, want)
			}
		}
	}

	// A late replica whose store says slot 2: it fires slot 3 again.
	store := memStore{"report": time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)}
	late, err := schedule.New(schedule.WithClock(mock), schedule.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	if err := late.Add("report", schedule.Every(time.Hour), job); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- late.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := late.AwaitQuiet(ctx); err != nil {
		t.Fatal(err)
	}
	if st := late.Status()[0]; st.Fired != 1 || st.Failures != 0 || !st.LastSlot.Equal(time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)) {
		t.Fatalf("the late replica: %+v", st)
	}
	for _, sub := range []*natsleasebus.Subscription[string]{billing, audit} {
		if st, err := sub.Stats(ctx); err != nil || st.Visible != 0 || st.InFlight != 0 {
			t.Fatalf("%s after the late fire: %+v, %v: want nothing stored again", sub.Name(), st, err)
		}
	}
}

// memStore is a schedule.Store in a map, for one goroutine at a time.
type memStore map[string]time.Time

func (m memStore) Load(name string) (time.Time, bool, error) { t, ok := m[name]; return t, ok, nil }
func (m memStore) Save(name string, last time.Time) error {
	if last.After(m[name]) {
		m[name] = last
	}
	return nil
}
