package leasebuspubsub

import (
	"context"
	"errors"
	"reflect"

	"gocloud.dev/gcerrors"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// ErrNacked is the cause a gocloud Nack reports: Nack is Fail(id,
// ErrNacked), so a message nacked on its last attempt is dead-lettered
// with LastError == ErrNacked.Error().
var ErrNacked = errors.New("leasebuspubsub: nacked")

// ErrRegistered: Register found Scheme already registered on the mux,
// for topics or for subscriptions. Nothing was registered.
var ErrRegistered = errors.New("leasebuspubsub: scheme already registered")

// errSubscriptionClosed is what ReceiveBatch returns once Close has run
// (gocloud never calls it then; a call racing Close may).
var errSubscriptionClosed = errors.New("leasebuspubsub: subscription closed")

// errorCode maps the errors of leasebus to gcerrors codes. The first
// match wins, in this order.
func errorCode(err error) gcerrors.ErrorCode {
	switch {
	case err == nil:
		return gcerrors.OK
	case errors.Is(err, context.Canceled):
		return gcerrors.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return gcerrors.DeadlineExceeded
	case errors.Is(err, broker.ErrTopicNotFound),
		errors.Is(err, broker.ErrSubscriptionNotFound),
		errors.Is(err, queue.ErrLeaseNotFound):
		return gcerrors.NotFound
	case errors.Is(err, broker.ErrAlreadySubscribed), errors.Is(err, ErrRegistered):
		return gcerrors.AlreadyExists
	case errors.Is(err, queue.ErrInvalidArgument):
		return gcerrors.InvalidArgument
	case errors.Is(err, queue.ErrQueueFull), errors.Is(err, broker.ErrDedupFull):
		return gcerrors.ResourceExhausted
	case errors.Is(err, queue.ErrClosed),
		errors.Is(err, errSubscriptionClosed),
		errors.Is(err, queue.ErrLeaseExpired),
		errors.Is(err, broker.ErrLocked):
		return gcerrors.FailedPrecondition
	case errors.Is(err, broker.ErrCorrupt):
		return gcerrors.Internal
	}
	return gcerrors.Unknown
}

var errorType = reflect.TypeFor[error]()

// errorAs is errors.As for a target it can fill: a non-nil pointer to an
// interface or to a type that implements error. For any other target it
// returns false where errors.As would panic.
func errorAs(err error, target any) bool {
	if err == nil || target == nil {
		return false
	}
	v := reflect.ValueOf(target)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	if e := v.Type().Elem(); e.Kind() != reflect.Interface && !e.Implements(errorType) {
		return false
	}
	return errors.As(err, target)
}
