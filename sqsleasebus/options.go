package sqsleasebus

import (
	"errors"
	"slices"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// SQS's limits that the options and calls are checked against.
const (
	maxVisibility = 12 * time.Hour   // a message's visibility, from its receive
	maxWait       = 20 * time.Second // a long poll
	maxBatch      = 10               // messages per receive, entries per batch call
	maxDelay      = 15 * time.Minute // a message's delay
)

// Option configures Subscribe (and, of them, WithClock configures
// NewPublisher).
type Option func(*config)

type config struct {
	clk         clock.Clock
	vis         time.Duration // 0: the queue's VisibilityTimeout
	wait        time.Duration
	maxAttempts int // 0: the queue's maxReceiveCount, or unlimited
	retry       queue.RetryPolicy
	refresh     time.Duration
	settle      time.Duration
	names       []string // the options given, by name
	err         error
}

func newConfig(opts []Option) (config, error) {
	c := config{clk: clock.New(), wait: maxWait, refresh: time.Minute, settle: 10 * time.Second}
	for _, o := range opts {
		if o == nil {
			c.fail(backend.Invalid("a nil Option"))
			continue
		}
		o(&c)
	}
	return c, c.err
}

// only refuses an option given but not in allowed: one that means nothing
// to what is being configured (what names it).
func (c *config) only(what string, allowed ...string) error {
	for _, n := range c.names {
		if !slices.Contains(allowed, n) {
			return backend.Invalid("%s: %s configures a Subscription, not a %s", what, n, what)
		}
	}
	return nil
}

func (c *config) fail(err error) { c.err = errors.Join(c.err, err) }

// WithClock sets the clock the subscription reads: the deadlines it gives
// deliveries, when a last attempt's lease has expired, the refresh of the
// queue's attributes. A test passes the mock clock of the server it talks
// to (sqstest.Server.Clock), and then a Poll's deadline is exactly the
// server's. nil is refused.
func WithClock(c clock.Clock) Option {
	return func(cfg *config) {
		cfg.names = append(cfg.names, "WithClock")
		if c == nil {
			cfg.fail(backend.Invalid("WithClock(nil)"))
			return
		}
		cfg.clk = c
	}
}

// WithVisibilityTimeout sets the lease each receive asks for, in place of
// the queue's VisibilityTimeout attribute. SQS counts visibility in whole
// seconds: d is rounded up to one. It must be in (0, 12h].
func WithVisibilityTimeout(d time.Duration) Option {
	return func(cfg *config) {
		cfg.names = append(cfg.names, "WithVisibilityTimeout")
		if d <= 0 || d > maxVisibility {
			cfg.fail(backend.Invalid("WithVisibilityTimeout(%v): must be in (0, 12h]", d))
			return
		}
		cfg.vis = seconds(d)
	}
}

// WithWaitTime sets how long one ReceiveMessage waits for a message (its
// WaitTimeSeconds; default 20s, SQS's longest). A Poll that finds nothing
// asks again, so it blocks until a message comes or its context ends;
// a shorter wait only means more empty receives. It must be in [1s, 20s]
// (rounded up to whole seconds).
func WithWaitTime(d time.Duration) Option {
	return func(cfg *config) {
		cfg.names = append(cfg.names, "WithWaitTime")
		if d < time.Second || d > maxWait {
			cfg.fail(backend.Invalid("WithWaitTime(%v): must be in [1s, 20s]", d))
			return
		}
		cfg.wait = seconds(d)
	}
}

// WithMaxAttempts states the attempts the subscription expects a message
// to get: Subscribe refuses a queue whose RedrivePolicy's maxReceiveCount
// differs, or that has no RedrivePolicy (ErrMisconfigured). Without it the
// queue's maxReceiveCount is the limit (none without a RedrivePolicy). The
// limit lives on the queue, not the consumer: this is a check, not a
// setting. n must be >= 1.
func WithMaxAttempts(n int) Option {
	return func(cfg *config) {
		cfg.names = append(cfg.names, "WithMaxAttempts")
		if n < 1 {
			cfg.fail(backend.Invalid("WithMaxAttempts(%d): must be >= 1", n))
			return
		}
		cfg.maxAttempts = n
	}
}

// WithRetry sets the backoff of Fail: the k-th attempt's failure makes the
// message visible again after p.Delay(k), rounded up to whole seconds and
// capped at what is left of SQS's 12 hours since the receive. The default
// is queue.RetryPolicy's zero value (1s, doubling, capped at 1m).
func WithRetry(p queue.RetryPolicy) Option {
	return func(cfg *config) {
		cfg.names = append(cfg.names, "WithRetry")
		if err := p.Validate(); err != nil {
			cfg.fail(err)
			return
		}
		cfg.retry = p
	}
}

// WithAttributeRefresh sets how often the subscription reads the queue's
// attributes again (its RedrivePolicy, which Delivery.MaxAttempts
// reports, and its dead-letter queue), on the next Poll after d has
// passed; default one minute. It must be > 0.
func WithAttributeRefresh(d time.Duration) Option {
	return func(cfg *config) {
		cfg.names = append(cfg.names, "WithAttributeRefresh")
		if d <= 0 {
			cfg.fail(backend.Invalid("WithAttributeRefresh(%v): must be > 0", d))
			return
		}
		cfg.refresh = d
	}
}

// WithSettleTimeout bounds each round trip of a settle (Ack, Nack, Fail,
// Extend, Release, Reject) and of a dead-letter move (default 10s). The
// client's retryer retries within it. It must be > 0.
func WithSettleTimeout(d time.Duration) Option {
	return func(cfg *config) {
		cfg.names = append(cfg.names, "WithSettleTimeout")
		if d <= 0 {
			cfg.fail(backend.Invalid("WithSettleTimeout(%v): must be > 0", d))
			return
		}
		cfg.settle = d
	}
}

// seconds rounds d up to whole seconds: SQS's unit of visibility, wait and
// delay.
func seconds(d time.Duration) time.Duration {
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return d
}

// secs returns d (whole seconds) as SQS's int32 seconds.
func secs(d time.Duration) int32 { return int32(seconds(d) / time.Second) }
