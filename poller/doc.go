// Package poller runs a pool of workers over a pull-based source: it
// polls deliveries, runs a handler on each, settles every lease by the
// handler's result, keeps the leases it holds alive while their handlers
// run, and drains gracefully when asked to stop.
//
// The source is a small interface, Source, that a *broker.Subscription
// satisfies, and that another backend (a remote one
// handing out its own lease IDs) can satisfy too. The poller imports
// neither the broker nor any backend.
//
//	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[Order]) error {
//		return ship(ctx, d.Payload)
//	}, poller.WithWorkers(8))
//	...
//	err = p.Run(ctx) // until ctx is done; then drains
//
// A batch program that stops when the work is done runs RunUntilIdle
// instead: it returns nil once the source holds nothing (visible,
// delayed, in flight or held back), after the same drain.
//
// # Results
//
// A handler's result settles its lease:
//
//   - nil: Ack.
//   - an error made by RetryAfter(d, err): FailAfter(id, d, err) (Nack(id, d)
//     on a source without FailAfter), redelivered after d.
//   - an error made by GiveUp(err): Reject(id, err) if the source
//     implements backend.Rejecter (dead-lettered at once), else Fail(id, err).
//   - any other error: Fail(id, err): the source's retry policy picks the
//     delay, and the dead letter keeps the last error.
//   - a panic: recovered, counted, and settled as Fail with a *PanicError.
//
// A failure on the message's last attempt (Delivery.Attempt ==
// Delivery.MaxAttempts) dead-letters it at the source: the poller reports
// it as OutcomeDeadLettered and counts it in Stats.DeadLettered, not as a
// retry.
//
// An error from the settling call itself (say queue.ErrLeaseExpired,
// because the lease lapsed and the message went to another consumer) is
// counted in Stats.Errors, logged and reported to the observer; it never
// stops the poller. Wrap the handler with Idempotent to ack duplicates
// without running it twice.
//
// # Concurrency and flow control
//
// At most WithWorkers handlers run at once (default 1). The poller never
// holds more than WithMaxOutstanding leases waiting for or running a
// handler (default: the number of workers), and one Poll asks for at most
// WithBatch messages (default: the number of workers) and never for more
// than there is room for. By default, then, the poller leases a message
// only when a worker is free to start it, so nothing waits in a local
// buffer for a handler while its lease runs out. A MaxOutstanding above
// the worker count prefetches: the extra messages wait for a worker with
// their leases kept, and a drain releases them unspent. Over a remote
// source (backend.Remote, such as a JetStream subscription), where every
// Poll is a round trip, the default prefetches two batches, so that
// workers do not wait for that round trip between one message and the
// next (see WithMaxOutstanding).
//
// A lease whose handler has returned and whose message is leaving the
// source — the Ack of a success, the Reject of a GiveUp, the Fail of a
// last attempt — no longer takes room: the poll for the next message
// runs while that call does, so on a remote source (where each is a round
// trip) a worker does not pay a Poll and an Ack one after the other for
// every message. What such a poll leases waits at most for one worker's
// settling call, never for a handler. A failure that sends the message
// back to the source (Nack, Fail) is settled before its room is free, so
// that the next poll sees the message in its place.
//
// WithRate paces the pool's handler starts with a token bucket on its
// clock: it leases only what it may start, so while it waits for a token
// it holds no lease. A handler that meets an overloaded dependency (an
// HTTP 429) returns SlowDown(d, err): its message goes back with its
// attempt kept (on a backend.DelayReleaser), and the pool starts nothing
// until d has passed. Limits that every consumer of a subscription shares
// are the subscription's own (broker.WithRateLimit and its kin).
//
// # Lease extension
//
// While the poller holds a lease, waiting or running, it keeps it from
// lapsing, up to a limit (WithExtension; one hour after receipt by
// default, as Cloud Pub/Sub's MaxExtension). Past the limit the lease
// lapses, so that a handler stuck for good lets its message go, to be
// redelivered with its attempt count raised. A late Ack from that handler
// still succeeds if the message has not been delivered again, and
// otherwise changes nothing. How the lease is kept depends on the source:
//
//   - A source that takes the pool's request (backend.PoolPoller, as a
//     *broker.Subscription does) leases for the whole limit at once, when
//     that is longer than its visibility timeout: the poller asks for it
//     in PollRequest.Hold. Nothing is extended and no timer keeps the lease: it
//     holds, however far a mock clock jumps in one Add, until the handler
//     settles it or the limit passes. Such a lease lives in the poller's
//     own process, so a process that dies takes it with it (an in-memory
//     queue is gone; a durable broker's reopen keeps no lease, so the
//     message is visible again at once).
//   - Any other source, a remote one, is leased for its visibility
//     timeout, and the poller extends the lease before it lapses: when
//     the clock reaches the deadline less a margin (a fifth of the lease
//     by default), by the lease's original length. One goroutine with one
//     timer, set for the earliest lease due, does all the extending. A
//     pool that dies lets its messages go after one visibility timeout.
//
// # Batches
//
// NewBatch runs a BatchHandler on up to n deliveries a call
// (WithBatchMax(n, linger)): a worker takes a first delivery, then what
// more the pool holds, and waits up to linger on the pool's clock for a
// full batch. The handler says what became of each delivery, or returns
// one error for all; each lease is then settled as a single handler's
// result would settle it. WithWorkers is how many batches run at once;
// leases, extension, limits, events and the registry count messages, as
// in a pool of single handlers. A batch still waiting to fill when the
// pool drains is released unspent.
//
// # Cancelling a job
//
// Registry.Cancel stops the running job of a message in a pool made
// WithRegistry: its handler's context ends with a cause matching
// ErrCancelled, and once the handler returns the message is settled as
// the caller chose (CancelRetry, CancelDeadLetter, CancelDelete). A
// handler that ignores its context keeps its lease until it returns.
//
// # Drain
//
// When Run's context is done the poller stops polling, releases every
// message leased but not started (Release: visible again at once, no
// attempt spent), and lets the running handlers finish, still keeping
// their leases. Their contexts are not cancelled until the drain timeout
// (WithDrainTimeout, 30s by default) passes; then they are, with cause
// ErrDrainTimeout. Run returns once every handler has returned and every
// lease is settled; no goroutine outlives it.
//
// # Ordering
//
// With one worker and a batch of one (the defaults), messages are handled
// one at a time in the order the source delivers them, which for a
// subscription is priority, then publish order (prefetching keeps that
// order: the one worker takes the buffer first in, first out). Order is
// still only the source's: a message that fails waits out its retry delay
// there, and later messages overtake it. With more workers, handlers run
// concurrently and finish in any order: the source still hands messages
// out in order, but nothing orders their starts or their effects. When
// order matters per key, publish with ordering keys (broker.WithKey): a
// subscription keeps at most one message of a key in flight, so any
// number of workers handles each key in order.
//
// # Time
//
// Every timer — lease extension, handler timeout, drain timeout, backoff
// after a failed Poll — runs on the poller's clock, and only through
// clock.Now, clock.AfterFunc and Timer.Stop (never a channel timer, which
// can deadlock the mock), so a test can drive the poller
// with clock.NewMock. The clock must be the source's: lease deadlines are
// read on it. By default the poller takes the source's clock when the
// source reports one (a *broker.Subscription does), else the real clock.
//
// On a mock clock, what a pool over a backend.PoolPoller (a
// subscription) does depends only on
// the order of the test's calls, never on when a goroutine runs, provided
// the test waits for the pool to come to rest (AwaitQuiet) before each
// Add: a lease is held to the limit without a timer (see Lease
// extension); a handler's timeout is armed before the handler starts, so
// the Add that reaches it cancels its context; a Poll, the backoff after
// a failed one, and the drain arm their wake-ups before the pool counts as
// at rest. A mock's AfterFunc runs its func in a goroutine of its own, so
// what an Add sets off is done some moments after Add returns:
// AwaitQuiet, again, waits for it. A source says when its Poll is parked
// through the seam of package backend (PoolPoller marks a
// backend.Parking, PoolIdleAwaiter the same for RunUntilIdle's wait);
// over a source that does not (a remote one), a Poll counts as at rest as
// soon as it is called, and the source's own timers are its own.
//
// # Observing
//
// Stats counts what the poller did. WithObserver receives every outcome
// (acked, retried, dead-lettered, released, extended, extension stopped:
// a held lease is never extended, and its extension stops when it lapses)
// with its delivery and errors, outside any lock; WithLogger logs source
// errors and panics.
package poller
