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
