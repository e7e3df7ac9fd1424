package queue

import (
	"errors"
	"fmt"
)

// Errors returned by this package (wrapped with context; match them with
// errors.Is). ErrLeaseExpired and ErrLeaseNotFound both mean "this call
// changed nothing".
var (
	// ErrLeaseExpired: the lease is no longer current but the subscription
	// still holds its message — it was delivered again (a new holder owns
	// it), it is waiting to be, or (for Nack, Extend, Fail, Release, Reject)
	// its deadline has passed.
	ErrLeaseExpired = errors.New("queue: lease expired")

	// ErrLeaseNotFound: the lease was never issued by this subscription, or
	// its message is gone (acked, dead-lettered, dropped or purged). A
	// second Ack of the same lease returns it.
	ErrLeaseNotFound = errors.New("queue: lease not found")

	// ErrClosed: the queue (or its subscription, topic or broker) is closed.
	ErrClosed = errors.New("queue: closed")
	// ErrMessageNotFound: the subscription holds no message with the ID
	// given (it was settled, dead-lettered or dropped, or never held).
	ErrMessageNotFound = errors.New("queue: message not found")

	// ErrTopicNotFound: no topic (or stream, or queue) has the name given.
	// Every backend returns it for a publish or subscribe to a topic that
	// does not exist; it is not a refusal for good, since one may be made.
	ErrTopicNotFound = errors.New("queue: topic not found")

	// ErrSubscriptionNotFound: the topic has no subscription of the name
	// given.
	ErrSubscriptionNotFound = errors.New("queue: subscription not found")

	// ErrQueueFull: the subscription holds MaxQueue messages and its
	// overflow policy refused a new one (OverflowReject, or OverflowBlock
	// when the publisher's context ended first), or a redrive found it
	// full. The error is a *FullError, which says which subscription.
	ErrQueueFull = errors.New("queue: full")

	// ErrInvalidArgument: an argument is out of range; the error's text
	// says which.
	ErrInvalidArgument = errors.New("queue: invalid argument")
)

// FullError is a full subscription's refusal of a message: errors.As gives
// the subscription and its limit, and it matches ErrQueueFull (and, for
// OverflowBlock, the context error that ended the wait).
type FullError struct {
	Subscription string // the subscription's (queue's) name
	Limit        int    // its MaxQueue
	Err          error  // why a blocked publisher stopped waiting (OverflowBlock), or nil
}

// Error names the subscription and its limit.
func (e *FullError) Error() string {
	msg := fmt.Sprintf("subscription %q: %v (%d messages)", e.Subscription, ErrQueueFull, e.Limit)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrQueueFull and, if set, Err.
func (e *FullError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrQueueFull, e.Err}
	}
	return []error{ErrQueueFull}
}

// invalid returns an error matching ErrInvalidArgument that names what is
// wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// PanicError is the error user code's panic turns into where leasebus runs
// it and goes on: a worker pool's handler (the message is failed, so it is
// retried and, when its attempts run out, dead-lettered with the panic
// value in its LastError), a schedule's job (the fire fails and is
// retried).
type PanicError struct {
	Value any    // what the code panicked with
	Stack []byte // its goroutine's stack at the panic
}

// Error returns "handler panicked: " and the panic value. The stack is not
// included; a logger records it.
func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Unwrap returns the panic value if it is an error, so errors.Is and
// errors.As see through a panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// BatchError is the error of a call on many leases at once (a
// subscription's AckBatch) that did not succeed for all of them: Errs has
// one entry per lease of the call, in its order, nil where that lease's
// part succeeded. errors.Is and errors.As see each of its errors, so
// errors.Is(err, ErrLeaseNotFound) reports whether any lease was not
// found. A batch call that fails as a whole (a closed subscription)
// returns its error alone, not a BatchError: then no lease's part was
// done.
type BatchError struct {
	Errs []error
}

// NewBatchError returns nil if every error in errs is nil, and otherwise
// a *BatchError holding errs (not copied).
func NewBatchError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &BatchError{Errs: errs}
		}
	}
	return nil
}

// Error says how many of the batch's leases failed, and each failure.
func (e *BatchError) Error() string {
	failed := e.Unwrap()
	msg := fmt.Sprintf("%d of %d in the batch failed", len(failed), len(e.Errs))
	for _, err := range failed {
		msg += "; " + err.Error()
	}
	return msg
}

// Unwrap returns the errors of the leases that failed.
func (e *BatchError) Unwrap() []error {
	var failed []error
	for _, err := range e.Errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	return failed
}
