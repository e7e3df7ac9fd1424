package wmleasebus

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// UUIDHeaderKey is the leasebus header that carries a watermill message's
// UUID (the key watermill's Kafka and Google Cloud Pub/Subs use). A
// message whose Metadata has this key is refused with ErrReservedMetadata.
const UUIDHeaderKey = "_watermill_message_uuid"

// Marshaler turns a watermill message into what the broker publishes: the
// payload, and publish options (headers, and whatever else a custom
// Marshaler chooses: broker.WithKey, WithPriority, WithDelay, WithTTL,
// WithDedupID). The broker keeps the payload as it is, so it must not be
// changed after Marshal returns. A Marshal error fails Publish and
// publishes nothing more.
type Marshaler interface {
	Marshal(topic string, msg *message.Message) (payload []byte, opts []broker.PublishOption, err error)
}

// Unmarshaler turns a leasebus delivery into a watermill message. The
// Subscriber sets the message's context; Unmarshal must not. A delivery's
// Payload is shared with every other subscription of its message (and
// with its redeliveries), so an Unmarshaler that hands it out must copy
// it, as DefaultMarshaler does.
type Unmarshaler interface {
	Unmarshal(d queue.Delivery[[]byte]) (*message.Message, error)
}

// MarshalerUnmarshaler is both, as DefaultMarshaler is.
type MarshalerUnmarshaler interface {
	Marshaler
	Unmarshaler
}

// DefaultMarshaler is the Marshaler and Unmarshaler used when a config
// names none. Marshal copies the payload, and publishes the Metadata as
// the message's headers with the UUID under UUIDHeaderKey; Unmarshal
// reverses it, with a copy of the payload, so a message comes back with
// its UUID, Metadata and Payload equal (message.Message.Equals) to what was
// published. A message published to the broker directly, without the
// header, gets the leasebus message ID (queue.Message.ID) as its UUID.
//
// Embed it to add publish options, for example an ordering key:
//
//	type keyed struct{ wmleasebus.DefaultMarshaler }
//
//	func (k keyed) Marshal(topic string, msg *message.Message) ([]byte, []broker.PublishOption, error) {
//		p, opts, err := k.DefaultMarshaler.Marshal(topic, msg)
//		return p, append(opts, broker.WithKey(msg.Metadata.Get("customer"))), err
//	}
type DefaultMarshaler struct{}

// Marshal implements Marshaler.
func (DefaultMarshaler) Marshal(_ string, msg *message.Message) ([]byte, []broker.PublishOption, error) {
	if _, ok := msg.Metadata[UUIDHeaderKey]; ok {
		return nil, nil, fmt.Errorf("message %q: metadata %q: %w", msg.UUID, UUIDHeaderKey, ErrReservedMetadata)
	}
	h := make(map[string]string, len(msg.Metadata)+1)
	for k, v := range msg.Metadata {
		h[k] = v
	}
	h[UUIDHeaderKey] = msg.UUID
	return bytes.Clone(msg.Payload), []broker.PublishOption{broker.WithHeaders(h)}, nil
}

// Unmarshal implements Unmarshaler. It never fails.
func (DefaultMarshaler) Unmarshal(d queue.Delivery[[]byte]) (*message.Message, error) {
	id, ok := d.Headers.Lookup(UUIDHeaderKey)
	if !ok {
		id = d.ID.String()
	}
	msg := message.NewMessage(id, bytes.Clone(d.Payload))
	for k, v := range d.Headers.All() {
		if k != UUIDHeaderKey {
			msg.Metadata[k] = v
		}
	}
	return msg, nil
}

// deliveryKey is the context key of the delivery a message came from.
type deliveryKey struct{}

// DeliveryFromContext returns the leasebus delivery a Subscriber's message
// came from, given the message's context (msg.Context()): its Attempt (1
// on the first delivery) and MaxAttempts, lease, deadline at delivery,
// message ID, key, priority and PublishedAt. ok is false for a context
// that does not come from this package's Subscriber. The delivery's
// Payload is the broker's, shared: read it, do not change it.
func DeliveryFromContext(ctx context.Context) (d queue.Delivery[[]byte], ok bool) {
	d, ok = ctx.Value(deliveryKey{}).(queue.Delivery[[]byte])
	return d, ok
}
