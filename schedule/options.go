package schedule

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Option configures a Scheduler (New).
type Option struct{ apply func(*config) }

type config struct {
	clk   clock.Clock
	store Store
	retry queue.RetryPolicy
	err   error
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithClock sets the clock the scheduler reads and waits on (default the
// real one). With a clock.Mock, a test moves time and waits with
// AwaitQuiet; no slot depends on when a timer's function runs.
func WithClock(c clock.Clock) Option {
	return Option{func(cfg *config) {
		if c == nil {
			cfg.fail(backend.Invalid("WithClock: nil clock"))
		}
		cfg.clk = c
	}}
}

// WithStore keeps each schedule's last handled slot in st, so that a
// scheduler started again (after a crash, a deploy, on another machine
// reading the same store) carries on after it: the slots it missed meanwhile
// are handled by the schedule's missed-slot policy, and the slot it was in
// is fired again with the same dedup ID. Without a store a schedule starts
// at the time it is added: slots before are not fired.
func WithStore(st Store) Option {
	return Option{func(cfg *config) {
		if st == nil {
			cfg.fail(backend.Invalid("WithStore: nil store"))
		}
		cfg.store = st
	}}
}

// WithRetry sets the backoff after a job returns an error: the slot is
// tried again after p.Delay(failures), on the scheduler's clock, until it
// succeeds or a later slot passes: then the slots from the failed one on
// are missed slots, and the missed-slot policy decides which fire
// (MissedLatest: the latest; the backoff starts again for it). The
// zero policy (the default) waits 1s, doubling to 1m. A policy with
// NoBackoff is refused: it would retry a failing job in a busy loop.
func WithRetry(p queue.RetryPolicy) Option {
	return Option{func(cfg *config) {
		if err := p.Validate(); err != nil {
			cfg.fail(err)
		} else if p.NoBackoff {
			cfg.fail(backend.Invalid("WithRetry: NoBackoff would retry a failing job in a busy loop"))
		}
		cfg.retry = p
	}}
}

// Missed is what a schedule does with slots that passed without firing:
// while no Run ran for the schedule (the process down, with a Store; Run
// stopped), or while its job failed (a later slot passed before a retry of
// the failed one succeeded). Slots that pass while Run runs and the job
// succeeds (a clock that jumps, a job that ran long) are not missed: each
// fires, up to the catch-up limit (WithCatchUpLimit), whatever the policy.
type Missed uint8

const (
	// MissedLatest fires the latest of the passed slots, once, and skips
	// the rest. It is the default: a nightly job that missed three nights
	// (down, or failing) runs once.
	MissedLatest Missed = iota
	// MissedSkip fires none of them: only a slot found due within its
	// grace (WithGrace) fires, late by at most that.
	MissedSkip
	// MissedEach fires each of them, oldest first, up to a limit
	// (WithCatchUpLimit); older ones are skipped.
	MissedEach
)

// String returns the policy's name.
func (m Missed) String() string {
	switch m {
	case MissedLatest:
		return "latest"
	case MissedSkip:
		return "skip"
	case MissedEach:
		return "each"
	}
	return "Missed(invalid)"
}

// AddOption configures one schedule (Scheduler.Add).
type AddOption struct{ apply func(*entryConfig) }

type entryConfig struct {
	missed Missed
	limit  int
	grace  time.Duration
	jitter time.Duration
	busy   func(context.Context) (bool, error)
	paused bool
	err    error
}

func (c *entryConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// Defaults of the AddOptions.
const (
	DefaultCatchUpLimit = 100
	DefaultGrace        = time.Minute
)

// WithMissed sets the schedule's missed-slot policy (default
// MissedLatest).
func WithMissed(m Missed) AddOption {
	return AddOption{func(c *entryConfig) {
		if m > MissedEach {
			c.fail(backend.Invalid("WithMissed: unknown policy %d", m))
		}
		c.missed = m
	}}
}

// WithCatchUpLimit bounds how many passed slots fire at once (default
// DefaultCatchUpLimit), n >= 1: of the slots missed (while no Run ran, or
// while the job failed), those MissedEach fires; of the slots that passed while Run ran (a clock
// that jumped), all, whatever the policy. The older ones are skipped and
// counted in Status.SkippedMissed. A test that moves a mock clock past
// more slots than this in one move, while Run runs, may see fewer fires
// than slots: the mock moves through each timer, so how many are pending
// at one reading depends on when Run's goroutine runs.
func WithCatchUpLimit(n int) AddOption {
	return AddOption{func(c *entryConfig) {
		if n < 1 {
			c.fail(backend.Invalid("WithCatchUpLimit: %d, must be >= 1", n))
		}
		c.limit = n
	}}
}

// WithGrace sets how late a slot may be found and still count as on
// time (default DefaultGrace), which is what MissedSkip fires; d >= 0.
func WithGrace(d time.Duration) AddOption {
	return AddOption{func(c *entryConfig) {
		if d < 0 {
			c.fail(backend.Invalid("WithGrace: %v, must be >= 0", d))
		}
		c.grace = d
	}}
}

// WithJitter delays each slot's fire by a fraction of max that the
// schedule's name and the slot decide, the same in every process, so
// that schedules sharing a slot do not all fire at its instant. The slot,
// and so the dedup ID, stays the same. For Every, max must be less than
// the interval; fires keep the order of their slots. max >= 0.
func WithJitter(max time.Duration) AddOption {
	return AddOption{func(c *entryConfig) {
		if max < 0 {
			c.fail(backend.Invalid("WithJitter: %v, must be >= 0", max))
		}
		c.jitter = max
	}}
}

// WithSkipIfBusy skips a slot, rather than fire it, while busy reports
// true: the overlap policy for a job that must not run twice at once.
// busy is asked at each slot's fire (not for Trigger), without the
// scheduler's lock; an error counts as the job's failure and the slot is
// retried. Unsettled makes a busy check from a subscription. Without this
// option every slot fires, whatever the previous one's message is doing.
func WithSkipIfBusy(busy func(ctx context.Context) (bool, error)) AddOption {
	return AddOption{func(c *entryConfig) {
		if busy == nil {
			c.fail(backend.Invalid("WithSkipIfBusy: nil func"))
		}
		c.busy = busy
	}}
}

// WithPaused adds the schedule paused: it fires nothing until Resume.
func WithPaused() AddOption {
	return AddOption{func(c *entryConfig) { c.paused = true }}
}

// Unsettled returns a busy check for WithSkipIfBusy: busy while sub holds
// a message in any state (visible, delayed, held back, rate-limited or in
// flight), so that a slot is skipped while the previous fire's message is
// still unsettled on the subscription its workers pull from. A
// *broker.Subscription is such a sub.
func Unsettled(sub interface{ Stats() queue.Stats }) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		st := sub.Stats()
		return st.Visible+st.Delayed+st.InFlight+st.HeldBack+st.Limited > 0, nil
	}
}
