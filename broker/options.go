package broker

import (
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// defaultDeadLetterLimit is how many dead letters a broker keeps unless
// WithDeadLetterLimit says otherwise.
const defaultDeadLetterLimit = 10_000

// Option configures a Broker in New or Open. Make one with the With
// functions that return it; WithSubscriptionDefaults sets the default of
// every subscription option. WithSync and WithCompactMin are Open's alone:
// New refuses them.
//
// The option types (Option, SubscribeOption, PublishOption) are opaque
// values and not generic, so a caller never writes a type argument; the
// zero value of each is refused.
type Option struct{ apply func(*config) }

// SubscribeOption configures one subscription in Subscribe; given to
// WithSubscriptionDefaults, the default of every subscription of a broker.
type SubscribeOption struct{ apply func(*subConfig) }

// defaultDedupWindow is how long a publish dedup ID is remembered unless
// WithDedupWindow says otherwise (SQS FIFO's five minutes).
const defaultDedupWindow = 5 * time.Minute

// defaultDedupLimit bounds the dedup IDs remembered per topic unless
// WithDedupLimit says otherwise.
const defaultDedupLimit = 1_000_000

type config struct {
	clock           clock.Clock
	deadLetterLimit int
	dedupWindow     time.Duration
	dedupLimit      int
	sub             subConfig // defaults for every subscription; sub.err holds the first invalid option

	// Open's options.
	sync        SyncMode
	compactMin  int64
	durableOnly string // the name of an Open-only option given, for New's error
}

type subConfig struct {
	queue       queue.Config
	filter      any    // func(queue.Message[T]) bool, checked against T in Subscribe
	deadLetters string // topic to publish dead letters to; "" for the broker's store
	update      bool   // WithUpdate
	err         error
}

// errZeroOption refuses an option value not made by a With function.
var errZeroOption = backend.Invalid("zero option: make options with the With functions")

func (c *subConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithSubscriptionDefaults makes opts the defaults of every subscription of
// the broker; a subscription's own options override them. On Open,
// WithSubscriptionDefaults(WithUpdate()) lets every Subscribe change a
// recovered subscription.
func WithSubscriptionDefaults(opts ...SubscribeOption) Option {
	return Option{func(c *config) {
		for _, o := range opts {
			if o.apply == nil {
				c.sub.fail(fmt.Errorf("WithSubscriptionDefaults: %w", errZeroOption))
				continue
			}
			o.apply(&c.sub)
		}
	}}
}

// WithClock sets the clock behind every time read and timer of the broker
// and its subscriptions: clock.NewMock() in tests, the real clock
// (clock.New()) by default. nil is invalid. On the real clock the broker
// reads the time more cheaply than time.Now: the monotonic reading alone,
// with the wall reading refreshed every millisecond (a PublishedAt may lag
// a step of the system clock by that much; leases, delays and TTLs are
// timed on the monotonic clock and exact). Clock returns c as given.
func WithClock(c clock.Clock) Option {
	return Option{func(cfg *config) {
		if c == nil {
			cfg.sub.fail(backend.Invalid("WithClock: nil clock"))
			return
		}
		cfg.clock = c
	}}
}

// WithDeadLetterLimit bounds the broker's dead-letter store (default
// 10,000). When it is full the oldest dead letter
// is dropped and counted (see DeadLetterStats). n < 1 is invalid.
func WithDeadLetterLimit(n int) Option {
	return Option{func(cfg *config) {
		if n < 1 {
			cfg.sub.fail(backend.Invalid("WithDeadLetterLimit: n = %d, must be >= 1", n))
			return
		}
		cfg.deadLetterLimit = n
	}}
}

// WithDedupWindow sets how long a publish dedup ID (WithDedupID) is
// remembered, from its first publish (default five
// minutes, SQS FIFO's window). d must be > 0. An expired ID's memory is
// given back by the next dedup publish to its topic, or at most a window
// later by a timer on the broker's clock.
func WithDedupWindow(d time.Duration) Option {
	return Option{func(cfg *config) {
		if d <= 0 {
			cfg.sub.fail(backend.Invalid("WithDedupWindow: %v, must be > 0", d))
			return
		}
		cfg.dedupWindow = d
	}}
}

// WithDedupLimit bounds the dedup IDs remembered per topic (default
// 1,000,000: over 3,000 IDs a second for the default five-minute window),
// so memory stays bounded whatever the publish rate. An ID is never
// forgotten inside its window: when n IDs are, a publish with a new one
// fails with ErrDedupFull and publishes nothing (duplicates of remembered
// IDs are still recognised). A remembered ID holds its message's ID and
// time, and the message only weakly: about 65 bytes plus the ID's own
// once its message is settled (see BenchmarkDedupMemory). n must be >= 1.
func WithDedupLimit(n int) Option {
	return Option{func(cfg *config) {
		if n < 1 {
			cfg.sub.fail(backend.Invalid("WithDedupLimit: %d, must be >= 1", n))
			return
		}
		cfg.dedupLimit = n
	}}
}

// WithDefaultTTL sets a subscription's default time to live for its
// messages, from publish: a message not acked by then is dead-lettered
// with reason queue.ReasonExpired instead of being delivered (one in
// flight may still be acked). A publish's own WithTTL overrides it.
// Default: none. d must be > 0.
func WithDefaultTTL(d time.Duration) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithDefaultTTL: %v, must be > 0", d))
			return
		}
		c.queue.TTL = d
	}}
}

// WithDeadLetterTopic routes a subscription's dead letters to a topic
// (Cloud Pub/Sub style) instead of the broker's store, so they can be
// polled, acked and republished with the same API. Each is published with
// its payload, priority, key and headers, plus read-only headers naming
// the reason, attempts, last error, source subscription, source topic,
// original message ID and time (see the Header constants). When the topic
// does not exist or has no subscriptions when a message dies, the dead
// letter goes to the broker's store instead, so nothing is lost silently;
// so does a dead letter that dies again after coming through a
// dead-letter topic, so routing cannot loop.
func WithDeadLetterTopic(topic string) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if err := validTopic(topic); err != nil {
			c.fail(fmt.Errorf("WithDeadLetterTopic: %w", err))
			return
		}
		c.deadLetters = topic
	}}
}

// WithVisibilityTimeout sets the lease each delivery gets (default 30s, as
// SQS). d must be > 0.
func WithVisibilityTimeout(d time.Duration) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithVisibilityTimeout: %v, must be > 0", d))
			return
		}
		c.queue.VisibilityTimeout = d
	}}
}

// WithMaxAttempts sets the most deliveries a message gets before it is
// dead-lettered (default 5). n must be >= 1, or queue.UnlimitedAttempts.
func WithMaxAttempts(n int) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if n < 1 && n != queue.UnlimitedAttempts {
			c.fail(backend.Invalid("WithMaxAttempts: %d, must be >= 1 or queue.UnlimitedAttempts", n))
			return
		}
		c.queue.MaxAttempts = n
	}}
}

// WithRetry sets the backoff after a reported failure (Fail, or a handler
// error in the poller). The default is exponential from 1s, doubling,
// capped at 1m, without jitter (the zero queue.RetryPolicy).
func WithRetry(p queue.RetryPolicy) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if err := p.Validate(); err != nil {
			c.fail(err)
			return
		}
		c.queue.Retry = p
	}}
}

// WithMaxQueue bounds the messages a subscription holds: visible, delayed
// and in flight (default 100,000). n must be >= 1.
func WithMaxQueue(n int) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if n < 1 {
			c.fail(backend.Invalid("WithMaxQueue: %d, must be >= 1", n))
			return
		}
		c.queue.MaxQueue = n
	}}
}

// WithOverflow sets what a full subscription does with a new message
// (default queue.OverflowDeadLetter: dead-letter it, reason Overflow).
func WithOverflow(p queue.OverflowPolicy) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if p > queue.OverflowDropOldest {
			c.fail(backend.Invalid("WithOverflow: %v, not a policy", p))
			return
		}
		c.queue.Overflow = p
	}}
}

// WithMaxInFlight caps the leases out at once on a subscription (default:
// no cap beyond the queue's bound). n must be >= 1.
func WithMaxInFlight(n int) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if n < 1 {
			c.fail(backend.Invalid("WithMaxInFlight: %d, must be >= 1", n))
			return
		}
		c.queue.MaxInFlight = n
	}}
}

// WithUpdate lets Subscribe change a subscription that a durable broker
// recovered with other settings: the explicit options replace the stored
// ones (what they do not name stays), and the change is stored. Without
// it, such a Subscribe fails with a *ConfigMismatchError and changes
// nothing. Given to Open in WithSubscriptionDefaults, it applies to every
// Subscribe. It changes nothing else: on a new subscription, or one already
// bound in this process (ErrAlreadySubscribed), it does nothing.
func WithUpdate() SubscribeOption { return SubscribeOption{func(c *subConfig) { c.update = true }} }

// WithFilter makes a subscription accept only the messages for which f
// returns true; the others are not offered to it and leave no trace in its
// Stats. f runs in the publisher's goroutine, with no broker or queue lock
// held, once per publish; it must be fast and must not block. T is
// inferred from f and must be the broker's payload type: Subscribe
// reports a mismatch as an invalid argument. A nil f is invalid.
func WithFilter[T any](f func(queue.Message[T]) bool) SubscribeOption {
	return SubscribeOption{func(c *subConfig) {
		if f == nil {
			c.fail(backend.Invalid("WithFilter: nil func"))
			return
		}
		c.filter = f
	}}
}

// PublishOption configures one Publish: it is queue.PublishOption, the
// one vocabulary of a publish that every backend reads, so the options
// below work for any backend's publisher (backend.Publisher) too. It is a
// small value, not a closure, so options cost Publish no allocation; make
// them with the With functions (the zero PublishOption is invalid).
type PublishOption = queue.PublishOption

// publishConfig is a publish's options and what the broker adds for a
// publish of its own.
type publishConfig struct {
	queue.PublishOptions
	// forget, for a dead letter routed to its topic: the letter leaves its
	// subscription's store in the publish's group.
	forget *dlKey
	// settle, for a Forward: run once the message is offered, with the
	// publish's group (nil in memory) as the note its ack's record goes
	// to; settled is what it returned.
	settle  func(note any) error
	settled error
	// duplicate: the publish's dedup ID named a message already published,
	// which it returned, offering nothing.
	duplicate bool
}

// WithPriority sets the message's priority (default queue.PriorityNormal).
// Higher priorities are delivered first; within one, publish order. It is
// queue.WithPriority.
func WithPriority(p queue.Priority) PublishOption { return queue.WithPriority(p) }

// WithHeaders sets the message's headers, copied: later changes to h do
// not show, and consumers can only read them. Several WithHeaders add up,
// a later one's value winning for a key they share (so a middleware can add
// a trace context to a caller's headers). It is queue.WithHeaders.
func WithHeaders(h map[string]string) PublishOption { return queue.WithHeaders(h) }

// WithDelay makes the message visible d after publish (default 0: at
// once). d must be >= 0. It is queue.WithDelay.
func WithDelay(d time.Duration) PublishOption { return queue.WithDelay(d) }

// WithKey sets the message's ordering key (SQS FIFO message group). On each
// subscription, messages with the same key are delivered in publish order
// and one at a time: while one is leased or waiting out a retry delay, the
// later ones are held back (Stats.HeldBack); other keys flow freely. A
// dead-lettered message lets its key go on. "" means no key. It is
// queue.WithKey.
func WithKey(key string) PublishOption { return queue.WithKey(key) }

// WithTTL gives the message a time to live from publish, overriding each
// subscription's WithDefaultTTL: a message not acked by PublishedAt + d is
// dead-lettered with reason queue.ReasonExpired instead of being delivered
// (one in flight may still be acked, and expires if it comes back). d must
// be > 0. It is queue.WithTTL.
func WithTTL(d time.Duration) PublishOption { return queue.WithTTL(d) }

// MaxDedupID is the longest publish dedup ID, in bytes (SQS allows 128
// characters): IDs are kept in memory and in a durable broker's journal.
const MaxDedupID = queue.MaxDedupID

// WithDedupID makes the publish idempotent (SQS FIFO deduplication ID,
// JetStream Nats-Msg-Id): a second publish with the same id on the same
// topic within the dedup window (WithDedupWindow, from the first publish)
// is accepted and dropped, and returns the original message while a
// subscription still holds it; once it is settled, the ID keeps only the
// original's ID and PublishedAt, and the returned message is this call's
// with those two (the original's payload is not kept). A publish
// that stored its message nowhere (no subscription took it, or it could not
// be committed) records nothing, so it can be retried. One that some
// subscriptions took while others refused it (a queue.ErrQueueFull error
// with the message) keeps its ID: a retry returns the original and queues
// no second copy. IDs are
// remembered per topic: deleting a topic forgets them. id must not be
// empty, and at most MaxDedupID bytes long. It is queue.WithDedupID.
func WithDedupID(id string) PublishOption { return queue.WithDedupID(id) }

// WithDedupIDs gives each message of a PublishBatch its dedup ID, as
// WithDedupID gives one to a Publish: ids[i] is the ID of payloads[i], and
// a payload whose ID was published inside the window (earlier, or earlier
// in the same batch) is not queued again: the batch returns the original
// message in its place. This is how a batch job enqueues its input
// idempotently at batch speed. len(ids) must equal the number of payloads;
// each ID must be valid for WithDedupID. The slice is read during the call
// only. Publish rejects this option. It is queue.WithDedupIDs.
func WithDedupIDs(ids []string) PublishOption { return queue.WithDedupIDs(ids) }
