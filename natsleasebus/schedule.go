package natsleasebus

import (
	"context"
	"errors"

	"github.com/leasebus/leasebus/schedule"
)

// SchedulePublish returns a schedule.Job that publishes payload(f) to
// topic on b with the fire's dedup ID (WithDedupID) after opts, so that
// each slot is in the stream once within its duplicate window (the
// stream's Duplicates, two minutes by default: make it cover the longest
// outage a schedule.Store should bridge). A publish that finds the slot's
// message already settled (ErrDuplicateGone) has nothing left to do and
// returns nil: the slot was published. Any other error fails the fire,
// which the scheduler retries.
func SchedulePublish[T any](b *Bus, topic string, payload func(schedule.Fire) T, opts ...PublishOption) schedule.Job {
	return func(ctx context.Context, f schedule.Fire) error {
		_, err := Publish(ctx, b, topic, payload(f), append(opts[:len(opts):len(opts)], WithDedupID(f.DedupID))...)
		if errors.Is(err, ErrDuplicateGone) {
			return nil
		}
		return err
	}
}
