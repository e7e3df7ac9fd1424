package outbox

import (
	"context"

	"github.com/leasebus/leasebus/broker"
)

// ToBroker returns a Publisher to b: each message is published to its
// topic with its key, priority, headers and delay, under its dedup ID
// (broker.WithDedupID). The broker's dedup window (broker.WithDedupWindow,
// five minutes by default) must cover the relay's retry horizon: the
// longest a row can stay after its publish before the relay deletes it
// (a crash and restart, a database outage), or a message published, then
// published again after the window, is in the queue twice.
func ToBroker[T any](b *broker.Broker[T]) Publisher[T] {
	return PublisherFunc[T](func(ctx context.Context, m Message[T]) error {
		opts := make([]broker.PublishOption, 0, 5)
		opts = append(opts, broker.WithDedupID(m.DedupID))
		if m.Key != "" {
			opts = append(opts, broker.WithKey(m.Key))
		}
		if m.Priority != 0 {
			opts = append(opts, broker.WithPriority(m.Priority))
		}
		if len(m.Headers) > 0 {
			opts = append(opts, broker.WithHeaders(m.Headers))
		}
		if m.Delay > 0 {
			opts = append(opts, broker.WithDelay(m.Delay))
		}
		_, err := b.Publish(ctx, m.Topic, m.Payload, opts...)
		return err
	})
}
