package schedule_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	_ "time/tzdata" // America/New_York wherever the test runs

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/schedule"
)

// A year of a nightly cron job in New York, across both of its DST
// changes, inside a testing/synctest bubble: 366 fires of 2000 (a leap
// year), each at 03:00 local at the very instant of its slot, 23 hours
// after the one before on the night the clocks go forward and 25 on the
// night they go back. A year of virtual time; no real wait.
func TestYearOfCronAcrossDSTInBubble(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now() // the bubble starts at 2000-01-01 00:00 UTC
		if start.Year() != 2000 {
			t.Fatalf("the bubble starts at %v", start)
		}
		var mu sync.Mutex
		var fires []time.Time // the clock's time at each fire
		s, err := schedule.New(schedule.WithClock(clock.New()))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add("nightly", schedule.CronIn(ny, "0 3 * * *"), func(_ context.Context, f schedule.Fire) error {
			mu.Lock()
			defer mu.Unlock()
			if now := time.Now(); !now.Equal(f.Slot) {
				t.Errorf("slot %v fired at %v", f.Slot, now)
			}
			fires = append(fires, f.Slot)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(start.AddDate(1, 0, 0).Sub(start))
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		mu.Lock()
		defer mu.Unlock()
		if len(fires) != 366 {
			t.Fatalf("%d fires in 2000, want 366", len(fires))
		}
		gaps := map[time.Duration]int{}
		for i, f := range fires {
			l := f.In(ny)
			if l.Hour() != 3 || l.Minute() != 0 || l.Second() != 0 || l.YearDay() != i+1 {
				t.Fatalf("fire %d at %v, want 03:00 of day %d", i, l, i+1)
			}
			if i > 0 {
				gaps[f.Sub(fires[i-1])]++
			}
		}
		want := map[time.Duration]int{24 * time.Hour: 363, 23 * time.Hour: 1, 25 * time.Hour: 1}
		if len(gaps) != len(want) || gaps[24*time.Hour] != 363 || gaps[23*time.Hour] != 1 || gaps[25*time.Hour] != 1 {
			t.Fatalf("gaps between fires %v, want %v", gaps, want)
		}
		// The clocks went forward at 02:00 on 2 April 2000, and back at
		// 02:00 on 29 October.
		for _, c := range []struct {
			i     int
			month time.Month
			day   int
			gap   time.Duration
		}{{92, time.April, 2, 23 * time.Hour}, {302, time.October, 29, 25 * time.Hour}} {
			if d := fires[c.i].In(ny); d.Month() != c.month || d.Day() != c.day || fires[c.i].Sub(fires[c.i-1]) != c.gap {
				t.Errorf("fire %d: %v, %v after the one before; want %s %d, %v after", c.i, d, fires[c.i].Sub(fires[c.i-1]), c.month, c.day, c.gap)
			}
		}
	})
}
