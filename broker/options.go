package broker

import (
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/queue"
)

// DefaultDeadLetterLimit is how many dead letters a broker keeps unless
// WithDeadLetterLimit says otherwise.
const DefaultDeadLetterLimit = 10_000

// Option configures a Broker in New. Every SubscribeOption is an Option
// too: given to New, it sets the default for every subscription of the
// broker, which a subscription's own options override.
type Option interface {
	applyBroker(*config)
}

// SubscribeOption configures one subscription in Subscribe, or, given to
// New, every subscription's default. Option types are not generic: a
// caller never writes a type argument.
type SubscribeOption interface {
	Option
	applySub(*subConfig)
}

type config struct {
	clock           clock.Clock
	deadLetterLimit int
	sub             subConfig // defaults for every subscription; sub.err holds the first invalid option
}

type subConfig struct {
	queue  queue.Config
	filter any // func(queue.Message[T]) bool, checked against T in Subscribe
	err    error
}

type brokerOption func(*config)

func (o brokerOption) applyBroker(c *config) { o(c) }

type subOption func(*subConfig)

func (o subOption) applyBroker(c *config) { o(&c.sub) }
func (o subOption) applySub(c *subConfig) { o(c) }

func (c *subConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithClock sets the clock behind every time read and timer of the broker
// and its subscriptions: clock.NewMock() in tests, the real clock
// (clock.New()) by default. nil is invalid.
func WithClock(c clock.Clock) Option {
	return brokerOption(func(cfg *config) {
		if c == nil {
			cfg.sub.fail(queue.Invalid("WithClock: nil clock"))
			return
		}
		cfg.clock = c
	})
}

// WithDeadLetterLimit bounds the broker's dead-letter store (default
// DefaultDeadLetterLimit, 10,000). When it is full the oldest dead letter
// is dropped and counted (see DeadLettersDropped). n < 1 is invalid.
func WithDeadLetterLimit(n int) Option {
	return brokerOption(func(cfg *config) {
		if n < 1 {
			cfg.sub.fail(queue.Invalid("WithDeadLetterLimit: n = %d, must be >= 1", n))
			return
		}
		cfg.deadLetterLimit = n
	})
}

// WithVisibilityTimeout sets the lease each delivery gets (default 30s, as
// SQS). d must be > 0.
func WithVisibilityTimeout(d time.Duration) SubscribeOption {
	return subOption(func(c *subConfig) {
		if d <= 0 {
			c.fail(queue.Invalid("WithVisibilityTimeout: %v, must be > 0", d))
			return
		}
		c.queue.VisibilityTimeout = d
	})
}

// WithMaxAttempts sets the most deliveries a message gets before it is
// dead-lettered (default 5). n must be >= 1, or queue.UnlimitedAttempts.
func WithMaxAttempts(n int) SubscribeOption {
	return subOption(func(c *subConfig) {
		if n < 1 && n != queue.UnlimitedAttempts {
			c.fail(queue.Invalid("WithMaxAttempts: %d, must be >= 1 or queue.UnlimitedAttempts", n))
			return
		}
		c.queue.MaxAttempts = n
	})
}

// WithRetry sets the backoff after a reported failure (Fail, or a handler
// error in the poller). The default is exponential from 1s, doubling,
// capped at 1m, without jitter (the zero queue.RetryPolicy).
func WithRetry(p queue.RetryPolicy) SubscribeOption {
	return subOption(func(c *subConfig) {
		if err := p.Validate(); err != nil {
			c.fail(err)
			return
		}
		c.queue.Retry = p
	})
}

// WithMaxQueue bounds the messages a subscription holds: visible, delayed
// and in flight (default 100,000). n must be >= 1.
func WithMaxQueue(n int) SubscribeOption {
	return subOption(func(c *subConfig) {
		if n < 1 {
			c.fail(queue.Invalid("WithMaxQueue: %d, must be >= 1", n))
			return
		}
		c.queue.MaxQueue = n
	})
}

// WithOverflow sets what a full subscription does with a new message
// (default queue.OverflowDeadLetter: dead-letter it, reason Overflow).
func WithOverflow(p queue.OverflowPolicy) SubscribeOption {
	return subOption(func(c *subConfig) {
		if p > queue.OverflowDropOldest {
			c.fail(queue.Invalid("WithOverflow: %v, not a policy", p))
			return
		}
		c.queue.Overflow = p
	})
}

// WithMaxInFlight caps the leases out at once on a subscription (default:
// no cap beyond the queue's bound). n must be >= 1.
func WithMaxInFlight(n int) SubscribeOption {
	return subOption(func(c *subConfig) {
		if n < 1 {
			c.fail(queue.Invalid("WithMaxInFlight: %d, must be >= 1", n))
			return
		}
		c.queue.MaxInFlight = n
	})
}

// WithFilter makes a subscription accept only the messages for which f
// returns true; the others are not offered to it and leave no trace in its
// Stats. f runs in the publisher's goroutine, with no broker or queue lock
// held, once per publish; it must be fast and must not block. T is
// inferred from f and must be the broker's payload type: Subscribe
// reports a mismatch as an invalid argument. A nil f is invalid.
func WithFilter[T any](f func(queue.Message[T]) bool) SubscribeOption {
	return subOption(func(c *subConfig) {
		if f == nil {
			c.fail(queue.Invalid("WithFilter: nil func"))
			return
		}
		c.filter = f
	})
}

// PublishOption configures one Publish. It is a small value, not a
// closure, so options cost Publish no allocation; make them with the With
// functions (the zero PublishOption is invalid).
type PublishOption struct {
	kind     publishKind
	priority queue.Priority
	delay    time.Duration
	headers  map[string]string
}

type publishKind uint8

const (
	_ publishKind = iota
	optPriority
	optHeaders
	optDelay
)

type publishConfig struct {
	priority queue.Priority
	headers  map[string]string
	delay    time.Duration
}

func (c *publishConfig) apply(o PublishOption) error {
	switch o.kind {
	case optPriority:
		if !o.priority.Valid() {
			return queue.Invalid("WithPriority: %v, must be queue.PriorityLow..queue.PriorityCritical", o.priority)
		}
		c.priority = o.priority
	case optHeaders:
		c.headers = o.headers
	case optDelay:
		if o.delay < 0 {
			return queue.Invalid("WithDelay: %v, must be >= 0", o.delay)
		}
		c.delay = o.delay
	default:
		return queue.Invalid("zero PublishOption: make options with the With functions")
	}
	return nil
}

// WithPriority sets the message's priority (default queue.PriorityNormal).
// Higher priorities are delivered first; within one, publish order.
func WithPriority(p queue.Priority) PublishOption {
	return PublishOption{kind: optPriority, priority: p}
}

// WithHeaders sets the message's headers, copied: later changes to h do
// not show, and consumers can only read them.
func WithHeaders(h map[string]string) PublishOption {
	return PublishOption{kind: optHeaders, headers: h}
}

// WithDelay makes the message visible d after publish (default 0: at
// once). d must be >= 0.
func WithDelay(d time.Duration) PublishOption {
	return PublishOption{kind: optDelay, delay: d}
}
