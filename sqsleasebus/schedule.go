package sqsleasebus

import (
	"context"

	"github.com/leasebus/leasebus/schedule"
)

// SchedulePublish returns a schedule.Job that publishes payload(f) with p
// under the fire's dedup ID (WithDedupID), in the message group named by
// the schedule (WithKey(f.Schedule)) unless opts name another, so that
// each slot is in the queue once within SQS's five-minute deduplication
// interval, however many schedulers fire it. p's queue must be FIFO: a
// standard queue does not deduplicate, and every fire fails with an error
// matching ErrUnsupported. A fire that fails is retried by the scheduler.
func SchedulePublish[T any](p *Publisher[T], payload func(schedule.Fire) T, opts ...PublishOption) schedule.Job {
	return func(ctx context.Context, f schedule.Fire) error {
		all := make([]PublishOption, 0, len(opts)+2)
		all = append(all, WithKey(f.Schedule))
		all = append(all, opts...)
		_, err := p.Publish(ctx, payload(f), append(all, WithDedupID(f.DedupID))...)
		return err
	}
}
