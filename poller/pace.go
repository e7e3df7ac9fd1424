package poller

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// WithRate limits the pool's handler starts to n per period per: a token
// bucket of capacity n, refilled continuously (one token every per/n,
// rounded up to the nanosecond), on the pool's clock. The pool leases
// only what it may start: it asks the source for no more than it has
// tokens, and while it has none it holds no lease and polls nothing
// (AwaitQuiet counts that wait as at rest until the clock reaches the
// next token). It limits this pool alone, over any source; to limit every
// consumer of a subscription at once, use the subscription's own limit
// (broker.WithRateLimit). Default: none. n must be >= 1 and per > 0, at
// most a token a nanosecond.
//
// On a mock clock the schedule is exact when the test moves the clock by
// at most one token's interval (per/n) in one Add while the pool waits
// for a token, and calls AwaitQuiet after each: a longer Add fires the
// pool's wake-up on its way, and the wait the pool then arms for its next
// token may be armed after the mock's Add has looked for timers and
// before it sets its time, so that it fires only at the next Add (a mock
// of github.com/benbjohnson/clock does so).
func WithRate(n int, per time.Duration) Option {
	return Option{func(c *config) {
		r := queue.Rate{N: n, Per: per}
		if n < 1 || per <= 0 || r.Validate() != nil {
			c.fail(backend.Invalid("WithRate(%d, %v): n must be >= 1 and per > 0, at most a token a nanosecond", n, per))
			return
		}
		c.rate = r
	}}
}

// slowDownError is SlowDown's error.
type slowDownError struct {
	delay time.Duration
	err   error
}

func (e *slowDownError) directive() {}

func (e *slowDownError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("slow down for %v", e.delay)
	}
	return e.err.Error()
}

func (e *slowDownError) Unwrap() error { return e.err }

// SlowDown returns an error with which a handler says that what it calls
// is overloaded (an HTTP 429, a Retry-After): the message goes back
// without spending an attempt, visible again after d, and the pool starts
// no handler until d has passed on its clock (a lease it holds and has
// not started is released, attempt kept; handlers already running go
// on). On a source that is a backend.DelayReleaser (a *broker.Subscription
// is) the poller settles the lease with ReleaseAfter(id, d), and the event
// is OutcomeReleased; on any other it can only Nack(id, d), which spends
// the attempt (OutcomeRetried, or OutcomeDeadLettered on the last one).
// A negative d counts as 0. Its Error is err's (or "slow down for d" for
// a nil err), and it wraps err, so SlowDown(d, err) may itself be wrapped
// with %w.
func SlowDown(d time.Duration, err error) error {
	return &slowDownError{delay: max(d, 0), err: err}
}

// pace is what a run keeps of its pace: WithRate's bucket, read and taken
// by the poll loop alone, and the pause a SlowDown asked for, set by any
// worker.
type pace struct {
	full  time.Time    // when WithRate's bucket is full again (see queue.Rate)
	until atomic.Int64 // the pause ends (Unix nanoseconds); 0: none
}

// slowDown pauses the run until d from now, or later if it already is.
func (r *run[T]) slowDown(d time.Duration) {
	until := unixNano(r.p.cfg.clock.Now().Add(d))
	for {
		cur := r.pace.until.Load()
		if cur >= until || r.pace.until.CompareAndSwap(cur, until) {
			break
		}
	}
	r.change()
}

// paused reports whether a SlowDown's pause is on at the clock's now.
func (r *run[T]) paused() bool {
	at := r.pace.until.Load()
	return at != 0 && unixNano(r.p.cfg.clock.Now()) < at
}

// gate waits until the pool may start a handler (no pause, and a token if
// WithRate is set) and returns how many of the n it has room for it may
// lease now; it reports false if r.ctx ends first.
func (r *run[T]) gate(n int) (int, bool) {
	rate := r.p.cfg.rate
	if rate.IsZero() && r.pace.until.Load() == 0 {
		return n, true // nothing to pace: no clock read
	}
	for {
		now := r.p.cfg.clock.Now()
		var at time.Time // when to look again; zero: go on now
		if until := r.pace.until.Load(); until != 0 && unixNano(now) < until {
			at = time.Unix(0, until)
		}
		k := n
		if !rate.IsZero() {
			k = min(n, rate.Tokens(r.pace.full, now))
			if k == 0 {
				if next := rate.NextToken(r.pace.full, now); next.After(at) {
					at = next
				}
			}
		}
		if at.IsZero() {
			return k, true
		}
		if !r.wait(at.Sub(now)) {
			return 0, false
		}
	}
}

// took takes from WithRate's bucket the k deliveries a Poll leased.
func (r *run[T]) took(k int) {
	if rate := r.p.cfg.rate; !rate.IsZero() && k > 0 {
		r.pace.full = rate.Take(r.pace.full, r.p.cfg.clock.Now(), k)
	}
}

// unixNano is t.UnixNano, saturated to what an int64 holds: a time past
// 2262 (a pause of centuries) reads as the last nanosecond an int64 holds,
// which the clock never reaches, and one before 1678 as the first, instead
// of a number that wrapped round.
func unixNano(t time.Time) int64 {
	const maxSec, maxNsec int64 = math.MaxInt64 / int64(time.Second), math.MaxInt64 % int64(time.Second)
	switch sec, nsec := t.Unix(), int64(t.Nanosecond()); {
	case sec > maxSec || sec == maxSec && nsec > maxNsec:
		return math.MaxInt64
	case sec < -maxSec-1:
		return math.MinInt64
	}
	return t.UnixNano()
}
