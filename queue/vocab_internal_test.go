package queue

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRetryPolicyDelay(t *testing.T) {
	half := func() float64 { return 0.5 }
	for _, tc := range []struct {
		p       RetryPolicy
		attempt int
		want    time.Duration
	}{
		{RetryPolicy{}, 1, time.Second},
		{RetryPolicy{}, 2, 2 * time.Second},
		{RetryPolicy{}, 7, time.Minute}, // 64s capped
		{RetryPolicy{}, 0, time.Second},
		{RetryPolicy{}, 10_000, time.Minute}, // overflow-safe
		{RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 3}, 3, 900 * time.Millisecond},
		{RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 3}, 4, time.Second},
		{RetryPolicy{Initial: 2 * time.Minute}, 1, 2 * time.Minute}, // Initial above the default cap
		{RetryPolicy{Jitter: 0.5, Rand: half}, 1, 750 * time.Millisecond},
		{RetryPolicy{Jitter: 1, Rand: half}, 2, time.Second},
		{RetryPolicy{NoBackoff: true}, 5, 0},
	} {
		if got := tc.p.Delay(tc.attempt); got != tc.want {
			t.Errorf("%+v.Delay(%d) = %v, want %v", tc.p, tc.attempt, got, tc.want)
		}
	}
}

func TestRetryJitterStaysInRange(t *testing.T) {
	p := RetryPolicy{Jitter: 0.3}
	for range 1000 {
		if d := p.Delay(1); d < 700*time.Millisecond || d > time.Second {
			t.Fatalf("Delay = %v out of [700ms, 1s]", d)
		}
	}
}

func TestHeaders(t *testing.T) {
	src := map[string]string{"b": "2", "a": "1"}
	h := NewHeaders(src)
	src["a"] = "changed"
	if h.Get("a") != "1" || h.Len() != 2 || h.Get("zz") != "" {
		t.Errorf("headers = %v", h)
	}
	if _, ok := h.Lookup("b"); !ok {
		t.Error("Lookup(b)")
	}
	var keys []string
	for k := range h.All() {
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Errorf("All yields %v, want sorted keys", keys)
	}
	if h.String() != "map[a:1 b:2]" {
		t.Errorf("String = %q", h.String())
	}
	if (Headers{}).Len() != 0 || h.String() != "map[a:1 b:2]" {
		t.Errorf("String = %q", h.String())
	}
}

func TestPriorityAndReasonStrings(t *testing.T) {
	for p, want := range map[Priority]string{PriorityLow: "low", PriorityNormal: "normal", PriorityHigh: "high", PriorityCritical: "critical", 9: "Priority(9)"} {
		if p.String() != want {
			t.Errorf("%d.String() = %q", p, p.String())
		}
	}
	for r, want := range map[Reason]string{ReasonMaxAttempts: "max-attempts", ReasonOverflow: "overflow", ReasonExpired: "expired", ReasonRejected: "rejected", ReasonCancelled: "cancelled", 0: "Reason(0)"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q", r, r.String())
		}
	}
	for p, want := range map[OverflowPolicy]string{OverflowDeadLetter: "dead-letter", OverflowReject: "reject", OverflowBlock: "block", OverflowDropOldest: "drop-oldest", 7: "OverflowPolicy(7)"} {
		if p.String() != want {
			t.Errorf("%d.String() = %q", p, p.String())
		}
	}
}

// TestReadyOrder checks the lanes against a sort by (priority desc, place)
// for random pushes of fresh and returning entries.
// TestStateReturnsToEmpty checks white-box that acked, dead-lettered,
// dropped and redriven messages leave nothing behind.

// ParseReason reads back every Reason's String and nothing else.
func TestParseReason(t *testing.T) {
	for r := ReasonMaxAttempts; r <= ReasonCancelled; r++ {
		if got, ok := ParseReason(r.String()); !ok || got != r {
			t.Errorf("ParseReason(%q) = %v, %v; want %v, true", r.String(), got, ok, r)
		}
	}
	for _, s := range []string{"", "Reason(0)", "Reason(9)", "MAX-ATTEMPTS", "expired "} {
		if got, ok := ParseReason(s); ok {
			t.Errorf("ParseReason(%q) = %v, true; want false", s, got)
		}
	}
}

// Stats.String names every count, and the dead letters by reason only
// when there are some.
func TestStatsString(t *testing.T) {
	s := Stats{Visible: 3, InFlight: 1, Published: 9, Delivered: 7, Acked: 5, Redelivered: 1, DeadLettered: 2,
		DeadLetteredBy: DeadLetterCounts{MaxAttempts: 1, Rejected: 1, Cancelled: 1}, OldestVisibleAge: 2 * time.Second}
	want := "visible=3 delayed=0 in-flight=1 held-back=0 published=9 delivered=7 acked=5 redelivered=1 dead-lettered=2 (max-attempts=1 rejected=1 cancelled=1) dropped=0 redriven=0 publishes-refused=0 oldest-visible=2s"
	if got := s.String(); got != want {
		t.Errorf("String() =\n %s\nwant\n %s", got, want)
	}
	if got, want := (Stats{}).String(), "visible=0 delayed=0 in-flight=0 held-back=0 published=0 delivered=0 acked=0 redelivered=0 dead-lettered=0 dropped=0 redriven=0 publishes-refused=0 oldest-visible=0s"; got != want {
		t.Errorf("zero String() = %s, want %s", got, want)
	}
}

// cancelled is a cause whose Reject records ReasonCancelled.
type cancelled struct{ reason Reason }

func (c cancelled) Error() string            { return "cancelled" }
func (c cancelled) DeadLetterReason() Reason { return c.reason }

// RejectReason is ReasonCancelled for a cause, wrapped or not, whose chain
// asks for it, and ReasonRejected for every other (nil, a plain error, one
// asking for another reason: a Reject records no other).
func TestRejectReason(t *testing.T) {
	for _, c := range []struct {
		cause error
		want  Reason
	}{
		{nil, ReasonRejected},
		{errors.New("malformed"), ReasonRejected},
		{cancelled{ReasonCancelled}, ReasonCancelled},
		{fmt.Errorf("by on-call: %w", cancelled{ReasonCancelled}), ReasonCancelled},
		{errors.Join(errors.New("x"), cancelled{ReasonCancelled}), ReasonCancelled},
		{cancelled{ReasonOverflow}, ReasonRejected},
	} {
		if got := RejectReason(c.cause); got != c.want {
			t.Errorf("RejectReason(%v) = %v, want %v", c.cause, got, c.want)
		}
	}
}

// DeadLetterCounts.All yields every reason in order with its count.
func TestDeadLetterCountsAll(t *testing.T) {
	var got []string
	for r, n := range (DeadLetterCounts{MaxAttempts: 1, Overflow: 2, Expired: 3, Rejected: 4, Cancelled: 5}).All() {
		got = append(got, fmt.Sprint(r, "=", n))
	}
	want := []string{"max-attempts=1", "overflow=2", "expired=3", "rejected=4", "cancelled=5"}
	if !slices.Equal(got, want) {
		t.Errorf("All() = %v, want %v", got, want)
	}
}
