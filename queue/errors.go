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

	// ErrQueueFull: the subscription holds MaxQueue messages and its
	// overflow policy refused a new one (OverflowReject, or OverflowBlock
	// when the publisher's context ended first).
	ErrQueueFull = errors.New("queue: full")

	// ErrInvalidArgument: an argument is out of range; the error's text
	// says which.
	ErrInvalidArgument = errors.New("queue: invalid argument")
)

// invalid returns an error matching ErrInvalidArgument that names what is
// wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// Invalid returns an error matching ErrInvalidArgument that names what is
// wrong. Packages built on queue use it so every invalid argument in
// leasebus matches the one sentinel.
func Invalid(format string, args ...any) error { return invalid(format, args...) }
