package backend

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/lease"
)

// The optional methods a source of a worker pool (poller.Source) may have,
// which the pool looks for. A *broker.Subscription has the first five;
// a JetStream subscription is a Remote.

// Rejecter is implemented by a source that can dead-letter a message at
// once. The pool uses it for poller.GiveUp; without it, a given-up message
// is failed (Fail).
type Rejecter interface {
	Reject(id lease.ID, cause error) error
}

// BatchAcker is implemented by a source that can ack many leases in one
// call: AckBatch acks each lease as Ack would and returns nil when all
// were acked, a *queue.BatchError saying which were not (Errs[i] for
// ids[i]), or any other error when it acked none. A batch pool
// (poller.NewBatch) acks the deliveries of a call that succeeded with one
// AckBatch; without it, with an Ack each.
type BatchAcker interface {
	AckBatch(ids []lease.ID) error
}

// DelayFailer is implemented by a source that can fail a lease with a
// delay of the caller's and keep the cause. The pool uses it for
// poller.RetryAfter, so that a message whose last attempt asked to be
// retried is dead-lettered with the handler's error; without it,
// RetryAfter nacks.
type DelayFailer interface {
	FailAfter(id lease.ID, delay time.Duration, cause error) error
}

// DelayReleaser is implemented by a source that can hand a message back
// without spending its attempt and keep it out of sight for a delay: the
// next delivery comes no sooner than delay from now, with the same
// Attempt. The pool uses it for poller.SlowDown; without it, SlowDown
// nacks, spending the attempt.
type DelayReleaser interface {
	ReleaseAfter(id lease.ID, delay time.Duration) error
}

// IdleAwaiter is implemented by a source that can tell when it holds
// nothing: AwaitIdle blocks until no message is visible, delayed, held
// back or in flight, returning nil then, ctx's error if ctx ends first, or
// an error matching queue.ErrClosed if the source closes.
// poller.RunUntilIdle needs it.
type IdleAwaiter interface {
	AwaitIdle(ctx context.Context) error
}

// Clocked is implemented by a source that reads an injected clock (its
// deadlines and timers) and is not a *broker.Subscription, which reports
// its clock through its Config. A pool over it reads the same clock unless
// poller.WithClock names one, so a test that moves a mock clock moves
// both.
type Clocked interface {
	Clock() clock.Clock
}

// Remote is implemented by a source whose Poll is a round trip to a
// server, such as a JetStream subscription, and reports true for it. A
// pool over such a source leases, by default, two batches beyond its
// workers (see poller.WithMaxOutstanding), so that the next Poll's round
// trip runs while the workers handle what the last ones brought, rather
// than after. A wrapper of a source should report what its source does; a
// source that is not a Remote counts as in memory, where a Poll costs
// nothing worth hiding.
type Remote interface {
	Remote() bool
}
