// Package sqsleasebus runs leasebus consumers over Amazon SQS: a
// Subscription is a poller.Source over one queue, so the worker pool, its
// handlers and observers run unchanged against SQS in production and
// against leasebus's own SQS server (sqsserver/sqstest) on a mock clock in
// tests. A Publisher sends to a queue with the broker's publish options,
// as far as SQS has them.
//
// # The mapping
//
//   - Poll(ctx, n): ReceiveMessage long-polling (WithWaitTime, 20 s) for up
//     to 10; when that comes back full and n > 10, short receives for the
//     rest, all in flight at once. Attempt is ApproximateReceiveCount.
//     Deadline is the visibility timeout (WithVisibilityTimeout, else the
//     queue's) from when the receive was sent, on the injected clock
//     (WithClock), so it never outlasts the server's. MaxAttempts is the
//     queue's RedrivePolicy maxReceiveCount, read at Subscribe and again
//     every WithAttributeRefresh.
//   - Ack: DeleteMessage; Acks made while another's delete is in flight
//     go together in one DeleteMessageBatch, each with its own result.
//     Extend: ChangeMessageVisibility. Nack(id, d):
//     ChangeMessageVisibility(d). Fail: the retry policy's delay
//     (WithRetry). Release: visibility 0.
//   - Reject, and Fail on the last attempt: the message is moved to the
//     queue's dead-letter queue by this package (SendMessage there, then
//     DeleteMessage here), with why, after how many attempts and the last
//     error in one message attribute, so that DeadLetters reports them as
//     the broker's store does. A last attempt whose lease expires is moved
//     the same way when its deadline passes on the clock, with "lease
//     expired" as its error, while the Subscription runs; otherwise SQS
//     moves it itself at the next receive past maxReceiveCount, and then
//     no reason or error travels with it.
//   - PollFor (the pool's seam): a pool that would hold a lease longer
//     than the visibility timeout asks for that lease at the receive (up
//     to SQS's 12 hours), so it need not extend it.
//
// # What SQS cannot promise, and what this package does about it
//
//   - Every receive counts. Release and Nack cannot give an attempt back
//     (the broker's Release spends none): the next delivery's Attempt is
//     one more, and a released last attempt is dead-lettered at the next
//     receive.
//   - Attempts are approximate: ApproximateReceiveCount is SQS's, and a
//     receive whose response was lost (a timeout, a Poll cancelled while
//     its receive was out) counts one that no handler saw. That message
//     is invisible until its visibility timeout passes.
//   - Stale receipts: SQS accepts a DeleteMessage with an old receipt
//     handle of a standard queue, and deletes the message unless it has
//     been received again since. The package tracks each lease per handle
//     it issued: an Ack of a lease this Subscription has seen superseded
//     (the message came back to it) is refused with queue.ErrLeaseExpired
//     and deletes nothing, and a late Ack (after the deadline, not
//     received again) deletes the message, as the broker's late Ack does.
//     Two Subscriptions (or processes) cannot see each other's receipts:
//     a late Ack on one may delete a message the other has just received.
//     A FIFO queue's receipt expires with its visibility timeout.
//   - No priorities, no TTL per message, no ordering key on a standard
//     queue, no dedup on a standard queue, no delay per message on a FIFO
//     queue: the publish options that ask for one fail with an error
//     matching ErrUnsupported that says so.
//   - Transient errors (throttling, 5xx, a dropped connection) are retried
//     by the client's retryer, with its backoff: give the *sqs.Client the
//     SDK's standard retryer (its default) in production. A Poll that
//     still fails returns the error, and a pool backs off and polls again.
//   - Queues are configured, not created: Subscribe refuses a missing
//     queue (ErrQueueNotFound), one the credentials may not read
//     (ErrAccessDenied) and one whose attributes contradict the options
//     (ErrMisconfigured), each as a *QueueError.
//
// # Tests
//
// sqstest.Start gives a server on a mock clock and a client for it; pass
// its Clock to WithClock, and a pool over the Subscription reads the same
// clock (backend.Clocked). The conformance suite poller/sourcetest runs
// against it in this module's tests, with what SQS cannot do skipped by
// name.
//
// A pool counts its Poll at rest once the receive is sent (it cannot see
// the server), so before moving the mock clock, wait for the pool
// (poller's AwaitQuiet) and for the server to hold the receive
// (sqstest's AwaitParked). Move it by at most the receive's wait (20 s)
// at a time while a long poll is out: a receive that a move ends sends
// the next while the mock is still moving, and that one's wait could be
// armed from a time the move has already passed.
package sqsleasebus
