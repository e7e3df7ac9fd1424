package natsleasebus

import (
	"fmt"
	"time"

	"github.com/leasebus/leasebus/backend"
)

// The broker's flow control (broker.WithRateLimit, WithKeyRateLimit,
// WithKeyConcurrency, WithFairKeys) is decided where the broker picks the
// messages a Poll leases, for every consumer of a subscription at once. A
// JetStream pull consumer picks on the server, which has no message-rate
// limit for a pull consumer, no per-subject bound on what is in flight
// (MaxAckPending is per consumer) and no fairness between subjects, and a
// handle sees only its own leases, so a limit kept in the client would
// bind one handle, not the subscription. Each is refused by name: Subscribe
// fails with an error matching ErrUnsupported. A pool's own limits work
// over a JetStream subscription as over any source: poller.WithRate for
// the pool's pace, poller.SlowDown for a partner's 429 (it nacks with the
// delay here, spending the attempt: a Subscription is no
// backend.DelayReleaser).

// WithRateLimit is the broker's WithRateLimit, refused (see above):
// Subscribe fails with an error matching ErrUnsupported. Limit the pool
// instead, with poller.WithRate.
func WithRateLimit(n int, per time.Duration) SubscribeOption {
	return refused(fmt.Sprintf("WithRateLimit(%d, %v)", n, per), "a pull consumer has no message-rate limit on the server; limit the pool with poller.WithRate")
}

// WithKeyRateLimit is the broker's WithKeyRateLimit, refused: Subscribe
// fails with an error matching ErrUnsupported (ordering keys are refused
// too: see WithKey).
func WithKeyRateLimit(n int, per time.Duration) SubscribeOption {
	return refused(fmt.Sprintf("WithKeyRateLimit(%d, %v)", n, per), "JetStream has no rate per subject, and publishing with a key is refused (WithKey)")
}

// WithKeyConcurrency is the broker's WithKeyConcurrency: 1, the default
// (and, with keys refused, what every message has), is accepted; any
// other n makes Subscribe fail with an error matching ErrUnsupported, and
// n < 1 with one matching queue.ErrInvalidArgument.
func WithKeyConcurrency(n int) SubscribeOption {
	switch {
	case n < 1:
		return SubscribeOption{func(c *subConfig) {
			c.fail(backend.Invalid("WithKeyConcurrency: %d, must be >= 1", n))
		}}
	case n > 1:
		return refused(fmt.Sprintf("WithKeyConcurrency(%d)", n), "JetStream bounds what is in flight per consumer (MaxAckPending), not per key")
	}
	return SubscribeOption{func(*subConfig) {}}
}

// WithFairKeys is the broker's WithFairKeys, refused: Subscribe fails with
// an error matching ErrUnsupported. A stream delivers a consumer's
// messages in stream order.
func WithFairKeys() SubscribeOption {
	return refused("WithFairKeys()", "a stream delivers a consumer's messages in stream order, with no turns between subjects")
}

// refused is a SubscribeOption that fails Subscribe with ErrUnsupported.
func refused(option, why string) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		c.fail(fmt.Errorf("%s: %w: %s", option, ErrUnsupported, why))
	}}
}
