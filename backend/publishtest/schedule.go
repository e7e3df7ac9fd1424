package publishtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/schedule"
)

// testSchedule: two schedulers fire one schedule through the publisher;
// its dedup keeps one message a slot. A third, started later on a store a
// slot behind, fires the last slot again after its message was settled:
// the publish succeeds (the Job takes the duplicate for done) and stores
// nothing. The schedulers run on a clock of their own, so the backend's
// dedup window (on its own clock, or real time) covers every fire.
func (s *suite) testSchedule(t *testing.T) {
	if s.caps.DedupWindow == 0 {
		t.Skip("the backend does not deduplicate (Capabilities.DedupWindow is 0): a schedule's every fire is refused by name")
	}
	topic := s.topic(t)
	ctx := s.bounded(t)
	mock := clock.NewMock()
	epoch := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	mock.Set(epoch)
	job := schedule.Publish(s.pub, topic, func(f schedule.Fire) string { return f.Slot.Format(time.RFC3339) })
	start := func(opts ...schedule.Option) *schedule.Scheduler {
		t.Helper()
		sc, err := schedule.New(append([]schedule.Option{schedule.WithClock(mock)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.Add("report", schedule.Every(time.Hour), job); err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- sc.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
		if err := sc.AwaitQuiet(ctx); err != nil {
			t.Fatal(err)
		}
		return sc
	}
	reps := []*schedule.Scheduler{start(), start()}
	for range 3 {
		mock.Add(time.Hour)
		for _, sc := range reps {
			if err := sc.AwaitQuiet(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, sc := range reps {
		if st := sc.Status()[0]; st.Fired != 3 || st.Failures != 0 {
			t.Fatalf("status %+v: want each replica to have fired each slot, with no failure (last: %s)", st, st.LastError)
		}
	}
	got := map[string]int{}
	for _, m := range s.receive(t, topic, 3) {
		got[m.Payload]++
	}
	for h := 1; h <= 3; h++ {
		if slot := epoch.Add(time.Duration(h) * time.Hour).Format(time.RFC3339); got[slot] != 1 {
			t.Fatalf("slots %v: %s %d times, want once", got, slot, got[slot])
		}
	}
	s.expectNone(t, topic)

	// A late replica whose store says slot 2 fires slot 3 again.
	store := &memStore{last: map[string]time.Time{"report": epoch.Add(2 * time.Hour)}}
	late := start(schedule.WithStore(store))
	if st := late.Status()[0]; st.Fired != 1 || st.Failures != 0 || !st.LastSlot.Equal(epoch.Add(3*time.Hour)) {
		t.Fatalf("the late replica: %+v, want slot 3 fired once, with no failure (last: %s)", st, st.LastError)
	}
	s.expectNone(t, topic)
}

// memStore is a schedule.Store in a map.
type memStore struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (m *memStore) Load(name string) (time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.last[name]
	return t, ok, nil
}

func (m *memStore) Save(name string, last time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if last.After(m.last[name]) {
		m.last[name] = last
	}
	return nil
}
