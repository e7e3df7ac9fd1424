package pgleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/queue"
)

// TestExactOnMockClock drives one message through every way back to the
// queue over a real PostgreSQL, with the bus's clock a mock: the backoff
// of a failure, a lease that expires, and dead-lettering on the last
// attempt, each at its exact nanosecond, with no sleep. .ci/run runs it
// 200 times under -race.
func TestExactOnMockClock(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	if err := e.bus.CreateTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	const vis = 30 * time.Second
	retry := queue.RetryPolicy{Initial: time.Second, Multiplier: 2, Max: time.Minute}
	sub, err := pgleasebus.Subscribe(ctx, e.bus, "orders", "billing", queue.StringCodec(),
		pgleasebus.WithVisibilityTimeout(vis), pgleasebus.WithMaxAttempts(4), pgleasebus.WithRetry(retry))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := pgleasebus.NewPublisher(e.bus, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}
	t0 := e.clk.Now()
	if _, err := pub.Publish(ctx, "orders", "job"); err != nil {
		t.Fatal(err)
	}

	// pollAt moves the clock to at-1ns, sees nothing, then moves it the
	// last nanosecond under a blocked Poll, which must wake with attempt.
	pollAt := func(at time.Time, attempt int) queue.Delivery[string] {
		t.Helper()
		e.clk.Set(at.Add(-time.Nanosecond))
		if ds := sub.TryPoll(1); len(ds) != 0 {
			t.Fatalf("at %v, a nanosecond early: leased attempt %d", at.Sub(t0), ds[0].Attempt)
		}
		parkCtx, parked := context.WithCancel(ctx)
		defer parked()
		got := make(chan []queue.Delivery[string], 1)
		errs := make(chan error, 1)
		go func() {
			ds, err := sub.Poll(ctx, 1)
			parked() // a Poll that returns without parking ends the wait for it
			got <- ds
			errs <- err
		}()
		if err := sub.AwaitParked(parkCtx, 1); err != nil {
			t.Fatalf("at %v, a nanosecond early: the Poll did not park: %+v, %v", at.Sub(t0), <-got, <-errs)
		}
		e.clk.Add(time.Nanosecond)
		ds := <-got
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].Attempt != attempt || ds[0].Payload != "job" {
			t.Fatalf("at %v: %+v, want attempt %d", at.Sub(t0), ds, attempt)
		}
		if want := at.Add(vis); !ds[0].Deadline.Equal(want) {
			t.Fatalf("attempt %d: deadline %v, want %v", attempt, ds[0].Deadline.Sub(t0), want.Sub(t0))
		}
		return ds[0]
	}

	d1, err := sub.Poll(ctx, 1)
	if err != nil || len(d1) != 1 || d1[0].Attempt != 1 {
		t.Fatalf("first poll: %+v, %v", d1, err)
	}
	// Attempt 1 fails: back after Initial, 1s.
	if err := sub.Fail(d1[0].LeaseID, errors.New("first")); err != nil {
		t.Fatal(err)
	}
	d2 := pollAt(t0.Add(time.Second), 2)
	// Attempt 2 is abandoned: back at its deadline.
	d3 := pollAt(d2.Deadline, 3)
	if err := sub.Ack(d2.LeaseID); !errors.Is(err, queue.ErrLeaseExpired) {
		t.Fatalf("Ack of attempt 2's lease after attempt 3's delivery: %v, want ErrLeaseExpired", err)
	}
	// Attempt 3 fails: back after 4s (Initial doubled twice).
	failedAt := e.clk.Now()
	if err := sub.Fail(d3.LeaseID, errors.New("third")); err != nil {
		t.Fatal(err)
	}
	d4 := pollAt(failedAt.Add(4*time.Second), 4)
	// Attempt 4, the last, fails: dead-lettered at once.
	deadAt := e.clk.Now()
	if err := sub.Fail(d4.LeaseID, errors.New("fourth")); err != nil {
		t.Fatal(err)
	}
	dls, err := pgleasebus.DeadLetters(ctx, e.bus, queue.StringCodec())
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters: %+v, %v", dls, err)
	}
	dl := dls[0]
	if dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 4 || dl.LastError != "fourth" || !dl.At.Equal(deadAt) || dl.Subscription != "billing" {
		t.Fatalf("dead letter: %+v", dl)
	}
	want := []struct {
		outcome queue.AttemptOutcome
		at      time.Time
		err     string
	}{
		{queue.AttemptFailed, t0, "first"},
		{queue.AttemptExpired, d2.Deadline, "lease expired"},
		{queue.AttemptFailed, failedAt, "third"},
		{queue.AttemptFailed, deadAt, "fourth"},
	}
	if len(dl.History) != len(want) {
		t.Fatalf("history: %+v", dl.History)
	}
	for i, w := range want {
		if a := dl.History[i]; a.Attempt != i+1 || a.Outcome != w.outcome || !a.At.Equal(w.at) || a.Error != w.err {
			t.Errorf("history[%d] = %+v, want attempt %d %v at %v %q", i, a, i+1, w.outcome, w.at.Sub(t0), w.err)
		}
	}
	st, err := sub.Stats(ctx)
	if err != nil || st.Visible+st.Delayed+st.InFlight != 0 || st.DeadLetteredBy.MaxAttempts != 1 {
		t.Fatalf("stats: %v, %v", st, err)
	}
	// Redriven, it starts again at attempt 1.
	if n, err := pgleasebus.Redrive(ctx, e.bus, queue.StringCodec(), func(queue.DeadLetter[string]) bool { return true }); n != 1 || err != nil {
		t.Fatalf("Redrive: %d, %v", n, err)
	}
	d, err := sub.Poll(ctx, 1)
	if err != nil || len(d) != 1 || d[0].Attempt != 1 || d[0].Message.ID != d1[0].Message.ID {
		t.Fatalf("after redrive: %+v, %v", d, err)
	}
	if err := sub.Ack(d[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	if err := sub.AwaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}
