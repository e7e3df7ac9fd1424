package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
)

// TestSchedule's schedule inside testing/synctest, on the real clock the
// bubble makes virtual: no waiting for the pool between moves of a clock
// and no log of outcomes to compare with the subscription's count; five
// seconds pass at once, and synctest.Wait returns when every goroutine,
// the pool's and the partner's, waits.
func TestScheduleInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := brokertest.NewReal[Webhook](t)
		sub, err := subscribe(b)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, c := range []struct {
			customer string
			n        int
		}{{"acme", 5}, {"globex", 3}, {"initech", 2}} {
			for i := range c.n {
				if err := publish(ctx, b, Webhook{Customer: c.customer, Event: fmt.Sprintf("order-%d", i+1)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		clk := clock.New()
		p := &partner{clock: clk, start: clk.Now(), refuse: Webhook{"globex", "order-2"}}
		var mu sync.Mutex
		var attempts []string // "globex order-2 1": each outcome's delivery and attempt
		pool, err := poller.New(sub, deliver(p), poller.WithWorkers(1), poller.WithObserver(func(ev poller.Event[Webhook]) {
			mu.Lock()
			defer mu.Unlock()
			d := ev.Delivery
			attempts = append(attempts, fmt.Sprintf("%s %s %d", d.Payload.Customer, d.Payload.Event, d.Attempt))
		}))
		if err != nil {
			t.Fatal(err)
		}
		brokertest.RunPool(t, pool)
		time.Sleep(5 * time.Second)
		synctest.Wait()

		want := []string{
			"0s acme order-1",
			"0s acme order-2",
			"0s globex order-1",
			"0s globex order-2 429",
			"2s acme order-3",
			"2s acme order-4",
			"2s globex order-2",
			"2s globex order-3",
			"2s initech order-1",
			"2s initech order-2",
			"2.5s acme order-5",
		}
		p.mu.Lock()
		got := slices.Clone(p.requests)
		p.mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		mu.Lock()
		defer mu.Unlock()
		if n := slices.Index(attempts, "globex order-2 1"); n < 0 || !slices.Contains(attempts[n+1:], "globex order-2 1") {
			t.Errorf("outcomes %v: want globex order-2 twice on attempt 1: a 429 spends none", attempts)
		}
		if st := sub.Stats(); st.Acked != 10 || st.Visible+st.Delayed+st.InFlight != 0 {
			t.Errorf("%v, want all 10 acked", st)
		}
	})
}
