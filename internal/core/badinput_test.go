package core_test

// Bad input to the queue core: every call refuses it with an error, never
// a panic, and changes nothing.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

func TestBadInputQueue(t *testing.T) {
	badConfigs := map[string]queue.Config{
		"VisibilityTimeout -1": {VisibilityTimeout: -1},
		"MaxAttempts -2":       {MaxAttempts: -2},
		"MaxAttempts MinInt":   {MaxAttempts: math.MinInt},
		"MaxQueue -1":          {MaxQueue: -1},
		"Overflow 4":           {Overflow: 4},
		"MaxInFlight -1":       {MaxInFlight: -1},
		"TTL -1":               {TTL: -1},
		"Retry.Initial -1":     {Retry: queue.RetryPolicy{Initial: -1}},
		"Retry.Jitter NaN":     {Retry: queue.RetryPolicy{Jitter: math.NaN()}},
		"Retry.Multiplier 0.9": {Retry: queue.RetryPolicy{Multiplier: 0.9}},
	}
	for name, cfg := range badConfigs {
		err := testkit.CallSafely(func() error { _, err := core.New[int](cfg, nil); return err })
		testkit.WantErr(t, "core.New("+name+")", err, queue.ErrInvalidArgument)
		testkit.WantErr(t, "core.ValidateConfig("+name+")", core.ValidateConfig(cfg), queue.ErrInvalidArgument)
	}

	newQ := func(t *testing.T) (*core.Queue[int], *clock.Mock) {
		mock := clock.NewMock()
		q, err := core.New[int](queue.Config{Clock: mock, MaxQueue: 2, Overflow: queue.OverflowReject}, nil)
		must(t, err)
		t.Cleanup(func() { q.Close() })
		must(t, q.Offer(ctx, &queue.Message[int]{Payload: 1}, 0))
		return q, mock
	}
	msg := &queue.Message[int]{Payload: 9}
	calls := []struct {
		name string
		want error
		fn   func(q *core.Queue[int]) error
	}{
		{"Offer(nil ctx)", queue.ErrInvalidArgument, func(q *core.Queue[int]) error {
			//lint:ignore SA1012 a nil context is the invalid input under test
			return q.Offer(nil, msg, 0)
		}},
		{"Offer(nil msg)", queue.ErrInvalidArgument, func(q *core.Queue[int]) error { return q.Offer(ctx, nil, 0) }},
		{"Offer(priority 3)", queue.ErrInvalidArgument, func(q *core.Queue[int]) error { return q.Offer(ctx, &queue.Message[int]{Priority: 3}, 0) }},
		{"Offer(delay -1)", queue.ErrInvalidArgument, func(q *core.Queue[int]) error { return q.Offer(ctx, msg, -1) }},
		{"Offer(WithTTL(0))", queue.ErrInvalidArgument, func(q *core.Queue[int]) error { return q.Offer(ctx, msg, 0, core.WithTTL(0)) }},
		{"Offer(WithTTL(MinInt64))", queue.ErrInvalidArgument, func(q *core.Queue[int]) error {
			return q.Offer(ctx, msg, 0, core.WithTTL(math.MinInt64))
		}},
		{"Redrive(priority 5)", queue.ErrInvalidArgument, func(q *core.Queue[int]) error {
			return q.Redrive(core.Letter[int]{DeadLetter: queue.DeadLetter[int]{Message: queue.Message[int]{Priority: 5}}})
		}},
		{"Redrive(full queue)", queue.ErrQueueFull, func(q *core.Queue[int]) error {
			must(t, q.Offer(ctx, &queue.Message[int]{Payload: 2}, 0))
			before := q.Stats()
			err := q.Redrive(core.Letter[int]{DeadLetter: queue.DeadLetter[int]{Message: queue.Message[int]{Payload: 3}}})
			if after := q.Stats(); after != before {
				return fmt.Errorf("a refused Redrive changed %+v to %+v", before, after)
			}
			return err
		}},
		{"Offer(full queue, OverflowReject)", queue.ErrQueueFull, func(q *core.Queue[int]) error {
			must(t, q.Offer(ctx, &queue.Message[int]{Payload: 2}, 0))
			return q.Offer(ctx, msg, 0)
		}},
	}
	for _, c := range calls {
		q, _ := newQ(t)
		before := q.Stats()
		err := testkit.CallSafely(func() error { return c.fn(q) })
		testkit.WantErr(t, c.name, err, c.want)
		after := q.Stats()
		if strings.Contains(c.name, "full") { // the call filled the queue first
			before.Visible++
			before.Published++
			if strings.Contains(c.name, "Offer") {
				before.Rejected++
			}
		}
		if after != before {
			t.Errorf("%s changed the stats: %+v -> %+v", c.name, before, after)
		}
	}

	// After Close every call returns ErrClosed and changes nothing.
	q, _ := newQ(t)
	ds := q.TryPoll(1)
	must(t, q.Close())
	before := q.Stats()
	id := ds[0].LeaseID
	afterClose := map[string]func() error{
		"Offer":              func() error { return q.Offer(ctx, msg, 0) },
		"Redrive":            func() error { return q.Redrive(core.Letter[int]{}) },
		"Poll":               func() error { _, err := q.Poll(ctx, 1); return err },
		"PollWithVisibility": func() error { _, err := q.PollWithVisibility(ctx, 1, time.Second); return err },
		"PollInto":           func() error { _, err := q.PollInto(ctx, make([]queue.Delivery[int], 1)); return err },
		"TryPollInto":        func() error { _, err := q.TryPollInto(make([]queue.Delivery[int], 1)); return err },
		"Ack":                func() error { return q.Ack(id) },
		"AckBatch":           func() error { return q.AckBatch([]lease.ID{id}) },
		"Nack":               func() error { return q.Nack(id, 0) },
		"Fail":               func() error { return q.Fail(id, nil) },
		"Reject":             func() error { return q.Reject(id, nil) },
		"Release":            func() error { return q.Release(id) },
		"Extend":             func() error { return q.Extend(id, time.Second) },
		"Purge":              func() error { _, err := q.Purge(); return err },
		"AwaitParked":        func() error { return q.AwaitParked(ctx, 0) },
	}
	for name, fn := range afterClose {
		testkit.WantErr(t, "after Close: Queue."+name, testkit.CallSafely(fn), queue.ErrClosed)
	}
	testkit.WantErr(t, "after Close: Queue.TryPoll", testkit.CallSafely(func() error {
		if ds := q.TryPoll(1); ds != nil {
			return fmt.Errorf("TryPoll = %v", ds)
		}
		return nil
	}), nil)
	testkit.WantErr(t, "after Close: Queue.Sweep, Close", testkit.CallSafely(func() error { q.Sweep(); return q.Close() }), nil)
	if after := q.Stats(); after != before {
		t.Errorf("calls after Close changed the stats: %+v -> %+v", before, after)
	}
	if core.ValidPriority(3) || core.ValidPriority(-2) {
		t.Error("ValidPriority out of range")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var ctx = context.Background()
