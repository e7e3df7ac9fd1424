package otelleasebus

import (
	"context"
	"errors"
	"reflect"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// The types of the poller's directives, which wrap the handler's error.
var (
	retryAfterType = reflect.TypeOf(poller.RetryAfter(0, nil))
	giveUpType     = reflect.TypeOf(poller.GiveUp(nil))
)

// sentinels name leasebus's errors by what they mean: they are all of one
// Go type, so the type would not tell them apart.
var sentinels = []struct {
	err  error
	name string
}{
	{queue.ErrLeaseExpired, "lease_expired"},
	{queue.ErrLeaseNotFound, "lease_not_found"},
	{queue.ErrClosed, "closed"},
	{queue.ErrQueueFull, "queue_full"},
	{queue.ErrInvalidArgument, "invalid_argument"},
	{poller.ErrInProgress, "in_progress"},
	{queue.ErrTopicNotFound, "topic_not_found"},
	{queue.ErrSubscriptionNotFound, "subscription_not_found"},
	{broker.ErrDedupFull, "dedup_full"},
	{context.DeadlineExceeded, "timeout"},
	{context.Canceled, "canceled"},
}

// errorType is the error.type of err: a leasebus error by its meaning
// ("lease_expired", ...), a handler's panic as "panic", a context's end as
// "timeout" or "canceled", and any other error by its Go type as the
// semantic conventions' ErrorType makes it (after taking off fmt.Errorf
// wrappers, and poller.RetryAfter's and poller.GiveUp's, which say what to
// do about the error, not what it is: "retry_after" and "give_up" when
// they wrap none).
func errorType(err error) string {
	for err != nil {
		t := reflect.TypeOf(err)
		if t != retryAfterType && t != giveUpType {
			break
		}
		inner := errors.Unwrap(err)
		if inner == nil {
			if t == retryAfterType {
				return "retry_after"
			}
			return "give_up"
		}
		err = inner
	}
	if err == nil {
		return semconv.ErrorTypeOther.Value.AsString()
	}
	var pe *poller.PanicError
	if errors.As(err, &pe) {
		return "panic"
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return semconv.ErrorType(err).Value.AsString()
}
