package queue_test

import (
	"errors"
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
