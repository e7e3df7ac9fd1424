package leasebuspubsub

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"gocloud.dev/gcerrors"
	"gocloud.dev/pubsub"
	"gocloud.dev/pubsub/batcher"
	"gocloud.dev/pubsub/driver"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// Scheme is the URL scheme Register registers a URLOpener under.
const Scheme = "leasebus"

// TopicOptions configures OpenTopic. The zero value is the default.
type TopicOptions struct {
	// BatcherOptions adds constraints to the default batching of sends.
	// The driver has no limits of its own: every message of a batch is
	// published with broker.Publish, one after another.
	BatcherOptions batcher.Options
}

// OpenTopic returns a *pubsub.Topic that publishes to topic on b.
//
// The topic is not created and need not exist yet, as with gocloud's
// drivers for cloud services: Send to a topic that does not exist fails
// with gcerrors.NotFound. Create it with b.CreateTopic. A topic without
// subscriptions accepts and drops what is sent to it.
//
// A nil broker, or a name the broker can never accept (empty, a space,
// a wildcard, ...), is an error matching queue.ErrInvalidArgument; opts
// may be nil. Shutting the Topic down does not close b: the program owns
// the broker.
func OpenTopic(b *broker.Broker[[]byte], topic string, opts *TopicOptions) (*pubsub.Topic, error) {
	dt, err := openTopic(b, topic)
	if err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &TopicOptions{}
	}
	return pubsub.NewTopic(dt, &opts.BatcherOptions), nil
}

// openTopic returns the driver behind OpenTopic.
func openTopic(b *broker.Broker[[]byte], name string) (*topic, error) {
	if b == nil {
		return nil, fmt.Errorf("leasebuspubsub: OpenTopic %q: nil broker: %w", name, queue.ErrInvalidArgument)
	}
	// The broker checks the name; a topic that does not exist (yet) or a
	// closed broker is Send's error, not Open's.
	if _, err := b.Subscriptions(name); errors.Is(err, queue.ErrInvalidArgument) {
		return nil, fmt.Errorf("leasebuspubsub: OpenTopic: %w", err)
	}
	return &topic{b: b, name: name}, nil
}

// topic is the driver.Topic: a name on a broker.
type topic struct {
	b    *broker.Broker[[]byte]
	name string
}

var _ driver.Topic = (*topic)(nil)

// SendBatch publishes each message in turn. A message's Body is copied,
// so the sender may reuse its buffer once Send returns; its Metadata
// becomes the message's headers. BeforeSend may add publish options (see
// the package documentation); AfterSend sees the stored message.
//
// The batch is not atomic: on an error, the messages before the failing
// one are published. That is why no error is retryable (see IsRetryable).
func (t *topic) SendBatch(ctx context.Context, ms []*driver.Message) error {
	for _, m := range ms {
		if err := ctx.Err(); err != nil {
			return err
		}
		var opts []broker.PublishOption
		if len(m.Metadata) > 0 {
			opts = append(opts, broker.WithHeaders(m.Metadata)) // copied by the broker
		}
		if m.BeforeSend != nil {
			if err := m.BeforeSend(beforeSendAs(&opts)); err != nil {
				return err
			}
		}
		msg, err := t.b.Publish(ctx, t.name, bytes.Clone(m.Body), opts...)
		if err != nil {
			return err
		}
		if m.AfterSend != nil {
			if err := m.AfterSend(afterSendAs(msg)); err != nil {
				return err
			}
		}
	}
	return nil
}

// beforeSendAs exposes the message's publish options as a
// *[]broker.PublishOption.
func beforeSendAs(opts *[]broker.PublishOption) func(any) bool {
	return func(i any) bool {
		p, ok := i.(**[]broker.PublishOption)
		if !ok || p == nil {
			return false
		}
		*p = opts
		return true
	}
}

// afterSendAs exposes the message as the broker stored it.
func afterSendAs(m queue.Message[[]byte]) func(any) bool {
	return func(i any) bool {
		p, ok := i.(*queue.Message[[]byte])
		if !ok || p == nil {
			return false
		}
		*p = m
		return true
	}
}

// IsRetryable reports false: leasebus has no transient errors, and a
// retried batch would publish its first messages twice.
func (*topic) IsRetryable(error) bool { return false }

// As exposes the broker as a *broker.Broker[[]byte].
func (t *topic) As(i any) bool {
	p, ok := i.(**broker.Broker[[]byte])
	if !ok || p == nil {
		return false
	}
	*p = t.b
	return true
}

// ErrorAs implements driver.Topic.ErrorAs with errors.As.
func (*topic) ErrorAs(err error, i any) bool { return errorAs(err, i) }

// ErrorCode maps a leasebus error to its gcerrors code (see the package
// documentation).
func (*topic) ErrorCode(err error) gcerrors.ErrorCode { return errorCode(err) }

// Close does nothing: the topic holds nothing but its name, and the
// broker is the program's.
func (*topic) Close() error { return nil }
