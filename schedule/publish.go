package schedule

import (
	"context"

	"github.com/leasebus/leasebus/broker"
)

// Publish returns a Job that publishes payload(f) to topic on b with the
// fire's dedup ID (broker.WithDedupID) after opts, so that each slot is in
// the topic once within the broker's dedup window (broker.WithDedupWindow;
// make it longer than the longest outage a Store should bridge). A
// publish error, ErrTopicNotFound included, fails the fire, which is
// retried.
//
// Over another backend, write the Job the same way with its publish and
// its dedup option; on SQS, the queue must be FIFO, whose dedup window is
// five minutes.
func Publish[T any](b *broker.Broker[T], topic string, payload func(Fire) T, opts ...broker.PublishOption) Job {
	return func(ctx context.Context, f Fire) error {
		_, err := b.Publish(ctx, topic, payload(f), append(opts[:len(opts):len(opts)], broker.WithDedupID(f.DedupID))...)
		return err
	}
}
