package broker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// A Subscription meets a worker pool through the declared seam.
var (
	_ backend.PoolPoller[int] = (*Subscription[int])(nil)
	_ backend.PoolIdleAwaiter = (*Subscription[int])(nil)
)

// Subscription is one named subscription to a topic: a bounded queue of
// its own that consumers pull from. Competing consumers share one
// Subscription (from Subscribe or Broker.Subscription) and each message
// goes to one of them at a time; separate subscriptions each get every
// message. It is safe for concurrent use.
//
// Every method returns an error matching queue.ErrClosed once the
// subscription is unsubscribed, its topic deleted or its broker closed.
type Subscription[T any] struct {
	q      *core.Queue[T]
	b      *Broker[T] // its broker, for Forward
	topic  string
	name   string
	filter atomic.Pointer[func(queue.Message[T]) bool] // nil: accept all
	dlq    atomic.Pointer[string]                      // the dead-letter topic; nil: the broker's store

	// A durable broker's bookkeeping, under Broker.mu.
	jid       uint32  // its id in the journal
	spec      subSpec // the options the journal has for it
	recovered bool    // recovered by Open and not declared again yet
}

// accepts reports whether the subscription's filter takes m.
func (s *Subscription[T]) accepts(m *queue.Message[T]) bool {
	f := s.filter.Load()
	return f == nil || (*f)(*m)
}

// Topic returns the topic (or wildcard pattern) the subscription is on.
func (s *Subscription[T]) Topic() string { return s.topic }

// Name returns the subscription's name.
func (s *Subscription[T]) Name() string { return s.name }

// Config returns the subscription's queue configuration, defaults filled in.
func (s *Subscription[T]) Config() queue.Config { return s.q.Config() }

// Poll leases up to n visible messages, blocking until at least one is
// visible, ctx is done (its error, nothing leased) or the subscription
// closes (queue.ErrClosed). It never returns more than n, nor more than
// the in-flight cap allows. Each delivery has a fresh lease, its Attempt
// (1 on first delivery) and its Deadline. n < 1 is an invalid argument.
func (s *Subscription[T]) Poll(ctx context.Context, n int) ([]queue.Delivery[T], error) {
	return s.q.Poll(ctx, n)
}

// PollWithVisibility is Poll with this call's own visibility timeout in
// place of the subscription's (SQS ReceiveMessage's VisibilityTimeout).
func (s *Subscription[T]) PollWithVisibility(ctx context.Context, n int, visibility time.Duration) ([]queue.Delivery[T], error) {
	return s.q.PollWithVisibility(ctx, n, visibility)
}

// PollInto is Poll into the caller's buffer: up to len(dst) deliveries,
// returning how many. A worker that reuses its buffer allocates nothing.
func (s *Subscription[T]) PollInto(ctx context.Context, dst []queue.Delivery[T]) (int, error) {
	return s.q.PollInto(ctx, dst)
}

// PollFor is Poll as a worker pool asks for it (backend.PoolPoller), for
// package poller and pools like it: at most req.Max deliveries, leased
// for req.Hold where that is longer than the visibility timeout (held
// reports it), with req.Parking marked while the Poll is parked, exactly:
// the publish or settle that wakes it unparks it before it returns.
// req.Max < 1 or req.Hold < 0 is an error matching
// queue.ErrInvalidArgument.
func (s *Subscription[T]) PollFor(ctx context.Context, req backend.PollRequest[T]) (ds []queue.Delivery[T], held bool, err error) {
	return s.q.PollFor(ctx, req)
}

// TryPoll is Poll that never blocks: what is visible now, up to n, or
// nothing (also for n < 1 or after close; TryPollInto reports those).
func (s *Subscription[T]) TryPoll(n int) []queue.Delivery[T] { return s.q.TryPoll(n) }

// TryPollInto is PollInto that never blocks.
func (s *Subscription[T]) TryPollInto(dst []queue.Delivery[T]) (int, error) {
	return s.q.TryPollInto(dst)
}

// Ack deletes the leased message. It succeeds even after the deadline, as
// long as the message has not been delivered again (a late ack saves a
// duplicate and loses nothing). A lease whose message was delivered again
// is queue.ErrLeaseExpired; one never issued here, or already acked,
// dead-lettered or purged, is queue.ErrLeaseNotFound. Both change nothing.
func (s *Subscription[T]) Ack(id lease.ID) error { return s.q.Ack(id) }

// AckBatch acks many leases under one lock, each as Ack would, and on a
// durable broker in one journal write. It returns nil when every lease was
// acked; else a *queue.BatchError whose Errs[i] is ids[i]'s error (nil for
// those acked), or, when the subscription is closed, that error alone
// (none acked). An empty ids is nil.
func (s *Subscription[T]) AckBatch(ids []lease.ID) error { return s.q.AckBatch(ids) }

// Nack reports a failed attempt: the message is visible again after delay
// (0: at once), or dead-lettered if that was its last attempt.
func (s *Subscription[T]) Nack(id lease.ID, delay time.Duration) error { return s.q.Nack(id, delay) }

// Fail reports a failed attempt with its cause: the message waits the
// subscription's RetryPolicy delay, or is dead-lettered if that was its
// last attempt; the dead letter keeps cause as LastError (its first 4 KiB).
func (s *Subscription[T]) Fail(id lease.ID, cause error) error { return s.q.Fail(id, cause) }

// Reject gives up on the message: it is dead-lettered at once with
// reason queue.ReasonRejected and cause as LastError.
func (s *Subscription[T]) Reject(id lease.ID, cause error) error { return s.q.Reject(id, cause) }

// FailAfter is Fail with its own delay instead of the RetryPolicy's: the
// message is visible again after delay (0: at once), and cause is kept for
// the dead letter, which the last allowed attempt becomes at once. delay
// must be >= 0. It is what poller.RetryAfter settles with.
func (s *Subscription[T]) FailAfter(id lease.ID, delay time.Duration, cause error) error {
	return s.q.FailAfter(id, delay, cause)
}

// ReleaseAfter is Release with a delay: the lease's message gives its
// attempt back and is visible again after delay (0: at once), on the
// broker's clock (backend.DelayReleaser, for poller.SlowDown). delay must
// be >= 0. On a durable broker a crash before the delay has passed may
// make the message visible at once after the restart.
func (s *Subscription[T]) ReleaseAfter(id lease.ID, delay time.Duration) error {
	return s.q.ReleaseAfter(id, delay)
}

// Extend sets the lease's deadline to now + timeout (SQS
// ChangeMessageVisibility). The lease must still be live.
func (s *Subscription[T]) Extend(id lease.ID, timeout time.Duration) error {
	return s.q.Extend(id, timeout)
}

// Release hands the message back unprocessed: visible at once, the
// attempt not spent.
func (s *Subscription[T]) Release(id lease.ID) error { return s.q.Release(id) }

// Purge drops every message the subscription holds, in flight included
// (SQS PurgeQueue), counting them as Stats.Dropped, and returns how many.
func (s *Subscription[T]) Purge() (int, error) { return s.q.Purge() }

// Stats returns a snapshot of the subscription's queue.
func (s *Subscription[T]) Stats() queue.Stats { return s.q.Stats() }

// Peek returns the messages the subscription holds that q selects, in Seq
// (arrival) order, with where each waits, its attempts and its last
// error, leasing and changing nothing: what a console or a test shows
// without disturbing consumers. It reads the whole queue once, in chunks
// that each hold the queue's lock briefly, so a message that moves during
// the call shows as it was when its chunk was read. A q out of range is
// queue.ErrInvalidArgument; after close, queue.ErrClosed.
func (s *Subscription[T]) Peek(q queue.PeekQuery) ([]queue.Held[T], error) {
	return s.q.Peek(q)
}

// DeleteMessages drops the messages with the IDs given that the
// subscription holds, wherever each waits (visible, delayed, held back
// behind its key, in flight: its consumer's Ack then returns
// queue.ErrLeaseNotFound), counting each as Stats.Dropped, and returns how
// many; the next message of an ordering key gets its turn. Only this
// subscription's copies go. An ID it does not hold is an error matching
// queue.ErrMessageNotFound (the others are dropped all the same). A
// durable broker records it. It finds them with one pass over the queue,
// in chunks, as Peek does. After close, queue.ErrClosed.
func (s *Subscription[T]) DeleteMessages(ids ...uuid.UUID) (int, error) {
	return s.q.DeleteMessages(ids...)
}

// MakeVisible makes the delayed messages with the IDs given (waiting out
// a publish delay or a retry's backoff) visible now, each in its place, as
// SQS's ChangeMessageVisibility to 0, and returns how many. One visible
// already is left as it is; one in flight or held back behind its key is
// an error matching queue.ErrInvalidArgument, and an ID the subscription
// does not hold one matching queue.ErrMessageNotFound (the others are made
// visible all the same). A durable broker records it. After close,
// queue.ErrClosed.
func (s *Subscription[T]) MakeVisible(ids ...uuid.UUID) (int, error) {
	return s.q.MakeVisible(ids...)
}

// EditPayload replaces the payload of the message with ID id that the
// subscription holds: it keeps its ID, place, attempts, key, headers and
// state, and its next delivery carries the new payload (a consumer that
// holds it in flight keeps the old one). Only this subscription's copy
// changes. A durable broker records it. A message the subscription does
// not hold is queue.ErrMessageNotFound; after close, queue.ErrClosed.
func (s *Subscription[T]) EditPayload(id uuid.UUID, payload T) error {
	return s.q.EditPayload(id, payload)
}

// Pause stops deliveries until Resume: Polls wait and TryPoll finds
// nothing, while the subscription goes on accepting messages, leases in
// flight can still be settled and expire, and Stats.Paused is true. A
// durable broker records it: the subscription is still paused when the
// directory is opened again. Pausing twice changes nothing; after close,
// queue.ErrClosed.
func (s *Subscription[T]) Pause() error { return s.q.Pause() }

// Resume ends a Pause and wakes the Polls waiting on the subscription.
// Resuming one that is not paused changes nothing; after close,
// queue.ErrClosed.
func (s *Subscription[T]) Resume() error { return s.q.Resume() }

// AwaitParked blocks until at least n Polls on the subscription are
// parked with their wake-up timers armed. Call it before moving a mock
// clock, so the pollers the move should wake are asleep on it. It counts
// Poll calls, not consumers: a poller.Poller keeps one Poll parked for all
// its idle workers, so n is 1 for a pool, whatever its worker count.
func (s *Subscription[T]) AwaitParked(ctx context.Context, n int) error {
	return s.q.AwaitParked(ctx, n)
}

// AwaitIdle blocks until the subscription holds nothing: no message
// visible, delayed, held back or in flight. It returns nil then, ctx's
// error if ctx ends first, or an error matching queue.ErrClosed if the
// subscription closes. It wakes when the clock reaches the next thing that
// falls due (a delay, a TTL, a lease's deadline), so a subscription that
// time alone empties ends the wait; a delayed message (or a retry waiting
// out its backoff) keeps it busy until then. A batch program runs its pool
// until the work is done with poller's RunUntilIdle, which relies on this.
func (s *Subscription[T]) AwaitIdle(ctx context.Context) error { return s.q.AwaitIdle(ctx) }

// AwaitIdleFor is AwaitIdle with pk (if not nil) marked while the wait is
// parked (backend.PoolIdleAwaiter), for poller's RunUntilIdle.
func (s *Subscription[T]) AwaitIdleFor(ctx context.Context, pk *backend.Parking) error {
	return s.q.AwaitIdleFor(ctx, pk)
}
