package leasebus_test

// The bad-input table below the broker: the queue core, lease IDs, the
// Deduper, Headers and RetryPolicy. The helpers are badinput_test.go's.

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/core"
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
		err := callSafely(func() error { _, err := core.New[int](cfg, nil); return err })
		wantErr(t, "core.New("+name+")", err, queue.ErrInvalidArgument)
		wantErr(t, "core.ValidateConfig("+name+")", core.ValidateConfig(cfg), queue.ErrInvalidArgument)
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
		err := callSafely(func() error { return c.fn(q) })
		wantErr(t, c.name, err, c.want)
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
		wantErr(t, "after Close: Queue."+name, callSafely(fn), queue.ErrClosed)
	}
	wantErr(t, "after Close: Queue.TryPoll", callSafely(func() error {
		if ds := q.TryPoll(1); ds != nil {
			return fmt.Errorf("TryPoll = %v", ds)
		}
		return nil
	}), nil)
	wantErr(t, "after Close: Queue.Sweep, Close", callSafely(func() error { q.Sweep(); return q.Close() }), nil)
	if after := q.Stats(); after != before {
		t.Errorf("calls after Close changed the stats: %+v -> %+v", before, after)
	}
}

func TestBadInputLease(t *testing.T) {
	for _, s := range []string{
		"", "x", "-", ".", "-.", "0123456789abcdef", "0123456789abcdef-", "0123456789abcdef-1", "0123456789abcdef-.1",
		"0123456789abcdef-1.", "0123456789abcde-1.1", "0123456789abcdef0-1.1", "0123456789abcdeg-1.1",
		"0123456789abcdef--1.1", "0123456789abcdef-+1.1", "0123456789abcdef-1.-1", "0123456789abcdef-1.4294967296",
		"0123456789abcdef-18446744073709551616.1", "0x23456789abcdef-1.1", "0123456789abcdef-1.1.1", "0123456789abcdef-1_0.1",
		" 0123456789abcdef-1.1", "0123456789abcdef-1.1 ", "０123456789abcdef-1.1",
	} {
		id, err := lease.ParseID(s)
		if !errors.Is(err, lease.ErrSyntax) || !id.IsZero() {
			t.Errorf("ParseID(%q) = %v, %v; want the zero ID and ErrSyntax", s, id, err)
		}
	}
	for _, id := range []lease.ID{{}, lease.NewID(math.MaxUint64, math.MaxUint64, math.MaxUint32), lease.NewID(1, 0, 0)} {
		back, err := lease.ParseID(id.String())
		if err != nil || back != id {
			t.Errorf("ParseID(%q) = %v, %v; want %v", id.String(), back, err, id)
		}
	}
}

func TestBadInputDeduperHeadersRetry(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt} {
		d, err := callSafelyDeduper(n)
		if !errors.Is(err, queue.ErrInvalidArgument) || d != nil {
			t.Errorf("NewDeduper(%d) = %v, %v; want ErrInvalidArgument", n, d, err)
		}
	}
	d, err := queue.NewDeduper(2)
	must(t, err)
	if _, err := d.Do(uuid.Nil, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("Do(nil func) = %v", err)
	}
	// A panic in fn propagates and leaves the id unrecorded, not running.
	id := uuid.New()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Do swallowed fn's panic")
			}
		}()
		d.Do(id, func() error { panic("boom") })
	}()
	if d.Len() != 0 {
		t.Error("a panicking fn was recorded")
	}
	if ran, err := d.Do(id, func() error { return nil }); !ran || err != nil {
		t.Errorf("Do after a panic = %v, %v; want it to run", ran, err)
	}
	if ran, err := d.Do(uuid.Nil, func() error { return nil }); !ran || err != nil {
		t.Errorf("Do(uuid.Nil) = %v, %v; want it to run once", ran, err)
	}

	// Headers: nil, empty, the empty key, odd keys; the zero value.
	for _, m := range []map[string]string{nil, {}} {
		h := queue.NewHeaders(m)
		if h.Len() != 0 || h.Get("") != "" || h.String() != "map[]" {
			t.Errorf("NewHeaders(%v) = %v", m, h)
		}
	}
	src := map[string]string{"": "empty", "K": "upper", "k": "lower", "\xff": "bad utf-8", "ключ": "значение", strings.Repeat("k", 1<<16): "long"}
	h := queue.NewHeaders(src)
	src[""] = "changed"
	for k, v := range map[string]string{"": "empty", "K": "upper", "k": "lower", "\xff": "bad utf-8", "ключ": "значение"} {
		if got, ok := h.Lookup(k); !ok || got != v {
			t.Errorf("Headers.Lookup(%q) = %q, %v; want %q", k, got, ok, v)
		}
	}
	if _, ok := h.Lookup("missing"); ok || h.Len() != 6 {
		t.Errorf("Headers = %v", h)
	}
	var zero queue.Headers
	if zero.Len() != 0 || zero.Get("x") != "" || zero.String() != "map[]" {
		t.Error("zero Headers")
	}
	for range zero.All() {
		t.Error("zero Headers yields")
	}

	// Stringers of out-of-range values.
	for _, s := range []fmt.Stringer{queue.Priority(math.MinInt8), queue.Priority(math.MaxInt8), queue.Reason(255), queue.OverflowPolicy(255)} {
		if s.String() == "" {
			t.Errorf("%T(%v).String() is empty", s, s)
		}
	}
	if core.ValidPriority(3) || core.ValidPriority(-2) {
		t.Error("ValidPriority out of range")
	}
}

func callSafelyDeduper(n int) (d *queue.Deduper, err error) {
	err = callSafely(func() error {
		var e error
		d, e = queue.NewDeduper(n)
		return e
	})
	return d, err
}

// NewDeduper documents capacity < 1 as its only invalid input; a huge
// capacity is a valid bound on memory, not a preallocation order.
func TestBadInputDeduperHugeCapacity(t *testing.T) {
	d, err := callSafelyDeduper(math.MaxInt)
	if err != nil && strings.HasPrefix(err.Error(), "PANIC") {
		knownBugRoot(t, "deduper-huge-capacity-panics",
			"queue.NewDeduper(math.MaxInt) panics (%s): it preallocates the ring and the map; want a working Deduper or an ErrInvalidArgument",
			strings.SplitN(err.Error(), "\n", 2)[0])
	}
	if err == nil {
		if ran, err := d.Do(uuid.New(), func() error { return nil }); !ran || err != nil {
			t.Errorf("Do = %v, %v", ran, err)
		}
	} else if !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("NewDeduper(MaxInt) = %v", err)
	}
}

// RetryPolicy.Delay is documented as capped at Max and never negative
// ("attempt k waits Initial × Multiplier^(k-1), capped at Max, less a
// random fraction"). With durations near math.MaxInt64 the float64
// arithmetic rounds up to 2^63 and the conversion back overflows to a
// negative Duration: Fail then retries at once instead of waiting.
func TestBadInputRetryDelayExtremes(t *testing.T) {
	nan := func() float64 { return math.NaN() }
	var bad []string
	for _, p := range []queue.RetryPolicy{
		{Initial: math.MaxInt64},
		{Initial: time.Second, Max: math.MaxInt64},
		{Initial: math.MaxInt64, Max: math.MaxInt64, Multiplier: 1},
		{Initial: time.Second, Max: math.MaxInt64, Multiplier: math.MaxFloat64},
		{Jitter: 1, Rand: func() float64 { return 2 }},
		{Jitter: 1, Rand: func() float64 { return -1 }},
		{Jitter: 1, Rand: nan},
	} {
		if err := p.Validate(); err != nil {
			t.Fatalf("%+v: Validate = %v", p, err)
		}
		maxd := p.Max
		if maxd == 0 {
			maxd = max(time.Minute, p.Initial)
		}
		var wrong []string
		for _, attempt := range []int{math.MinInt, -1, 0, 1, 2, 40, 64, 1 << 20, math.MaxInt} {
			if d := callDelay(t, p, attempt); d < 0 || d > maxd {
				wrong = append(wrong, fmt.Sprintf("Delay(%d) = %v", attempt, d))
			}
		}
		if len(wrong) > 0 {
			bad = append(bad, fmt.Sprintf("{Initial:%d Max:%d Multiplier:%g Jitter:%g Rand:%v}: %d of 9 attempts, e.g. %s",
				p.Initial, p.Max, p.Multiplier, p.Jitter, p.Rand != nil, len(wrong), wrong[len(wrong)-1]))
		}
	}
	if len(bad) > 0 {
		knownBugRoot(t, "retry-delay-overflow", "RetryPolicy.Delay out of [0, Max]:\n  %s", strings.Join(bad, "\n  "))
	}
}

func callDelay(t *testing.T, p queue.RetryPolicy, attempt int) (d time.Duration) {
	t.Helper()
	if err := callSafely(func() error { d = p.Delay(attempt); return nil }); err != nil {
		t.Errorf("Delay(%d) panicked: %v", attempt, err)
	}
	return d
}
