package backend

import (
	"context"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// The optional methods a source of a worker pool (poller.Source) may have,
// which the pool looks for. A *broker.Subscription has all three.

// Rejecter is implemented by a source that can dead-letter a message at
// once. The pool uses it for poller.GiveUp; without it, a given-up message
// is failed (Fail).
type Rejecter interface {
	Reject(id lease.ID, cause error) error
}

// DelayFailer is implemented by a source that can fail a lease with a
// delay of the caller's and keep the cause. The pool uses it for
// poller.RetryAfter, so that a message whose last attempt asked to be
// retried is dead-lettered with the handler's error; without it,
// RetryAfter nacks.
type DelayFailer interface {
	FailAfter(id lease.ID, delay time.Duration, cause error) error
}

// IdleAwaiter is implemented by a source that can tell when it holds
// nothing: AwaitIdle blocks until no message is visible, delayed, held
// back or in flight, returning nil then, ctx's error if ctx ends first, or
// an error matching queue.ErrClosed if the source closes.
// poller.RunUntilIdle needs it.
type IdleAwaiter interface {
	AwaitIdle(ctx context.Context) error
}
