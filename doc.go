// Package leasebus is an embeddable publish/subscribe broker whose
// subscriptions are pulled, SQS-style.
//
// Publishers fan out to topics; every subscription has its own bounded
// queue. A consumer leases messages with Poll, works at its own pace and
// settles each lease with Ack (done), Nack (failed, retry after a delay),
// Fail (failed with an error, retry after the subscription's backoff),
// Extend (more time) or Release (not started, no attempt spent). A lease
// that is not settled before its deadline expires and the message is
// delivered again with its attempt count raised; a message that fails its
// last allowed attempt is dead-lettered with the reason and the last error,
// and can be redriven.
//
// The packages:
//
//   - [github.com/leasebus/leasebus/broker]: topics, subscriptions,
//     publish, dead letters, redrive. Start here.
//   - [github.com/leasebus/leasebus/queue]: the vocabulary: the value
//     types (Message, Delivery, DeadLetter, Stats, Config), policies,
//     errors and the Deduper for idempotent consumers.
//   - [github.com/leasebus/leasebus/lease]: lease IDs (receipts).
//   - [github.com/leasebus/leasebus/poller]: a worker pool that polls,
//     extends leases while handlers run, and drains gracefully.
//   - [github.com/leasebus/leasebus/broker/brokertest]: test helpers on a
//     mock clock.
//
// # Delivery semantics
//
// At-least-once with respect to consumer failure: a message is delivered
// until it is acked or dead-lettered, so a consumer can see it twice (its
// lease expired while it worked, or it crashed after the side effect and
// before Ack). Make consumers idempotent, for example with poller.Deduper.
// A broker from broker.New lives in memory: a process crash loses what is
// queued and in flight. broker.Open keeps one in a directory instead, and
// opening it again after a crash brings back every message whose Publish
// returned nil and that was not acked, with its attempts (see broker.Open
// for what each SyncMode promises).
//
// Each subscription delivers by priority, then publish order; a message
// that comes back (expiry, Nack, backoff, redrive) keeps its place. With
// more than one consumer, or a batch being worked on concurrently, the
// order in which work finishes is up to the consumers.
//
// A subscription can pace what it hands out, for all its consumers at
// once, decided where a Poll picks: a rate limit (broker.WithRateLimit),
// one per ordering key (WithKeyRateLimit), how many of a key are out at
// once (WithKeyConcurrency; 1 by default: a key's messages in order), and
// turns between keys (WithFairKeys). A message a limit holds back stays
// visible, unleased, and spends no attempt. A pool paces itself over any
// source with poller.WithRate, and a handler told to slow down (a 429)
// returns poller.SlowDown.
//
// Every delivery carries a fresh lease ID. A lease is current until its
// message is settled or delivered again. Ack of a current lease deletes the
// message even after the deadline (a late ack saves a duplicate and loses
// nothing). Nack, Fail, Extend and Release need the deadline not to have
// passed. A call on a lease that is no longer current returns
// queue.ErrLeaseExpired when the subscription still holds the message, and
// queue.ErrLeaseNotFound when it does not (acked, dead-lettered, never
// issued here): both mean the call changed nothing.
//
// MaxAttempts (default 5) bounds deliveries: a lease that expires, or a
// Nack or Fail, on the last allowed attempt dead-letters the message at
// once. An expired lease is visible again at once (the visibility timeout
// was the wait); Fail waits the subscription's RetryPolicy delay; Nack
// names its delay.
//
// Queues are bounded (MaxQueue, default 100,000). A full subscription
// dead-letters the newcomer by default (reason Overflow); reject, block and
// drop-oldest are options. Every accepted message ends acked,
// dead-lettered, or counted as dropped by a policy the user chose; Stats
// shows the balance. The dead-letter store is bounded too and counts what
// it drops.
//
// # Concurrency
//
// Everything is safe for concurrent use. Publish snapshots the topic's
// subscriptions under the broker's lock and offers to each outside it;
// each subscription has its own lock. No lock is held while user code
// runs, with one exception: a subscription filter runs in the publisher's
// goroutine (with no lock held, but on the publish path), so keep it fast.
// A consumer may Unsubscribe, DeleteTopic or Close from inside its own
// processing.
//
// Close (of the broker, or the removal of a topic or subscription) wakes
// every blocked Poll with queue.ErrClosed; every later call returns it too.
// Close is idempotent. No goroutine of the broker outlives Close: the
// broker starts none; Poll waits in the caller's goroutine.
//
// # Time
//
// Every time read and timer goes through the broker's clock
// (broker.WithClock), github.com/benbjohnson/clock: the real clock by
// default, clock.NewMock() in tests. Only Now, AfterFunc and Timer.Stop
// are used: a wake-up is an AfterFunc whose func never blocks, because the
// mock (v1.3.5) can tick one channel timer twice when Add races the arming
// of another, and the second tick then blocks forever holding the mock's
// lock. Expiry is lazy: each call first settles everything due at Now, so
// TryPoll, Stats or DeadLetters right after a mock's Add is exact, with no
// goroutine involved. Ack (and AckBatch) is the exception that changes no
// outcome: it reads the clock only when the time can change its own
// result (a lease on its last attempt, whose expiry dead-letters the
// message; a message with an ordering key or a TTL), and otherwise leaves
// what is due to the next call that reads the clock, so a dead letter's At
// is when such a call noticed it. Publish is the other: when what is due
// cannot change where its message goes, it leaves that, at its own time,
// to the next call that reads state, so a publisher never waits for a
// million expiries it happened to find. A blocked Poll sleeps on one timer for the earliest
// future event (a lease deadline or a delayed message) and on a broadcast
// for publishes, nacks and close. Subscription.AwaitParked waits until n
// Polls are asleep on the clock (a poller's pool parks one Poll for all its
// idle workers: Poller.AwaitQuiet waits for the pool), so a test can move
// the mock knowing whom it will wake;
// AwaitIdle also wakes for the next event that falls due. The broker also
// runs unchanged inside testing/synctest with the real clock.
//
// What is deterministic on a mock clock: the outcome of a sequence of calls
// on a subscription, whatever the goroutines do, because every outcome
// there is decided from the clock's reading by the call that reads it
// (expiry, delays, TTLs, backoff), and the result of each call is exact
// right after an Add. A timer's func runs in a goroutine the mock starts,
// after a real millisecond's sleep, so nothing may depend on when it runs:
// it only wakes someone who reads Now and decides. A timer must also be
// armed before the Add that should fire it: armed by another goroutine
// during an Add, after the mock has looked for due timers and before it
// moves its time, it fires only at the next move. So a poller's handler
// timeout is armed before the handler starts, and a pool over a
// subscription holds each lease for its whole extension allowance
// (poller.WithExtension) instead of extending it on a timer: one Add may jump
// any distance short of the limit and the lease stays with its handler.
// Poller.AwaitQuiet waits until a pool is at rest (every worker waiting for
// work or in a handler, the pool's one Poll parked, no timer of its own due
// and unserved), so that what the next Add does depends only on what the
// test did before. Not deterministic: two goroutines moving the same mock
// at once (the mock's own behaviour: steps are lost); a handler's own
// timing (it is the test's code: wait for its outcome, not for time); and
// the lease extensions of a pool over a remote source, whose timer races
// an Add that passes an extension point unless the test waits with
// AwaitQuiet first.
package leasebus
