package wmleasebus

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// Publisher is a watermill message.Publisher that publishes to a leasebus
// broker. It is safe for concurrent use. Create one with NewPublisher.
type Publisher struct {
	b      *broker.Broker[[]byte]
	cfg    PublisherConfig
	logger watermill.LoggerAdapter
	topics topicCache
	closed atomic.Bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher on b. A nil b, or a config that
// Validate refuses, is an error matching ErrInvalidConfig. A nil logger
// logs nothing. The broker stays the caller's: the Publisher's Close does
// not close it.
func NewPublisher(b *broker.Broker[[]byte], config PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	if b == nil {
		return nil, invalidConfig("nil broker")
	}
	if err := config.Validate(); err != nil {
		return nil, err
	}
	config.setDefaults()
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Publisher{b: b, cfg: config, logger: logger, topics: topicCache{b: b, noCreate: config.DoNotCreateTopicIfMissing}}, nil
}

// Publish publishes msgs to topic, in order, each with its own context
// (msg.Context()), which bounds a publish that waits (a subscription with
// queue.OverflowBlock). It returns when the broker has accepted every
// message: on a durable broker (broker.Open), when each is in the journal.
// The topic is created on first use unless DoNotCreateTopicIfMissing.
//
// Publishing is not atomic: on the first error Publish stops, and the
// messages before it stay published. The error names the message's UUID
// and wraps the cause: ErrInvalidTopic, ErrReservedMetadata, a Marshaler
// error, or the broker's (broker.ErrTopicNotFound, queue.ErrQueueFull,
// queue.ErrClosed, ...). After Close it returns ErrPublisherClosed.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return fmt.Errorf("publish to %q: %w", topic, ErrPublisherClosed)
	}
	if err := p.topics.ensure(topic); err != nil {
		return fmt.Errorf("wmleasebus: publish to %q: %w", topic, err)
	}
	for _, msg := range msgs {
		if err := p.publish(topic, msg); err != nil {
			return err
		}
	}
	return nil
}

func (p *Publisher) publish(topic string, msg *message.Message) error {
	if msg == nil {
		return fmt.Errorf("wmleasebus: publish to %q: nil message (%w)", topic, queue.ErrInvalidArgument)
	}
	payload, opts, err := p.cfg.Marshaler.Marshal(topic, msg)
	if err != nil {
		return fmt.Errorf("wmleasebus: publish %q to %q: marshal: %w", msg.UUID, topic, err)
	}
	ctx := msg.Context()
	_, err = p.b.Publish(ctx, topic, payload, opts...)
	if errors.Is(err, broker.ErrTopicNotFound) && !p.cfg.DoNotCreateTopicIfMissing {
		// The topic was deleted since it was created here: create it again.
		p.topics.forget(topic)
		if err = p.topics.ensure(topic); err == nil {
			_, err = p.b.Publish(ctx, topic, payload, opts...)
		}
	}
	if err != nil {
		return fmt.Errorf("wmleasebus: publish %q to %q: %w", msg.UUID, topic, err)
	}
	p.logger.Trace("Message published", watermill.LogFields{"topic": topic, "message_uuid": msg.UUID})
	return nil
}

// Close makes every later Publish return ErrPublisherClosed. Publish is
// synchronous, so there is nothing to flush; Close does not wait for the
// Publish calls under way, and leaves the broker open. Close twice returns
// nil.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}

// topicCache remembers the topics known to exist, so that a publish or a
// subscribe does not take the broker's write lock (CreateTopic) each time.
type topicCache struct {
	b        *broker.Broker[[]byte]
	noCreate bool
	known    sync.Map // topic name -> struct{}
}

// ensure makes sure topic exists: it creates it, or with noCreate checks
// that it exists. A name the broker refuses is ErrInvalidTopic.
func (c *topicCache) ensure(topic string) error {
	if _, ok := c.known.Load(topic); ok {
		return nil
	}
	var err error
	if c.noCreate {
		_, err = c.b.Subscriptions(topic) // a lookup that checks the name on a miss
	} else {
		err = c.b.CreateTopic(topic)
	}
	switch {
	case err == nil:
		c.known.Store(topic, struct{}{})
		return nil
	case errors.Is(err, queue.ErrInvalidArgument):
		return fmt.Errorf("%w: %w", ErrInvalidTopic, err)
	}
	return err
}

func (c *topicCache) forget(topic string) { c.known.Delete(topic) }
