// Package backend is for authors of leasebus backends, not for their users:
// the words every backend spells alike, the argument error they all return,
// wake-ups on an injected clock that a mock cannot deadlock, and the
// optional methods a worker pool (package poller) looks for on a source.
//
// The in-memory and durable broker, the JetStream backend, the SQS server
// and the gocloud driver are built on it, so that a dead letter reads the
// same from each of them and a test that moves a mock clock wakes each of
// them alike. A backend is checked against the contract with package
// github.com/leasebus/leasebus/poller/sourcetest.
package backend

import (
	"errors"
	"fmt"

	"github.com/leasebus/leasebus/queue"
)

// Invalid returns an error matching queue.ErrInvalidArgument whose text
// says what is wrong, as every leasebus call refuses bad input:
//
//	return backend.Invalid("MaxAttempts = %d, must be >= 1", n)
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", queue.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// Permanent reports whether err refuses a publish for good: the same
// publish made again would be refused again, whatever the backend's state.
// That is an error matching queue.ErrInvalidArgument (a topic name, a
// dedup ID or a message the backend does not accept) or
// errors.ErrUnsupported (an option the backend cannot carry). A message
// its backend cannot find a topic or queue for is not: one may be made.
// The outbox's relay moves a row whose publish is refused for good aside,
// and retries any other failure in order.
func Permanent(err error) bool {
	return errors.Is(err, queue.ErrInvalidArgument) || errors.Is(err, errors.ErrUnsupported)
}
