package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

// TestSimulatedYear drives an interval and a cron schedule (New York,
// across both of its daylight-saving changes) over a year of mock time in
// steps of random length, one of them a jump of three days, and checks
// that each slot fired once, in order, during the step that passed it.
// (The mock moves through each timer it passes, so which reading a fire
// sees inside a step is up to the scheduler's goroutine; which slots fire
// is not.)
func TestSimulatedYear(t *testing.T) {
	days := 365
	if testing.Short() {
		days = 40
	}
	ny := mustLoad(t, "America/New_York")
	s, mock := newScheduler(t)
	rec := &recorder{clk: mock}
	each := []schedule.AddOption{schedule.WithMissed(schedule.MissedEach), schedule.WithCatchUpLimit(1000)}
	if err := s.Add("4-hourly", schedule.Every(4*time.Hour), rec.job, each...); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("nightly", schedule.CronIn(ny, "30 2 * * *"), rec.job, each...); err != nil {
		t.Fatal(err)
	}
	run(t, s)

	end := epoch.AddDate(0, 0, days)
	r := rand.New(rand.NewPCG(43, 1))
	var ends []time.Time // the clock's reading after each step
	jumped := false
	for mock.Now().Before(end) {
		d := time.Duration(1 + r.Int64N(int64(12*time.Hour)))
		if !jumped && mock.Now().After(epoch.AddDate(0, 0, days/2)) {
			d, jumped = 72*time.Hour+17*time.Minute, true
		}
		advance(t, s, mock, d)
		ends = append(ends, mock.Now())
	}
	now := mock.Now()

	var wantHourly, wantNightly []time.Time
	for h := epoch.Add(4 * time.Hour); !h.After(now); h = h.Add(4 * time.Hour) {
		wantHourly = append(wantHourly, h)
	}
	for d := epoch.In(ny); ; d = d.AddDate(0, 0, 1) {
		slot := time.Date(d.Year(), d.Month(), d.Day(), 2, 30, 0, 0, ny)
		if slot.Hour() != 2 { // the day skips 02:30: its first instant after the gap
			slot = time.Date(d.Year(), d.Month(), d.Day(), 3, 0, 0, 0, ny)
		}
		if slot.After(now) {
			break
		}
		if slot.After(epoch) {
			wantNightly = append(wantNightly, slot)
		}
	}
	got := rec.take()
	for _, name := range []string{"4-hourly", "nightly"} {
		var slots []time.Time
		for _, f := range got {
			if f.Schedule != name {
				continue
			}
			slots = append(slots, f.Slot)
			// Fired during the step that passed the slot.
			i := sort.Search(len(ends), func(i int) bool { return !ends[i].Before(f.Slot) })
			if i == len(ends) || f.now.Before(f.Slot) || f.now.After(ends[i]) {
				t.Fatalf("%s: slot %v fired at %v, want within the step that passed it", name, f.Slot, f.now)
			}
			if f.DedupID != "sched:"+name+":"+f.Slot.UTC().Format(time.RFC3339Nano) {
				t.Fatalf("%s: dedup ID %q", name, f.DedupID)
			}
		}
		want := map[string][]time.Time{"4-hourly": wantHourly, "nightly": wantNightly}[name]
		if !equalTimes(slots, want) {
			t.Fatalf("%s: %d slots fired, want %d (first difference near %v)", name, len(slots), len(want), firstDiff(slots, want))
		}
		st := status(t, s, name)
		if st.Fired != uint64(len(want)) || st.SkippedMissed != 0 || st.Failures != 0 {
			t.Fatalf("%s: status %+v", name, st)
		}
	}
	t.Logf("%d steps, %d 4-hourly and %d nightly fires", len(ends), len(wantHourly), len(wantNightly))
}

func firstDiff(a, b []time.Time) string {
	for i := range min(len(a), len(b)) {
		if !a[i].Equal(b[i]) {
			return fmt.Sprintf("index %d: %v vs %v", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("length %d vs %d", len(a), len(b))
}

// TestMissedPolicies stops Run, moves the clock three days (and half an
// hour) past an hourly schedule, as an outage does, and runs it again,
// under each policy.
func TestMissedPolicies(t *testing.T) {
	const jump = 72*time.Hour + 30*time.Minute
	for _, tc := range []struct {
		name        string
		opts        []schedule.AddOption
		want        []time.Time
		skipped     uint64
		lastSkipped int // the hour of the latest slot skipped (0: none)
	}{
		{"latest (the default)", nil, hours(74), 71, 73},
		{"skip: the latest is past its grace", []schedule.AddOption{schedule.WithMissed(schedule.MissedSkip)}, nil, 72, 74},
		{"skip with a longer grace", []schedule.AddOption{schedule.WithMissed(schedule.MissedSkip), schedule.WithGrace(time.Hour)}, hours(74), 71, 73},
		{"each", []schedule.AddOption{schedule.WithMissed(schedule.MissedEach)}, span(3, 74), 0, 0},
		{"each, bounded", []schedule.AddOption{schedule.WithMissed(schedule.MissedEach), schedule.WithCatchUpLimit(10)}, span(65, 74), 62, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, mock := newScheduler(t)
			rec := &recorder{clk: mock}
			if err := s.Add("job", schedule.Every(time.Hour), rec.job, tc.opts...); err != nil {
				t.Fatal(err)
			}
			stop := run(t, s)
			advance(t, s, mock, 2*time.Hour) // on time: slots 1 and 2
			if got := rec.slots("job"); !equalTimes(got, hours(1, 2)) {
				t.Fatalf("on time: %v", got)
			}
			stop()
			mock.Add(jump)
			run(t, s)
			if got := rec.slots("job"); !equalTimes(got, tc.want) {
				t.Fatalf("after the jump: %v, want %v", got, tc.want)
			}
			st := status(t, s, "job")
			if st.SkippedMissed != tc.skipped {
				t.Fatalf("SkippedMissed = %d, want %d", st.SkippedMissed, tc.skipped)
			}
			wantLast := time.Time{}
			if tc.lastSkipped > 0 {
				wantLast = epoch.Add(time.Duration(tc.lastSkipped) * time.Hour)
			}
			if !st.LastSkipped.Equal(wantLast) {
				t.Fatalf("LastSkipped = %v, want %v", st.LastSkipped, wantLast)
			}
			if !st.NextSlot.Equal(epoch.Add(75 * time.Hour)) {
				t.Fatalf("NextSlot = %v", st.NextSlot)
			}
			advance(t, s, mock, time.Hour) // and on time again
			if got := rec.slots("job"); !equalTimes(got, hours(75)) {
				t.Fatalf("after: %v", got)
			}
		})
	}
}

// TestRunningThroughAJump: slots that pass while Run runs each fire,
// whatever the policy, however far one move of the clock takes it.
func TestRunningThroughAJump(t *testing.T) {
	for _, m := range []schedule.Missed{schedule.MissedLatest, schedule.MissedSkip, schedule.MissedEach} {
		s, mock := newScheduler(t)
		rec := &recorder{clk: mock}
		if err := s.Add("job", schedule.Every(time.Hour), rec.job, schedule.WithMissed(m)); err != nil {
			t.Fatal(err)
		}
		run(t, s)
		advance(t, s, mock, 72*time.Hour+30*time.Minute)
		if got := rec.slots("job"); !equalTimes(got, span(1, 72)) {
			t.Fatalf("%v: fired %d slots, want 72: %v", m, len(got), got)
		}
		if st := status(t, s, "job"); st.SkippedMissed != 0 || st.Fired != 72 {
			t.Fatalf("%v: status %+v", m, st)
		}
	}
}

func TestPauseResume(t *testing.T) {
	s, mock := newScheduler(t)
	rec := &recorder{clk: mock}
	if err := s.Add("job", schedule.Every(time.Hour), rec.job, schedule.WithMissed(schedule.MissedEach)); err != nil {
		t.Fatal(err)
	}
	run(t, s)
	advance(t, s, mock, time.Hour)
	if err := s.Pause("job"); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause("job"); err != nil { // twice: no change
		t.Fatal(err)
	}
	quiet(t, s)
	st := status(t, s, "job")
	if !st.Paused || !st.NextSlot.IsZero() {
		t.Fatalf("paused: %+v", st)
	}
	advance(t, s, mock, 5*time.Hour+time.Minute)
	if err := s.Resume("job"); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume("job"); err != nil {
		t.Fatal(err)
	}
	quiet(t, s)
	advance(t, s, mock, time.Hour)
	if got := rec.slots("job"); !equalTimes(got, hours(1, 7)) {
		t.Fatalf("fired %v, want slot 1, none while paused (2-6), then 7", got)
	}
	st = status(t, s, "job")
	if st.SkippedPaused != 5 || !st.LastSkipped.Equal(epoch.Add(6*time.Hour)) || st.Paused {
		t.Fatalf("status %+v", st)
	}
}

func TestWithPausedAndTrigger(t *testing.T) {
	s, mock := newScheduler(t)
	rec := &recorder{clk: mock}
	if err := s.Add("job", schedule.Every(time.Hour), rec.job, schedule.WithPaused()); err != nil {
		t.Fatal(err)
	}
	// Trigger works before Run, and while paused.
	f1, err := s.Trigger(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	advance(t, s, mock, 3*time.Hour)
	f2, err := s.Trigger(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	if len(got) != 2 || !got[0].Triggered || !got[1].Triggered {
		t.Fatalf("fires %+v: want the two triggers only", got)
	}
	if f1.DedupID == f2.DedupID || !strings.HasPrefix(f1.DedupID, "sched:job:trigger:") || !f2.Slot.Equal(epoch.Add(3*time.Hour)) {
		t.Fatalf("triggers %+v, %+v", f1, f2)
	}
	st := status(t, s, "job")
	if st.Triggered != 2 || st.Fired != 0 {
		t.Fatalf("status %+v", st)
	}
	rec.fail = func(schedule.Fire) error { return errors.New("boom") }
	if _, err := s.Trigger(context.Background(), "job"); err == nil || err.Error() != "boom" {
		t.Fatalf("a failing trigger: %v", err)
	}
	if st := status(t, s, "job"); st.Failures != 1 || st.LastError != "boom" || st.Triggered != 2 {
		t.Fatalf("status %+v", st)
	}
}

// TestRetry: a failing job is tried again after the retry policy's delay,
// on the clock, until it succeeds; the slot is not lost.
func TestRetry(t *testing.T) {
	s, mock := newScheduler(t, schedule.WithRetry(queue.RetryPolicy{Initial: time.Minute, Max: 10 * time.Minute}))
	rec := &recorder{clk: mock}
	fails := 3
	rec.fail = func(schedule.Fire) error {
		if fails > 0 {
			fails--
			return fmt.Errorf("publish refused (%d to go)", fails)
		}
		return nil
	}
	if err := s.Add("job", schedule.Every(time.Hour), rec.job); err != nil {
		t.Fatal(err)
	}
	run(t, s)
	advance(t, s, mock, time.Hour) // fails; retry at +1m
	st := status(t, s, "job")
	if st.Failures != 1 || !st.NextFire.Equal(epoch.Add(time.Hour+time.Minute)) || !st.NextSlot.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("after one failure: %+v", st)
	}
	advance(t, s, mock, time.Minute-time.Nanosecond)
	if st := status(t, s, "job"); st.Failures != 1 {
		t.Fatalf("retried early: %+v", st)
	}
	advance(t, s, mock, time.Nanosecond) // fails; retry after 2m
	advance(t, s, mock, 2*time.Minute)   // fails; retry after 4m
	advance(t, s, mock, 4*time.Minute)   // succeeds
	got := rec.take()
	if len(got) != 1 || !got[0].Slot.Equal(epoch.Add(time.Hour)) || !got[0].now.Equal(epoch.Add(time.Hour+7*time.Minute)) {
		t.Fatalf("fires %+v", got)
	}
	st = status(t, s, "job")
	if st.Failures != 3 || st.Fired != 1 || st.LastError != "publish refused (0 to go)" || !st.NextFire.Equal(epoch.Add(2*time.Hour)) {
		t.Fatalf("status %+v", st)
	}
}

func TestJitter(t *testing.T) {
	const max = 10 * time.Minute
	s, mock := newScheduler(t)
	rec := &recorder{clk: mock}
	for _, name := range []string{"a", "b", "c"} {
		if err := s.Add(name, schedule.Every(time.Hour), rec.job, schedule.WithJitter(max)); err != nil {
			t.Fatal(err)
		}
	}
	run(t, s)
	next := map[string]time.Time{}
	for _, st := range s.Status() {
		if !st.NextSlot.Equal(epoch.Add(time.Hour)) || st.NextFire.Before(st.NextSlot) || !st.NextFire.Before(st.NextSlot.Add(max)) {
			t.Fatalf("%s: next slot %v fires at %v", st.Name, st.NextSlot, st.NextFire)
		}
		next[st.Name] = st.NextFire
	}
	if next["a"].Equal(next["b"]) && next["b"].Equal(next["c"]) {
		t.Fatalf("three schedules' jitter is the same: %v", next)
	}
	advance(t, s, mock, time.Hour+max)
	for _, f := range rec.take() {
		if !f.Slot.Equal(epoch.Add(time.Hour)) || f.DedupID != "sched:"+f.Schedule+":2026-01-01T01:00:00Z" {
			t.Fatalf("fire %+v: the slot and its dedup ID do not move with the jitter", f)
		}
	}
	// The same in another scheduler (another process).
	s2, _ := newScheduler(t)
	if err := s2.Add("b", schedule.Every(time.Hour), rec.job, schedule.WithJitter(max)); err != nil {
		t.Fatal(err)
	}
	if st := s2.Status()[0]; !st.NextFire.Equal(next["b"]) {
		t.Fatalf("b fires at %v in one scheduler, %v in another", next["b"], st.NextFire)
	}
}

// TestAPanickingJobIsAFailure: a job's panic fails its fire (retried) and
// does not end Run; a Trigger's returns it.
func TestAPanickingJobIsAFailure(t *testing.T) {
	s, mock := newScheduler(t)
	panics := 1
	rec := &recorder{clk: mock, fail: func(schedule.Fire) error {
		if panics > 0 {
			panics--
			panic("nil map")
		}
		return nil
	}}
	if err := s.Add("job", schedule.Every(time.Hour), rec.job); err != nil {
		t.Fatal(err)
	}
	run(t, s)
	advance(t, s, mock, time.Hour)
	st := status(t, s, "job")
	if st.Failures != 1 || !strings.Contains(st.LastError, "nil map") || st.Fired != 0 {
		t.Fatalf("after the panic: %+v", st)
	}
	advance(t, s, mock, time.Second) // the retry
	if st := status(t, s, "job"); st.Fired != 1 {
		t.Fatalf("after the retry: %+v", st)
	}
	rec.mu.Lock()
	panics = 1
	rec.mu.Unlock()
	var pe *poller.PanicError
	if _, err := s.Trigger(context.Background(), "job"); !errors.As(err, &pe) || pe.Value != "nil map" || len(pe.Stack) == 0 {
		t.Fatalf("Trigger of a panicking job: %v", err)
	}
}
