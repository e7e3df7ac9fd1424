package queue_test

// Bad input to Headers and RetryPolicy.

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/queue"
)

func TestBadInputHeadersRetry(t *testing.T) {
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
		t.Fatalf("BUG retry-delay-overflow: "+"RetryPolicy.Delay out of [0, Max]:\n  %s", strings.Join(bad, "\n  "))
	}
}

func callDelay(t *testing.T, p queue.RetryPolicy, attempt int) (d time.Duration) {
	t.Helper()
	if err := testkit.CallSafely(func() error { d = p.Delay(attempt); return nil }); err != nil {
		t.Errorf("Delay(%d) panicked: %v", attempt, err)
	}
	return d
}
