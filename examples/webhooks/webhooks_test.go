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

// The pace, to the millisecond, inside a testing/synctest bubble, on the
// real clock the bubble makes virtual: a pool of one worker (so that the
// order within an instant is the subscription's) sends 3 customers'
// webhooks at 10 a second in all and 2 a second a customer; the
// partner's 429 to globex's second webhook stops everything for its
// Retry-After of 2s, and that webhook goes again with its attempt kept.
// Five seconds pass at once, and synctest.Wait returns when every
// goroutine, the pool's and the partner's, waits: the test needs no
// synchronisation of its own.
func TestSchedule(t *testing.T) {
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
			"0s acme order-1", // 2 tokens for acme; acme's next two wait for theirs (500ms each)
			"0s acme order-2",
			"0s globex order-1",
			"0s globex order-2 429", // the pool stops for 2s
			"2s acme order-3",       // acme's bucket is full again: two, then one every 500ms
			"2s acme order-4",
			"2s globex order-2", // the same attempt, again, in its place
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

// The program runs as `go run ./examples/webhooks` does, on the real clock.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("about 5s of real time")
	}
	var out strings.Builder
	if err := run(t.Context(), clock.New(), &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Count(s, "\n") != 18 || !strings.Contains(s, "globex order-2 429") || !strings.Contains(s, "acked=16 ") {
		t.Fatalf("output:\n%s", s)
	}
}
