package pgleasebus

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/jackc/pgx/v5"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// SubscribeOption configures a subscription (Subscribe).
type SubscribeOption struct{ apply func(*subConfig) }

// subConfig is a subscription's settings, and which of them an option
// set.
type subConfig struct {
	vis            time.Duration
	maxAttempts    int
	retry          queue.RetryPolicy
	keyConcurrency int
	ttl            time.Duration
	set            map[string]bool // the options given, by name
	update         bool
	err            error
}

func (c *subConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

func (c *subConfig) mark(opt string) {
	if c.set == nil {
		c.set = map[string]bool{}
	}
	c.set[opt] = true
}

// WithVisibilityTimeout sets the lease a delivery gets (default 30s, as
// SQS); d > 0.
func WithVisibilityTimeout(d time.Duration) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		c.mark("WithVisibilityTimeout")
		if d <= 0 {
			c.fail(backend.Invalid("WithVisibilityTimeout(%v): must be > 0", d))
		}
		c.vis = d
	}}
}

// WithMaxAttempts sets how many deliveries a message gets before it is
// dead-lettered (default queue.DefaultMaxAttempts); n >= 1, or
// queue.UnlimitedAttempts.
func WithMaxAttempts(n int) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		c.mark("WithMaxAttempts")
		if n < 1 && n != queue.UnlimitedAttempts {
			c.fail(backend.Invalid("WithMaxAttempts(%d): must be >= 1, or queue.UnlimitedAttempts", n))
		}
		c.maxAttempts = n
	}}
}

// WithRetry sets the backoff of a failed attempt (Fail): the zero policy
// (the default) waits 1s doubling to 1m.
func WithRetry(p queue.RetryPolicy) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		c.mark("WithRetry")
		if err := p.Validate(); err != nil {
			c.fail(err)
		}
		c.retry = p
	}}
}

// WithKeyConcurrency lets up to n messages of one ordering key
// (queue.WithKey) out at once, in publish order within the key; the others
// wait behind them. The default, 1, is the ordering-key rule. n >= 1.
func WithKeyConcurrency(n int) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		c.mark("WithKeyConcurrency")
		if n < 1 {
			c.fail(backend.Invalid("WithKeyConcurrency(%d): must be >= 1", n))
		}
		c.keyConcurrency = n
	}}
}

// WithDefaultTTL gives every message published to the subscription
// without its own TTL (queue.WithTTL) this one; 0, the default, is none.
func WithDefaultTTL(d time.Duration) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		c.mark("WithDefaultTTL")
		if d < 0 {
			c.fail(backend.Invalid("WithDefaultTTL(%v): must be >= 0", d))
		}
		c.ttl = d
	}}
}

// WithUpdate lets Subscribe change the stored settings of an existing
// subscription to what the options say, rather than refuse them
// (ErrConfigMismatch). The change applies to what happens next, in every
// process: a lease out keeps its deadline.
func WithUpdate() SubscribeOption {
	return SubscribeOption{func(c *subConfig) { c.update = true }}
}

// Subscription is a handle on one subscription: its Poll leases the
// subscription's messages, which any number of handles, in any number of
// processes, share (FOR UPDATE SKIP LOCKED). It is a poller.Source, so a
// worker pool runs over it unchanged; it is also a backend.Rejecter,
// DelayFailer, DelayReleaser, PoolPoller, IdleAwaiter and Clocked. Its
// methods are safe for concurrent use.
type Subscription[T any] struct {
	bus   *Bus
	topic string
	name  string
	id    int64
	codec queue.Codec[T]
	cfg   subConfig
	w     *waiter
	acks  acker
	rand  func() float64 // the retry policy's jitter, unless it has its own

	closeOnce sync.Once
	closed    chan struct{}

	mu       sync.Mutex // guards the counters below
	counters counters
}

// counters are what this handle counted: Stats reports them (the
// database keeps the gauges, not the history).
type counters struct {
	delivered, redelivered, acked uint64
}

var (
	_ poller.Source[string]                       = (*Subscription[string])(nil)
	_ backend.Rejecter                            = (*Subscription[string])(nil)
	_ backend.DelayFailer                         = (*Subscription[string])(nil)
	_ backend.DelayReleaser                       = (*Subscription[string])(nil)
	_ backend.PoolPoller[string]                  = (*Subscription[string])(nil)
	_ backend.PoolIdleAwaiter                     = (*Subscription[string])(nil)
	_ backend.IdleAwaiter                         = (*Subscription[string])(nil)
	_ backend.Clocked                             = (*Subscription[string])(nil)
	_ interface{ Close() error }                  = (*Subscription[string])(nil)
	_ interface{ AckBatch(ids []lease.ID) error } = (*Subscription[string])(nil)
)

// Subscribe opens a handle on the subscription name of topic, whose
// payloads codec decodes (nil: queue.DefaultCodec). A subscription that
// does not exist is created with the options (its defaults otherwise),
// and receives what is published after that; one that exists is bound to
// as it is stored, and an option that differs from its stored setting is
// an error matching ErrConfigMismatch, unless WithUpdate asks for the
// change. A topic that does not exist is an error matching
// queue.ErrTopicNotFound; a bad name or option, one matching
// queue.ErrInvalidArgument. Close the handle when done.
func Subscribe[T any](ctx context.Context, b *Bus, topic, name string, codec queue.Codec[T], opts ...SubscribeOption) (*Subscription[T], error) {
	if b == nil {
		return nil, backend.Invalid("Subscribe: nil *Bus")
	}
	if err := validName("topic", topic); err != nil {
		return nil, err
	}
	if err := validName("subscription", name); err != nil {
		return nil, err
	}
	cfg := subConfig{vis: queue.DefaultVisibilityTimeout, maxAttempts: queue.DefaultMaxAttempts, keyConcurrency: queue.DefaultKeyConcurrency}
	for _, o := range opts {
		if o.apply == nil {
			return nil, backend.Invalid("Subscribe: the zero SubscribeOption")
		}
		o.apply(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	if b.isClosed() {
		return nil, fmt.Errorf("pgleasebus: subscribe %q to %q: %w", name, topic, queue.ErrClosed)
	}
	id, stored, err := b.ensureSubscription(ctx, topic, name, cfg)
	if err != nil {
		return nil, err
	}
	s := &Subscription[T]{bus: b, topic: topic, name: name, id: id, codec: codec, cfg: stored, w: newWaiter(), closed: make(chan struct{}), rand: rand.Float64}
	s.acks.s = s.ackNow
	if !b.register(topic, s.w) {
		return nil, fmt.Errorf("pgleasebus: subscribe %q to %q: %w", name, topic, queue.ErrClosed)
	}
	return s, nil
}

// ensureSubscription creates the subscription, or reads it and checks
// (or, with WithUpdate, applies) the options given; it returns its ID and
// the settings it has now.
func (b *Bus) ensureSubscription(ctx context.Context, topic, name string, want subConfig) (int64, subConfig, error) {
	var (
		id   int64
		have subConfig
	)
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		r := want.retry
		if _, err := tx.Exec(ctx, b.q.insertSubscription, topic, name, int64(want.vis), want.maxAttempts, int64(r.Initial), int64(r.Max),
			r.Multiplier, r.Jitter, r.NoBackoff, want.keyConcurrency, int64(want.ttl), b.now()); err != nil {
			return err
		}
		var paused bool
		err := tx.QueryRow(ctx, b.q.subscription+" FOR UPDATE", topic, name).Scan(scanConfig(&id, &have, &paused)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgleasebus: subscribe %q to %q: %w", name, topic, queue.ErrTopicNotFound)
		}
		if err != nil {
			return err
		}
		diffs := have.diff(want)
		switch {
		case len(diffs) == 0:
			return nil
		case !want.update:
			return fmt.Errorf("pgleasebus: subscribe %q to %q: %w: %v", name, topic, ErrConfigMismatch, diffs)
		}
		have.apply(want)
		r = have.retry
		_, err = tx.Exec(ctx, b.q.updateSubscription, id, int64(have.vis), have.maxAttempts, int64(r.Initial), int64(r.Max),
			r.Multiplier, r.Jitter, r.NoBackoff, have.keyConcurrency, int64(have.ttl))
		return err
	})
	if err != nil {
		if errors.Is(err, queue.ErrTopicNotFound) || errors.Is(err, ErrConfigMismatch) {
			return 0, subConfig{}, err
		}
		return 0, subConfig{}, fmt.Errorf("pgleasebus: subscribe %q to %q: %w", name, topic, err)
	}
	return id, have, nil
}

// scanConfig returns the destinations of a subscription row's columns.
func scanConfig(id *int64, c *subConfig, paused *bool) []any {
	return []any{id, (*nanos)(&c.vis), &c.maxAttempts, (*nanos)(&c.retry.Initial), (*nanos)(&c.retry.Max), &c.retry.Multiplier,
		&c.retry.Jitter, &c.retry.NoBackoff, &c.keyConcurrency, (*nanos)(&c.ttl), paused}
}

// nanos scans a bigint of nanoseconds into a time.Duration.
type nanos time.Duration

func (n *nanos) Scan(src any) error {
	v, ok := src.(int64)
	if !ok {
		return fmt.Errorf("pgleasebus: a duration column of %T", src)
	}
	*n = nanos(v)
	return nil
}

// diff names each setting an option given in want sets otherwise than c.
func (c subConfig) diff(want subConfig) []string {
	var out []string
	check := func(opt string, same bool) {
		if want.set[opt] && !same {
			out = append(out, opt)
		}
	}
	check("WithVisibilityTimeout", c.vis == want.vis)
	check("WithMaxAttempts", c.maxAttempts == want.maxAttempts)
	r, w := c.retry, want.retry
	check("WithRetry", r.Initial == w.Initial && r.Max == w.Max && r.Multiplier == w.Multiplier && r.Jitter == w.Jitter && r.NoBackoff == w.NoBackoff)
	check("WithKeyConcurrency", c.keyConcurrency == want.keyConcurrency)
	check("WithDefaultTTL", c.ttl == want.ttl)
	return out
}

// apply sets on c what the options of want set.
func (c *subConfig) apply(want subConfig) {
	if want.set["WithVisibilityTimeout"] {
		c.vis = want.vis
	}
	if want.set["WithMaxAttempts"] {
		c.maxAttempts = want.maxAttempts
	}
	if want.set["WithRetry"] {
		c.retry = want.retry
	}
	if want.set["WithKeyConcurrency"] {
		c.keyConcurrency = want.keyConcurrency
	}
	if want.set["WithDefaultTTL"] {
		c.ttl = want.ttl
	}
}

// limit returns the attempts limit as the statements take it: 0 for none.
func (c subConfig) limit() int {
	if c.maxAttempts == queue.UnlimitedAttempts {
		return 0
	}
	return c.maxAttempts
}

// Topic returns the subscription's topic.
func (s *Subscription[T]) Topic() string { return s.topic }

// Name returns the subscription's name.
func (s *Subscription[T]) Name() string { return s.name }

// Clock returns the bus's clock (backend.Clocked): a pool over s reads it.
func (s *Subscription[T]) Clock() clock.Clock { return s.bus.cfg.clk }

// Remote reports true: each Poll is a round trip to the database
// (backend.Remote), so a pool leases ahead of its workers.
func (s *Subscription[T]) Remote() bool { return true }

// Close closes this handle: its blocked Polls return queue.ErrClosed, and
// so does every later call; the acks it has queued are sent first. The
// subscription stays, with what it holds (a lease held stays until its
// deadline). A second Close returns nil.
func (s *Subscription[T]) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.bus.unregister(s.topic, s.w)
		s.w.close()
	})
	return nil
}

func (s *Subscription[T]) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return s.bus.isClosed()
	}
}

func (s *Subscription[T]) errClosed(op string) error {
	return fmt.Errorf("pgleasebus: %s on %s/%s: %w", op, s.topic, s.name, queue.ErrClosed)
}

// Unsubscribe deletes the subscription name of topic and the messages it
// holds (its dead letters stay); its handles' calls then fail. A
// subscription that does not exist is an error matching
// queue.ErrSubscriptionNotFound.
func (b *Bus) Unsubscribe(ctx context.Context, topic, name string) error {
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var id int64
		var c subConfig
		var paused bool
		err := tx.QueryRow(ctx, b.q.subscription+" FOR UPDATE", topic, name).Scan(scanConfig(&id, &c, &paused)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgleasebus: unsubscribe %q from %q: %w", name, topic, queue.ErrSubscriptionNotFound)
		}
		if err != nil {
			return fmt.Errorf("pgleasebus: unsubscribe %q from %q: %w", name, topic, err)
		}
		if _, err := tx.Exec(ctx, b.q.deleteSubscriptionMessages, id); err != nil {
			return fmt.Errorf("pgleasebus: unsubscribe %q from %q: %w", name, topic, err)
		}
		_, err = tx.Exec(ctx, b.q.deleteSubscription, id)
		return err
	})
}
