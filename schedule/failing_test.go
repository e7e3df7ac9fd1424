package schedule_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

// TestMissedWhileAJobFails: slots that pass while a job keeps failing are
// missed slots, and the schedule's policy decides them when the job
// recovers: the docs' nightly job that failed three nights with the
// process up runs once (MissedLatest), each night (MissedEach), or only a
// slot found within its grace (MissedSkip).
func TestMissedWhileAJobFails(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 1, d, 3, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name    string
		opts    []schedule.AddOption
		want    []time.Time // the slots fired by the recovery at 01-03 12:00, and the next night
		skipped uint64
	}{
		{"latest", nil, []time.Time{day(3), day(4)}, 2},
		{"each", []schedule.AddOption{schedule.WithMissed(schedule.MissedEach)}, []time.Time{day(1), day(2), day(3), day(4)}, 0},
		// The failed slot is tried until a later one passes; then the
		// later one is on time (within its grace) or given up with it.
		{"skip", []schedule.AddOption{schedule.WithMissed(schedule.MissedSkip)}, []time.Time{day(3), day(4)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, mock := newScheduler(t, schedule.WithRetry(queue.RetryPolicy{Initial: time.Minute, Max: time.Hour}))
			rec := &recorder{clk: mock}
			recovered := time.Date(2026, 1, 3, 12, 0, 0, 0, time.UTC)
			rec.fail = func(schedule.Fire) error {
				if mock.Now().Before(recovered) {
					return errors.New("the warehouse is down")
				}
				return nil
			}
			if err := s.Add("nightly", schedule.Cron("0 3 * * *"), rec.job, tc.opts...); err != nil {
				t.Fatal(err)
			}
			run(t, s)
			for mock.Now().Before(day(4).Add(time.Hour)) {
				advance(t, s, mock, 10*time.Minute)
			}
			if got := rec.slots("nightly"); !equalTimes(got, tc.want) {
				t.Fatalf("fired %v, want %v", got, tc.want)
			}
			if st := status(t, s, "nightly"); st.SkippedMissed != tc.skipped || st.Fired != uint64(len(tc.want)) {
				t.Fatalf("status: skipped %d, fired %d; want %d, %d", st.SkippedMissed, st.Fired, tc.skipped, len(tc.want))
			}
		})
	}
}
