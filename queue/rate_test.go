package queue_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
)

func TestRateBucket(t *testing.T) {
	r := queue.Rate{N: 10, Per: time.Second}
	t0 := time.Unix(1000, 0)
	var full time.Time // the zero time: full
	if got := r.Tokens(full, t0); got != 10 {
		t.Fatalf("a new bucket holds %d, want 10", got)
	}
	full = r.Take(full, t0, 10)
	for _, c := range []struct {
		after time.Duration
		want  int
	}{{0, 0}, {99 * time.Millisecond, 0}, {100 * time.Millisecond, 1}, {250 * time.Millisecond, 2}, {time.Second, 10}, {time.Hour, 10}} {
		if got := r.Tokens(full, t0.Add(c.after)); got != c.want {
			t.Errorf("%v after emptying: %d tokens, want %d", c.after, got, c.want)
		}
	}
	if got := r.NextToken(full, t0); !got.Equal(t0.Add(100 * time.Millisecond)) {
		t.Errorf("NextToken = +%v, want +100ms", got.Sub(t0))
	}
	if got := r.NextToken(full, t0.Add(time.Second)); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("NextToken of a bucket with tokens = +%v, want now", got.Sub(t0))
	}
	// Taking from a bucket that refilled counts from now, not from the past.
	later := t0.Add(time.Hour)
	full = r.Take(full, later, 1)
	if got := r.Tokens(full, later); got != 9 {
		t.Errorf("after one from a full bucket: %d, want 9", got)
	}
}

// Per/N rounds up: never faster than N per Per.
func TestRateRoundsUp(t *testing.T) {
	r := queue.Rate{N: 3, Per: time.Second}
	t0 := time.Unix(0, 0)
	full := r.Take(time.Time{}, t0, 3)
	if got := r.Tokens(full, t0.Add(time.Second)); got != 2 {
		t.Fatalf("one second after emptying 3/1s: %d tokens, want 2 (a token every 333,333,334ns)", got)
	}
	if got := r.Tokens(full, t0.Add(1000000002)); got != 3 {
		t.Fatalf("%d tokens, want 3", got)
	}
}

func TestRateValidate(t *testing.T) {
	for _, ok := range []queue.Rate{{}, {N: 1, Per: time.Nanosecond}, {N: 5, Per: time.Second}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
	for _, bad := range []queue.Rate{{N: 0, Per: time.Second}, {N: -1, Per: time.Second}, {N: 1}, {N: 1, Per: -time.Second}, {N: 10, Per: 9}} {
		if err := bad.Validate(); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", bad, err)
		}
	}
	if s := (queue.Rate{N: 10, Per: time.Second}).String(); s != "10/1s" {
		t.Errorf("String = %q", s)
	}
	if s := (queue.Rate{}).String(); s != "none" {
		t.Errorf("zero String = %q", s)
	}
}

// The bucket's arithmetic holds past what a time.Duration holds: a
// period near math.MaxInt64 takes its tokens and gives them back no
// sooner than it should.
func TestRateFarPeriods(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, r := range []queue.Rate{{N: 2, Per: math.MaxInt64}, {N: math.MaxInt64 / 2, Per: math.MaxInt64}} {
		if err := r.Validate(); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%v: Validate = %v, want its N tokens too long for a time.Duration", r, err)
		}
	}
	for _, r := range []queue.Rate{
		{N: 1, Per: math.MaxInt64}, {N: 2, Per: math.MaxInt64 - 1}, {N: 3, Per: math.MaxInt64 - 1},
		{N: math.MaxInt64 / 2, Per: math.MaxInt64 - 1}, {N: 1, Per: 150 * 365 * 24 * time.Hour},
	} {
		if err := r.Validate(); err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		full := r.Take(time.Time{}, now, r.N)
		if got := r.Tokens(full, now); got != 0 {
			t.Errorf("%v: %d tokens after taking all, want 0", r, got)
		}
		if got := r.Tokens(full, now.Add(100*365*24*time.Hour)); got != 0 && r.N < 3 {
			t.Errorf("%v: %d tokens a hundred years on, want 0", r, got)
		}
		next := r.NextToken(full, now)
		if !next.After(now) {
			t.Errorf("%v: next token at %v, want after %v", r, next, now)
		}
		if got := r.Tokens(full, next); got != 1 {
			t.Errorf("%v: %d tokens at the next token's time, want 1", r, got)
		}
		if got := r.Tokens(full, full); got != r.N {
			t.Errorf("%v: %d tokens when full again, want %d", r, got, r.N)
		}
	}
}
