package queue

import (
	"math"
	"math/rand/v2"
	"time"
)

// Defaults of RetryPolicy's zero fields.
const (
	defaultRetryInitial    = time.Second
	defaultRetryMax        = time.Minute
	defaultRetryMultiplier = 2.0
)

// RetryPolicy is the backoff after a reported failure (Fail, or a handler
// error in the poller): attempt k waits Initial × Multiplier^(k-1), capped at
// Max, less a random fraction of up to Jitter. An expired lease waits for
// nothing (the visibility timeout was the wait) and Nack names its own delay.
//
// The zero RetryPolicy means exponential backoff from 1s, doubling, capped at
// 1m, without jitter. Set NoBackoff to retry at once.
type RetryPolicy struct {
	Initial    time.Duration // first delay; 0 means 1s
	Max        time.Duration // cap; 0 means 1m
	Multiplier float64       // growth per attempt, >= 1; 0 means 2
	// Jitter in [0, 1] takes a random fraction of up to Jitter off each
	// delay ("equal jitter" at 0.5, "full jitter" at 1); 0 means none.
	Jitter float64
	// Rand returns a number in [0, 1) for the jitter; nil means
	// math/rand/v2.Float64. Inject a fixed source to make jitter
	// deterministic in tests. It is called under the queue's lock and must
	// not call back into the queue.
	Rand func() float64
	// NoBackoff makes every reported failure visible again at once.
	NoBackoff bool
}

// Validate returns nil if every field is in range, or else an error
// matching ErrInvalidArgument that names the first one out of range. Every
// call that takes a RetryPolicy validates it; a backend validates with it
// too.
func (p RetryPolicy) Validate() error {
	switch {
	case p.Initial < 0:
		return invalid("RetryPolicy.Initial = %v, must be >= 0", p.Initial)
	case p.Max < 0:
		return invalid("RetryPolicy.Max = %v, must be >= 0", p.Max)
	case p.Multiplier != 0 && (p.Multiplier < 1 || math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0)):
		return invalid("RetryPolicy.Multiplier = %v, must be >= 1 and finite (or 0 for the default)", p.Multiplier)
	case p.Jitter < 0 || p.Jitter > 1 || math.IsNaN(p.Jitter):
		return invalid("RetryPolicy.Jitter = %v, must be in [0, 1]", p.Jitter)
	case p.Initial > 0 && p.Max > 0 && p.Initial > p.Max:
		return invalid("RetryPolicy.Initial = %v exceeds Max = %v", p.Initial, p.Max)
	}
	return nil
}

// Delay returns how long a message waits after its attempt-th delivery
// failed (attempt counts from 1; values below 1 are treated as 1).
func (p RetryPolicy) Delay(attempt int) time.Duration {
	if p.NoBackoff {
		return 0
	}
	initial, maxd, mult := p.Initial, p.Max, p.Multiplier
	if initial == 0 {
		initial = defaultRetryInitial
	}
	if maxd == 0 {
		maxd = max(defaultRetryMax, initial)
	}
	if mult == 0 {
		mult = defaultRetryMultiplier
	}
	attempt = max(attempt, 1)
	// In float64, then back: a product that reaches Max (or overflows, or
	// rounds up to 2^63 for Max near math.MaxInt64) is Max.
	delay := maxd
	if d := float64(initial) * math.Pow(mult, float64(attempt-1)); d < float64(maxd) {
		delay = time.Duration(d)
	}
	if p.Jitter > 0 {
		r := rand.Float64
		if p.Rand != nil {
			r = p.Rand
		}
		f := r()
		if !(f > 0) { // also NaN
			f = 0
		}
		if cut := float64(delay) * p.Jitter * min(f, 1); cut < float64(delay) {
			delay -= time.Duration(cut)
		} else {
			delay = 0
		}
	}
	return max(delay, 0)
}
