package queue

import (
	"fmt"
	"math"
	"time"
)

// Rate is the shape of a token bucket: it holds at most N tokens and gains
// them back continuously, N every Per, one every Per/N (rounded up to the
// nanosecond, so that it never runs faster than N per Per). A delivery (or
// a pool's handler start) takes one token; a full bucket lets N go at
// once. The zero Rate is no limit.
//
// A bucket's whole state is one time: when it is full again (the zero time,
// or any time not after now, means full). Tokens, Take and NextToken
// compute with it, so a bucket costs one time.Time and no goroutine, and a
// full one can be forgotten.
type Rate struct {
	N   int           // capacity, and tokens gained per Per; >= 1
	Per time.Duration // > 0
}

// IsZero reports whether r is the zero Rate: no limit.
func (r Rate) IsZero() bool { return r == Rate{} }

// Validate returns nil for the zero Rate and for one with N >= 1 and Per >=
// N nanoseconds (a token at most every nanosecond) whose N tokens, each
// Per/N rounded up, take no longer than a time.Duration holds (Per of
// about 292 years at most; Rate{2, math.MaxInt64} is one nanosecond over),
// or else an error matching ErrInvalidArgument that names the field out of
// range. A valid Rate's arithmetic never overflows, however far a
// bucket's time is from now.
func (r Rate) Validate() error {
	switch {
	case r.IsZero():
		return nil
	case r.N < 1:
		return invalid("Rate.N = %d, must be >= 1", r.N)
	case r.Per <= 0:
		return invalid("Rate.Per = %v, must be > 0", r.Per)
	case r.Per < time.Duration(r.N):
		return invalid("Rate %d per %v: more than a token a nanosecond", r.N, r.Per)
	case r.interval() > math.MaxInt64/time.Duration(r.N):
		return invalid("Rate %d per %v: %d tokens of %v each take longer than a time.Duration holds", r.N, r.Per, r.N, r.interval())
	}
	return nil
}

// String returns "N/Per", as "10/1s", or "none" for the zero Rate.
func (r Rate) String() string {
	if r.IsZero() {
		return "none"
	}
	return fmt.Sprintf("%d/%v", r.N, r.Per)
}

// interval returns how long the bucket takes to gain one token: Per/N,
// rounded up to the nanosecond.
func (r Rate) interval() time.Duration {
	return ceilDiv(r.Per, time.Duration(r.N))
}

// ceilDiv is a/b rounded up, for a >= 0 and b > 0, without the overflow of
// (a + b - 1) / b.
func ceilDiv(a, b time.Duration) time.Duration {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// shift returns t moved by k times d (k >= 0; d of either sign), however
// far that is: k*d may be more than a time.Duration holds, which
// time.Time does not mind.
func shift(t time.Time, d time.Duration, k int) time.Time {
	mag := d
	if mag < 0 {
		mag = -mag // d is never math.MinInt64 here: an interval is > 0
	}
	for k > 0 {
		m := k
		if mag > 0 && time.Duration(m) > math.MaxInt64/mag {
			m = int(math.MaxInt64 / mag)
		}
		t = t.Add(d * time.Duration(m))
		k -= m
	}
	return t
}

// Tokens returns the tokens a bucket of r that is full again at full holds
// at now: N once now has reached full, one fewer for each token interval
// (Per/N, or part of one) still to go.
func (r Rate) Tokens(full, now time.Time) int {
	if !now.Before(full) {
		return r.N
	}
	missing := ceilDiv(full.Sub(now), r.interval()) // Sub saturates: still more than N
	if missing >= time.Duration(r.N) {
		return 0
	}
	return r.N - int(missing)
}

// Take returns when a bucket of r that is full again at full is full again
// after k tokens are taken from it at now. k must not be more than
// Tokens(full, now).
func (r Rate) Take(full, now time.Time, k int) time.Time {
	if full.Before(now) {
		full = now
	}
	return shift(full, r.interval(), k)
}

// NextToken returns when a bucket of r that is full again at full holds a
// token: now if it holds one at now.
func (r Rate) NextToken(full, now time.Time) time.Time {
	at := shift(full, -r.interval(), r.N-1)
	if at.Before(now) {
		return now
	}
	return at
}
