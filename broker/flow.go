package broker

import (
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Flow control: limits a subscription enforces where a Poll picks the
// messages it leases, for every consumer of the subscription in the
// process at once. Each is a SubscribeOption (stored with a durable
// subscription like every other), decided on the broker's clock, so a
// test on a mock clock sees the exact schedule. A message a limit holds
// back stays visible: it is not leased, no visibility timeout runs, and
// no attempt is spent; Stats.Limited counts those.
//
// On a mock clock a limit's schedule is exact when the test moves the
// clock by at most the limit's period (per) in one Add while the limit
// holds messages back, and reads the state after each Add (TryPoll, Stats,
// a pool's AwaitQuiet). A longer Add fires the wake-ups due on its way at
// their own times: a consumer woken there takes the tokens of that time,
// and whether it waits again before the Add ends, and so takes more on the
// way than a full bucket holds, is up to the scheduler.

// WithRateLimit limits the subscription's deliveries, first or
// redelivery, to n per period per: a token bucket of capacity n, refilled
// continuously (one token every per/n, rounded up to the nanosecond), on
// the broker's clock. TryPoll returns what the tokens allow now; a Poll
// that finds visible messages and no token waits, parked, until the next
// token is due (on a mock clock, the Add that reaches it). Default: none.
// n must be >= 1 and per > 0, at most a token a nanosecond.
//
// On a durable broker the limit holds across restarts, crashes included:
// Open starts the bucket empty (its own, and each key's for
// WithKeyRateLimit), since it cannot know what was delivered before. The
// cost is the first delivery after a restart, which waits for a token
// (per/n).
func WithRateLimit(n int, per time.Duration) SubscribeOption {
	return rateOption("WithRateLimit", n, per, func(c *subConfig, r queue.Rate) { c.queue.RateLimit = r })
}

// WithKeyRateLimit is WithRateLimit for each ordering key (WithKey) on its
// own: a key whose bucket is empty is passed over, and the messages of
// other keys are delivered. Messages without a key are not limited by it.
// A key's bucket is kept only until it is full again, so memory grows
// with the keys served in the last period, not with every key ever seen.
// Default: none. n must be >= 1 and per > 0, at most a token a nanosecond.
func WithKeyRateLimit(n int, per time.Duration) SubscribeOption {
	return rateOption("WithKeyRateLimit", n, per, func(c *subConfig, r queue.Rate) { c.queue.KeyRateLimit = r })
}

// WithKeyConcurrency lets up to n messages of one ordering key be out at
// once (leased, or waiting out a retry delay), handed out in publish order
// within the key; the others wait behind them (Stats.HeldBack). The
// default, 1, is the ordering-key rule: a key's messages one at a time,
// in order. With n > 1 the order in which a key's messages complete is
// the consumers'. n must be >= 1. A durable subscription declared again
// with a larger n lets more of each key out at once.
func WithKeyConcurrency(n int) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if n < 1 {
			c.fail(backend.Invalid("WithKeyConcurrency: %d, must be >= 1", n))
			return
		}
		c.queue.KeyConcurrency = n
	}}
}

// WithFairKeys makes ordering keys take turns: among visible messages of
// one priority, the next delivery comes from the key served least recently
// (messages without a key count as one key, ""), so that a backlog of one
// key does not delay another key's new message behind it: that message
// waits for at most one turn of each other key. Within a key, messages
// keep publish order; a message that comes back (a retry, an expired
// lease) takes its key's next turn rather than its old place. A key's
// turn is kept only while it has visible messages. Priority still comes
// first. Stats.OldestVisibleAge then reads the age of each priority's
// next in turn, and OverflowDropOldest drops the lowest priority's next in
// turn. Default: off (oldest first). A durable subscription declared again
// with or without it reorders what is visible.
func WithFairKeys() SubscribeOption {
	return SubscribeOption{func(c *subConfig) { c.queue.FairKeys = true }}
}

// rateOption is the option named opt that sets n per per with set, once
// the rate is checked.
func rateOption(opt string, n int, per time.Duration, set func(*subConfig, queue.Rate)) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		r := queue.Rate{N: n, Per: per}
		switch {
		case n < 1 || per <= 0:
			c.fail(backend.Invalid("%s(%d, %v): n must be >= 1 and per > 0", opt, n, per))
		case r.Validate() != nil:
			c.fail(backend.Invalid("%s(%d, %v): more than a token a nanosecond", opt, n, per))
		default:
			set(c, r)
		}
	}}
}
