package schedule

import (
	"context"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Publish returns a Job that publishes payload(f) to topic with pub,
// after opts, under the fire's dedup ID (queue.WithDedupID), so that each
// slot is in the topic once within the backend's dedup window however
// many schedulers fire it (make the window longer than the longest outage
// a Store should bridge: the broker's is broker.WithDedupWindow,
// JetStream's its stream's duplicate window, SQS FIFO's five minutes). A
// publish a backend drops as a duplicate succeeds: the slot was
// published. Any other error, queue.ErrTopicNotFound included, fails the
// fire, which is retried; a backend that cannot deduplicate (a standard
// SQS queue) refuses every fire by name (errors.ErrUnsupported).
//
// pub is any backend's publisher (backend.Publisher): a *broker.Broker, or
// the JetStream, SQS or PostgreSQL backend's.
func Publish[T any](pub backend.Publisher[T], topic string, payload func(Fire) T, opts ...queue.PublishOption) Job {
	return func(ctx context.Context, f Fire) error {
		_, err := pub.Publish(ctx, topic, payload(f), append(opts[:len(opts):len(opts)], queue.WithDedupID(f.DedupID))...)
		return err
	}
}
