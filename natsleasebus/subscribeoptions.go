package natsleasebus

import (
	"maps"
	"strconv"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Defaults of the subscribe options that the in-memory broker does not
// share (its VisibilityTimeout and MaxAttempts defaults, queue's, are
// these too).
const (
	defaultMaxInFlight   = 1000
	defaultPollSlice     = 200 * time.Millisecond
	defaultSettleTimeout = 5 * time.Second
)

// errExpiredText is what a dead letter records when its last lease
// expired (as in the in-memory broker).
const errExpiredText = backend.LeaseExpired

// SubscribeOption configures Subscribe.
type SubscribeOption struct{ apply func(*subConfig) }

type subConfig struct {
	vis           time.Duration
	maxAttempts   int
	retry         queue.RetryPolicy
	maxInFlight   int
	pollSlice     time.Duration
	settleTimeout time.Duration
	codec         any
	filter        any // a func(queue.Message[T]) bool
	// set holds the consumer settings the options name explicitly:
	// compared with an existing consumer's, and changed only with update.
	set    settings[js.ConsumerConfig]
	update bool
	err    error
}

func (c *subConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

func newSubConfig(opts []SubscribeOption) (subConfig, error) {
	c := subConfig{
		vis: queue.DefaultVisibilityTimeout, maxAttempts: queue.DefaultMaxAttempts, maxInFlight: defaultMaxInFlight,
		pollSlice: defaultPollSlice, settleTimeout: defaultSettleTimeout,
	}
	for _, o := range opts {
		if o.apply == nil {
			c.fail(errZeroOption)
			continue
		}
		o.apply(&c)
	}
	return c, c.err
}

// WithVisibilityTimeout sets the lease each delivery gets: the consumer's
// AckWait (default for a subscription Subscribe creates: 30s; an existing
// one keeps its own unless this option is given).
func WithVisibilityTimeout(d time.Duration) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithVisibilityTimeout: %v, must be > 0", d))
		}
		c.vis = d
		c.set.add(field("AckWait", "WithVisibilityTimeout", func(c *js.ConsumerConfig) *time.Duration { return &c.AckWait }))
	}}
}

// WithMaxAttempts sets how many deliveries a message gets before it is
// dead-lettered (default for a subscription Subscribe creates: 5;
// queue.UnlimitedAttempts for no limit; an existing one keeps its own
// unless this option is given). The limit is kept in the consumer's
// metadata (key "leasebus.max-attempts") and enforced by the handles, not by the
// server's MaxDeliver (which stays unlimited): the delivery after the last
// attempt is dead-lettered by whichever handle receives it, so a message
// whose last lease expires is dead-lettered even if no handle was
// connected at the time.
func WithMaxAttempts(n int) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if n < 1 && n != queue.UnlimitedAttempts {
			c.fail(backend.Invalid("WithMaxAttempts: %d, must be >= 1 or queue.UnlimitedAttempts", n))
		}
		c.maxAttempts = n
		c.set.add(maxAttemptsSetting)
	}}
}

// metaMaxAttempts is the consumer metadata key that holds a subscription's
// maximum attempts ("5"; "-1" for no limit). A consumer without it has no
// limit.
const metaMaxAttempts = "leasebus.max-attempts"

// maxAttemptsSetting compares the limit in the consumer's metadata.
var maxAttemptsSetting = setting[js.ConsumerConfig]{
	name: "Metadata[" + metaMaxAttempts + "]", option: "WithMaxAttempts",
	equal: func(h, w *js.ConsumerConfig) bool { return attemptsOf(h) == attemptsOf(w) },
	show: func(c *js.ConsumerConfig) string {
		if v, ok := c.Metadata[metaMaxAttempts]; ok {
			return v
		}
		return "absent"
	},
	copy: func(d, s *js.ConsumerConfig) {
		m := maps.Clone(d.Metadata)
		if m == nil {
			m = map[string]string{}
		}
		m[metaMaxAttempts] = s.Metadata[metaMaxAttempts]
		d.Metadata = m
	},
}

// attemptsOf returns a consumer's maximum attempts: queue.UnlimitedAttempts
// when its metadata has none (or one that does not parse).
func attemptsOf(c *js.ConsumerConfig) int {
	n, err := strconv.Atoi(c.Metadata[metaMaxAttempts])
	if err != nil || n < 1 {
		return queue.UnlimitedAttempts
	}
	return n
}

// WithRetry sets the backoff of Fail (default: the zero queue.RetryPolicy,
// 1s doubling to 1m).
func WithRetry(p queue.RetryPolicy) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if err := p.Validate(); err != nil {
			c.fail(err)
		}
		c.retry = p
	}}
}

// WithMaxInFlight caps the leases held at once across every handle of the
// subscription: the consumer's MaxAckPending (default for a subscription
// Subscribe creates: 1000; an existing one keeps its own unless this
// option is given).
func WithMaxInFlight(n int) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if n < 1 {
			c.fail(backend.Invalid("WithMaxInFlight: %d, must be >= 1", n))
		}
		c.maxInFlight = n
		c.set.add(field("MaxAckPending", "WithMaxInFlight", func(c *js.ConsumerConfig) *int { return &c.MaxAckPending }))
	}}
}

// WithUpdateConsumer lets Subscribe change an existing subscription whose
// consumer settings differ from the explicit options (visibility timeout,
// maximum attempts, in-flight cap), instead of refusing with a
// *ConfigMismatchError. The change applies to every handle of the
// subscription, in every process: handles opened before keep their own
// idea of the visibility timeout and attempts until they are reopened.
func WithUpdateConsumer() SubscribeOption {
	return SubscribeOption{func(c *subConfig) { c.update = true }}
}

// WithPollSlice sets how long one pull request waits on the server before
// Poll checks its context and Close again (default 200ms): the most a
// cancelled Poll takes to return.
func WithPollSlice(d time.Duration) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithPollSlice: %v, must be > 0", d))
		}
		c.pollSlice = d
	}}
}

// WithSettleTimeout bounds the round trips of Ack and of dead-lettering
// (default 5s): each try ends after d, or up to 10ms later (the tries that
// begin within 10ms of each other share one timer), and, while the lease
// is live, not past its deadline.
func WithSettleTimeout(d time.Duration) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithSettleTimeout: %v, must be > 0", d))
		}
		c.settleTimeout = d
	}}
}

// WithFilter makes the handle skip the messages for which f returns false:
// they are acked on delivery, without being handed out (the broker's
// WithFilter, emulated at delivery rather than at publish, so they still
// count in Stats.Delivered). The filter is the handle's, not the
// server's: give every handle of the subscription the same one. f runs in
// Poll.
func WithFilter[T any](f func(queue.Message[T]) bool) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if f == nil {
			c.fail(backend.Invalid("WithFilter: nil func"))
		}
		c.filter = f
	}}
}

// WithCodec decodes payloads with c instead of the default (JSON; []byte
// and string payloads pass through as the data).
func WithCodec[T any](c queue.Codec[T]) SubscribeOption {
	return SubscribeOption{func(s *subConfig) { s.codec = c }}
}
