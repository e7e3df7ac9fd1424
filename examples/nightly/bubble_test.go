package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
)

// TestAWeekOfNightsInBubble is TestAWeekOfNights inside testing/synctest,
// on the real clock, which the bubble makes virtual: no stepping from fire
// to fire and no waiting for the pool between moves; time.Sleep passes
// the week at once and synctest.Wait waits until every rollup is done. The
// bubble's time begins on 1 January 2000, so the week is the one Berlin
// moved to summer time in that year (26 March).
func TestAWeekOfNightsInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(time.Date(2000, 3, 23, 12, 0, 0, 0, berlin)))
		var mu sync.Mutex
		var rolled []string
		cfg := config{cron: "0 2 * * *", loc: berlin, state: t.TempDir(), clock: clock.New(),
			roll: func(_ context.Context, r rollup) error {
				mu.Lock()
				defer mu.Unlock()
				rolled = append(rolled, r.Day)
				return nil
			}}
		take := func() []string {
			synctest.Wait() // every goroutine waits: what is due is rolled up
			mu.Lock()
			defer mu.Unlock()
			out := rolled
			rolled = nil
			return out
		}
		run := func() (stop func()) {
			a, err := start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.run(ctx) }()
			return func() {
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		}

		stop := run()
		time.Sleep(7 * 24 * time.Hour)
		want := []string{"2000-03-23", "2000-03-24", "2000-03-25", "2000-03-26", "2000-03-27", "2000-03-28", "2000-03-29"}
		if got := take(); !slices.Equal(got, want) {
			t.Fatalf("a week: rolled up %v, want %v", got, want)
		}
		stop()

		time.Sleep(48 * time.Hour) // down for two nights
		stop = run()
		if got := take(); !slices.Equal(got, []string{"2000-03-30", "2000-03-31"}) {
			t.Fatalf("after two nights down: rolled up %v", got)
		}
		time.Sleep(24 * time.Hour)
		if got := take(); !slices.Equal(got, []string{"2000-04-01"}) {
			t.Fatalf("the night after: rolled up %v", got)
		}
		stop()
	})
}
