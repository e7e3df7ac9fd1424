package wmleasebus

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Errors returned by this package, wrapped with context: match them with
// errors.Is. An invalid configuration or argument also matches
// queue.ErrInvalidArgument; errors from the broker (broker.ErrTopicNotFound,
// broker.ErrSubscriptionNotFound, queue.ErrClosed, ...) are wrapped as they
// are.
var (
	// ErrInvalidConfig: NewPublisher or NewSubscriber got a configuration
	// it cannot use; the error says which field and why.
	ErrInvalidConfig = errors.New("wmleasebus: invalid config")
	// ErrInvalidTopic: a watermill topic that is not a valid leasebus
	// topic name (see the package documentation, # Topics). Nothing was
	// created or published.
	ErrInvalidTopic = errors.New("wmleasebus: invalid topic name")
	// ErrReservedMetadata: a message's Metadata has the key UUIDHeaderKey,
	// which carries the message's UUID. Nothing was published.
	ErrReservedMetadata = errors.New("wmleasebus: reserved metadata key")
	// ErrPublisherClosed: Publish after the Publisher's Close.
	ErrPublisherClosed = errors.New("wmleasebus: publisher closed")
	// ErrSubscriberClosed: Subscribe or SubscribeInitialize after the
	// Subscriber's Close.
	ErrSubscriberClosed = errors.New("wmleasebus: subscriber closed")
)

// invalidConfig returns an error matching ErrInvalidConfig and
// queue.ErrInvalidArgument.
func invalidConfig(format string, args ...any) error {
	return fmt.Errorf("%w: %s (%w)", ErrInvalidConfig, fmt.Sprintf(format, args...), queue.ErrInvalidArgument)
}

// PublisherConfig configures a Publisher. The zero value is ready to use.
type PublisherConfig struct {
	// DoNotCreateTopicIfMissing makes Publish to a topic that does not
	// exist fail with an error matching broker.ErrTopicNotFound. By
	// default (false) Publish creates the topic on first use.
	DoNotCreateTopicIfMissing bool

	// Marshaler turns a watermill message into a leasebus payload and
	// publish options. nil means DefaultMarshaler{}.
	Marshaler Marshaler
}

func (c *PublisherConfig) setDefaults() {
	if c.Marshaler == nil {
		c.Marshaler = DefaultMarshaler{}
	}
}

// Validate reports what is wrong with c, if anything. Every field's zero
// value is valid, so a PublisherConfig is always valid; Validate exists
// for symmetry with SubscriberConfig.
func (c PublisherConfig) Validate() error { return nil }

// SubscriberConfig configures a Subscriber. The zero value is valid: a
// subscriber without a consumer group, handing out one message at a time.
type SubscriberConfig struct {
	// ConsumerGroup names the leasebus subscription that every Subscribe
	// of this Subscriber, and of every other Subscriber with the same
	// group on the same broker, consumes: they compete for its messages,
	// and the subscription keeps them while no one consumes (it outlives
	// Close). Each group gets every message published to the topic after
	// the group's subscription was created.
	//
	// Empty means no group: every Subscribe call gets a fresh
	// subscription of its own (named "wmleasebus-ephemeral-" and a UUID),
	// which sees every message published while it lasts and is removed,
	// with what it holds, when the Subscribe ends (fan-out, as in
	// watermill's GoChannel). SubscribeInitialize creates the one the
	// next Subscribe of the topic takes, so it keeps what is published in
	// between.
	//
	// A group is a subscription name: non-empty UTF-8 of at most 255
	// bytes without spaces or control characters.
	ConsumerGroup string

	// SubscribeOptions are the options of the subscription when this
	// Subscriber creates it (or, on a durable broker, binds one recovered
	// from its journal): its visibility timeout, max attempts, retry
	// policy, queue bound and so on (broker.WithVisibilityTimeout,
	// broker.WithMaxAttempts, broker.WithRetry, ...). A subscription that
	// exists keeps its options. nil means the broker's defaults.
	SubscribeOptions []broker.SubscribeOption

	// DoNotCreateTopicIfMissing makes Subscribe and SubscribeInitialize
	// fail with an error matching broker.ErrTopicNotFound for a topic that
	// does not exist. By default (false) they create it.
	DoNotCreateTopicIfMissing bool

	// DoNotCreateSubscriptionIfMissing makes Subscribe and
	// SubscribeInitialize fail with an error matching
	// broker.ErrSubscriptionNotFound when the ConsumerGroup's subscription
	// does not exist, rather than create it. It needs a ConsumerGroup.
	DoNotCreateSubscriptionIfMissing bool

	// Concurrency is how many messages each Subscribe call hands out at
	// once, each waiting for its Ack or Nack (default 1: one at a time, in
	// the subscription's order, as watermill expects). More than 1 gives
	// up that order. Must be >= 0; 0 means 1.
	Concurrency int

	// BatchSize is the most messages one Poll of the subscription leases
	// (default: Concurrency). A BatchSize above Concurrency prefetches:
	// the extra messages wait in the Subscribe call with their leases
	// kept, and are released (visible again, no attempt spent) when it
	// ends. Must be >= 0; 0 means Concurrency.
	BatchSize int

	// MaxExtension bounds how long after its delivery a message's lease is
	// kept alive while it waits for its Ack or Nack (default 0: one hour).
	// Where it is longer than the subscription's visibility timeout, the
	// lease is taken for MaxExtension at once (the poller's Lease
	// extension), so that no move of the broker's clock short of it takes
	// the message from watermill. A handler that
	// holds a message longer lets it go: its lease lapses and the message
	// is delivered again, with an attempt spent (an Ack that comes before
	// the redelivery still deletes it; one after changes nothing).
	// poller.NoExtension turns extension off; other negative values are invalid.
	MaxExtension time.Duration

	// Unmarshaler turns a leasebus delivery into a watermill message. nil
	// means DefaultMarshaler{}. A delivery it cannot unmarshal is
	// dead-lettered at once (queue.ReasonRejected) with its error as the
	// dead letter's LastError, and logged; so is one for which it returns
	// a nil message and no error.
	Unmarshaler Unmarshaler
}

func (c *SubscriberConfig) setDefaults() {
	if c.Unmarshaler == nil {
		c.Unmarshaler = DefaultMarshaler{}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.BatchSize == 0 {
		c.BatchSize = c.Concurrency
	}
}

// Validate reports what is wrong with c: an error matching
// ErrInvalidConfig (and queue.ErrInvalidArgument) that names the field,
// or nil.
func (c SubscriberConfig) Validate() error {
	var errs []error
	if c.ConsumerGroup != "" {
		if err := validGroup(c.ConsumerGroup); err != nil {
			errs = append(errs, err)
		}
	} else if c.DoNotCreateSubscriptionIfMissing {
		errs = append(errs, invalidConfig("DoNotCreateSubscriptionIfMissing needs a ConsumerGroup: without one every Subscribe creates its own subscription"))
	}
	if c.Concurrency < 0 {
		errs = append(errs, invalidConfig("Concurrency %d, must be >= 1 (or 0 for 1)", c.Concurrency))
	}
	if c.BatchSize < 0 {
		errs = append(errs, invalidConfig("BatchSize %d, must be >= 1 (or 0 for Concurrency)", c.BatchSize))
	}
	if c.MaxExtension < 0 && c.MaxExtension != poller.NoExtension {
		errs = append(errs, invalidConfig("MaxExtension %v, must be >= 0 or poller.NoExtension", c.MaxExtension))
	}
	return errors.Join(errs...)
}

// validGroup checks a consumer group as the broker checks a subscription
// name (the broker checks again when it creates the subscription).
func validGroup(g string) error {
	switch {
	case len(g) > 255:
		return invalidConfig("ConsumerGroup of %d bytes, at most 255", len(g))
	case !utf8.ValidString(g):
		return invalidConfig("ConsumerGroup %q is not UTF-8", g)
	case strings.ContainsFunc(g, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return invalidConfig("ConsumerGroup %q has a space or control character", g)
	}
	return nil
}
