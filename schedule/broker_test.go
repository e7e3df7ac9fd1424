package schedule_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/schedule"
)

// newBroker returns a broker on mock with topic "jobs" and its
// subscription "workers".
func newBroker(t *testing.T, mock *clock.Mock) (*broker.Broker[string], *broker.Subscription[string]) {
	t.Helper()
	b, err := broker.New[string](broker.WithClock(mock), broker.WithDedupWindow(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTopic("jobs"); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe("jobs", "workers")
	if err != nil {
		t.Fatal(err)
	}
	return b, sub
}

// drain takes and acks every visible message of sub, returning payloads.
func drain(t *testing.T, sub *broker.Subscription[string]) []string {
	t.Helper()
	var out []string
	for {
		ds := sub.TryPoll(100)
		if len(ds) == 0 {
			return out
		}
		for _, d := range ds {
			out = append(out, d.Payload)
			if err := sub.Ack(d.LeaseID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func slotText(f schedule.Fire) string { return f.Slot.Format(time.RFC3339) }

// TestReplicasPublishEachSlotOnce: two schedulers fire the same schedule
// into one broker; its dedup keeps one message a slot.
func TestReplicasPublishEachSlotOnce(t *testing.T) {
	mock := clock.NewMock()
	mock.Set(epoch)
	b, sub := newBroker(t, mock)
	var reps []*schedule.Scheduler
	for range 2 {
		s, err := schedule.New(schedule.WithClock(mock))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add("report", schedule.Every(time.Hour), schedule.Publish(b, "jobs", slotText), schedule.WithJitter(time.Minute)); err != nil {
			t.Fatal(err)
		}
		run(t, s)
		reps = append(reps, s)
	}
	for range 3 {
		mock.Add(time.Hour)
		quiet(t, reps[0])
		quiet(t, reps[1])
	}
	mock.Add(time.Minute) // past the third slot's jitter
	quiet(t, reps[0])
	quiet(t, reps[1])
	got := drain(t, sub)
	want := []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"}
	if len(got) != len(want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("published %v, want %v", got, want)
		}
	}
	for _, s := range reps {
		if st := s.Status()[0]; st.Fired != 3 { // each fired; the broker kept one
			t.Fatalf("status %+v", st)
		}
	}
}

// crashingStore wraps a Store and drops the Saves after crash is set, as
// a process killed between its publish and its Save would.
type crashingStore struct {
	schedule.Store
	mu      sync.Mutex
	crashed bool
}

func (c *crashingStore) Save(name string, last time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return nil
	}
	return c.Store.Save(name, last)
}

// TestRestartRepeatsNothingLosesNothing: a scheduler whose process dies
// after publishing a slot but before saving it is started again on the
// same store: it fires that slot again, which the broker's dedup drops,
// and then catches up on the slots it was down for.
func TestRestartRepeatsNothingLosesNothing(t *testing.T) {
	mock := clock.NewMock()
	mock.Set(epoch)
	b, sub := newBroker(t, mock)
	fs, err := schedule.NewFileStore(filepath.Join(t.TempDir(), "schedules.json"))
	if err != nil {
		t.Fatal(err)
	}
	cs := &crashingStore{Store: fs}
	job := schedule.Publish(b, "jobs", slotText)
	each := schedule.WithMissed(schedule.MissedEach)

	s1, err := schedule.New(schedule.WithClock(mock), schedule.WithStore(cs))
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Add("report", schedule.Every(time.Hour), job, each); err != nil {
		t.Fatal(err)
	}
	stop := run(t, s1)
	advance(t, s1, mock, 2*time.Hour) // slots 1 and 2, saved
	cs.mu.Lock()
	cs.crashed = true
	cs.mu.Unlock()
	advance(t, s1, mock, time.Hour) // slot 3 published, not saved
	stop()
	if last, ok, err := fs.Load("report"); err != nil || !ok || !last.Equal(epoch.Add(2*time.Hour)) {
		t.Fatalf("store: %v %v %v", last, ok, err)
	}

	mock.Add(2*time.Hour + 10*time.Minute) // down for slots 4 and 5
	s2, err := schedule.New(schedule.WithClock(mock), schedule.WithStore(fs))
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Add("report", schedule.Every(time.Hour), job, each); err != nil {
		t.Fatal(err)
	}
	run(t, s2)
	got := drain(t, sub)
	want := []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z", "2026-01-01T04:00:00Z", "2026-01-01T05:00:00Z"}
	if len(got) != len(want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("published %v, want %v", got, want)
		}
	}
	if st := s2.Status()[0]; st.Fired != 3 || !st.LastSlot.Equal(epoch.Add(5*time.Hour)) {
		t.Fatalf("restarted: %+v (slot 3 fired again, then 4 and 5)", st)
	}
	if last, _, _ := fs.Load("report"); !last.Equal(epoch.Add(5 * time.Hour)) {
		t.Fatalf("store after: %v", last)
	}
}

// TestSkipIfBusy: while the last fire's message is unsettled on the
// workers' subscription, a slot is skipped.
func TestSkipIfBusy(t *testing.T) {
	s, mock := newScheduler(t)
	b, sub := newBroker(t, mock)
	if err := s.Add("report", schedule.Every(time.Hour), schedule.Publish(b, "jobs", slotText), schedule.WithSkipIfBusy(schedule.Unsettled(sub))); err != nil {
		t.Fatal(err)
	}
	run(t, s)
	advance(t, s, mock, time.Hour)
	ds, err := sub.Poll(context.Background(), 1) // a worker takes slot 1 and is still at it
	if err != nil || len(ds) != 1 {
		t.Fatal(ds, err)
	}
	advance(t, s, mock, time.Hour) // slot 2: busy
	if st := s.Status()[0]; st.SkippedBusy != 1 || !st.LastSkipped.Equal(epoch.Add(2*time.Hour)) || st.Fired != 1 {
		t.Fatalf("status %+v", st)
	}
	if err := sub.Ack(ds[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	advance(t, s, mock, time.Hour) // slot 3: fires
	if got := drain(t, sub); len(got) != 1 || got[0] != "2026-01-01T03:00:00Z" {
		t.Fatalf("published %v", got)
	}
}

// TestPublishErrorIsRetried: a publish to a topic that does not exist yet
// fails, and the slot is retried until it does.
func TestPublishErrorIsRetried(t *testing.T) {
	s, mock := newScheduler(t)
	b, _ := newBroker(t, mock)
	if err := s.Add("report", schedule.Every(time.Hour), schedule.Publish(b, "later", slotText)); err != nil {
		t.Fatal(err)
	}
	run(t, s)
	advance(t, s, mock, time.Hour)
	st := s.Status()[0]
	if st.Failures != 1 || st.LastError == "" || st.Fired != 0 {
		t.Fatalf("status %+v", st)
	}
	if err := b.CreateTopic("later"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe("later", "w"); err != nil {
		t.Fatal(err)
	}
	advance(t, s, mock, time.Second) // the retry
	if st := s.Status()[0]; st.Fired != 1 || !st.LastSlot.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("status %+v", st)
	}
}
