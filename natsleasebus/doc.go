// Package natsleasebus runs leasebus subscriptions on NATS JetStream: the
// same worker code (package poller, or a hand-written Poll/Ack loop) on a
// server that outlives the process and spreads the work over many. Its
// name leaves nats.go's own package jetstream its name, so a program
// imports both without renaming either.
//
// A Subscription[T] satisfies poller.Source[T] and backend.Rejecter, and
// passes the backend conformance suite (package poller/sourcetest), with
// the differences below declared as capabilities it lacks. The module's
// README has a table of every feature of the in-memory broker: supported,
// emulated (how) or refused (why).
//
// # Mapping
//
//   - Bus (Open, or OpenJetStream for a JetStream domain or API prefix):
//     one stream (default "LEASEBUS") with interest retention holds every
//     topic, so each subscription of a topic gets every message and a
//     message is removed once every subscription settled it; a second
//     stream ("LEASEBUS_DLQ", limits retention) holds the dead letters.
//     Open creates a missing stream and binds to an existing one as it is:
//     it never changes a setting no option names, and an option that
//     disagrees with the server (or a stream lacking the bus's subjects or
//     interest retention) makes it fail with a *ConfigMismatchError
//     (errors.Is ErrConfigMismatch) that names the setting, unless
//     WithUpdateStreams asks for the change.
//   - topic T: the subject PREFIX.topic.T (default prefix "leasebus"); a
//     dotted topic (orders.eu.created) is a subject of many tokens, and a
//     subscription's topic may be a pattern ('*' one segment, a last '>'
//     or '#' one or more): its consumer's filter.
//   - subscription S of T: the durable pull consumer "T_S", filtered on
//     T's subject and PREFIX.sub.T_S (messages for it alone), explicit ack, AckWait = the visibility timeout,
//     MaxAckPending = the in-flight cap, DeliverPolicy new (it sees what is
//     published after it exists), MaxDeliver unlimited and the maximum
//     attempts in its metadata (key "leasebus.max-attempts"): the handles enforce it.
//     Several Subscription handles on one durable compete for its
//     messages. Subscribe binds to an existing durable as it is and takes
//     its settings from the server; an explicit option that differs makes
//     it fail with a *ConfigMismatchError, unless WithUpdateConsumer asks
//     for the change (which then holds for every handle).
//   - Poll(ctx, n): a no-wait pull of n (what is there now); when there is
//     nothing, pulls of one with a bounded wait (the poll slice, 200ms by
//     default), in a loop that checks ctx and Close between them, until a
//     message arrives. TryPoll is the no-wait pull alone.
//     PollWithVisibility leases for its own timeout, emulated as Extend.
//   - lease ID: lease.NewID(scope, stream sequence, n), n counting the
//     handle's deliveries and scope drawn at random per handle, so that no
//     receipt ever names two deliveries, even when a server that lost its
//     consumer state (a crash before its file store synced) delivers a
//     stream sequence again with the same delivery count; each handle
//     keeps a map of the leases it holds and of the latest per message.
//   - Attempt: NumDelivered, plus the attempts a released message had
//     spent.
//   - Ack: a double ack (the server confirms it), retried on transient
//     errors (timeout, no responders) until the lease's deadline, and at
//     once after a reconnect. What a confirmed ack is worth after a server
//     crash is the server's: see the README's Durability. Not
//     held (unknown, or acked before): an error matching
//     queue.ErrLeaseNotFound; a lease whose message this handle has seen
//     delivered again: queue.ErrLeaseExpired. AckBatch sends its acks at
//     once.
//   - Nack(id, d): NakWithDelay(d) (Nak for 0). Fail(id, err):
//     NakWithDelay(RetryPolicy.Delay(attempt)).
//   - Extend(id, d): InProgress, which restarts the server's timer at
//     AckWait; for d longer than that the handle sends InProgress again
//     before each AckWait runs out, until the deadline; for d shorter it
//     Naks the message at the deadline.
//   - Release: the message is republished to PREFIX.sub.T_S with the
//     attempts it had spent (header Leasebus-Attempts-Spent; Attempt counts
//     from it) and this delivery terminated, so no attempt is spent.
//   - Reject, and Nack or Fail on the last allowed attempt: the message is
//     copied to PREFIX.dlq.T.S with its reason, attempts, last error,
//     subscription, topic and stream sequence in headers, then terminated
//     (a confirmed Term; both retried like an Ack).
//   - A last lease that expires: the handle that holds it dead-letters
//     the message at its deadline (last error "lease expired") and
//     terminates it. If that handle is gone, the server delivers the
//     message once more (its MaxDeliver is unlimited), and the handle that
//     receives this delivery past the limit dead-letters it in Poll
//     instead of returning it: no dead-lettering depends on anyone
//     listening when a lease expires, and nothing stays in the stream.
//   - Dead-letter copies carry a Nats-Msg-Id made of the consumer and the
//     stream sequence, so a copy made twice (a retry, or both paths) is
//     stored once within the dead-letter stream's duplicate window.
//   - Stats: the consumer's info (NumPending, NumAckPending, delivery
//     sequence). Purge: the consumer deleted and created again.
//     PublishBatch: asynchronous publishes, then their acks. A duplicate
//     publish (WithDedupID) returns the original, read back by sequence.
//   - Publish delay (WithDelay, on a bus opened WithDelays): a JetStream
//     message schedule ("Nats-Schedule: @at T") on PREFIX.delay.ID in a
//     third stream, "LEASEBUS_SCHED"; the server fires it at T into
//     PREFIX.due.TOPIC, which the topics' stream sources as the topic's
//     subject. Waiting spends no attempt, and nothing in the client has
//     to run for it.
//   - FetchDeadLetters reads a subscription's dead letters back as
//     queue.DeadLetter values. The dead letters' stream is bounded: Open
//     creates it keeping 10,000 per
//     subscription (MaxMsgsPerSubject), oldest dropped first; see
//     WithDeadLetterLimits.
//   - Redrive republishes matching dead letters to PREFIX.sub.T_S, a
//     subject only the subscription's consumer filters on (beside its
//     topic's), with a Nats-Msg-Id made of the dead letter's sequence,
//     then deletes them from the dead letters' stream: each is put back
//     once, even by concurrent or repeated Redrives, within the topics'
//     stream's duplicate window.
//
// # Differences from the in-memory broker
//
//   - Time is the server's: there is no injectable clock, and deadlines
//     (Delivery.Deadline) are the client's estimate, receipt + AckWait.
//   - An extension past AckWait lasts while its handle does: if the
//     handle closes or its process dies, the message comes back within an
//     AckWait.
//   - A released message goes to the back of the queue.
//   - TTL (WithTTL) and filters (WithFilter) are emulated by the handles
//     at delivery: an expired message is dead-lettered (Expired) when it
//     is delivered, a filtered one acked unseen.
//   - Priorities (WithPriority) and ordering keys (WithKey) are refused
//     with an error matching ErrUnsupported: a stream delivers in stream
//     order, and JetStream bounds what is in flight per consumer, not per
//     key; no handle sees another's leases, so the client cannot emulate
//     either correctly. No overflow policies: the stream's limits, with
//     discard-new, refuse a publish when full.
//   - A delayed message fans out when it comes due, not at the publish:
//     a subscription made in between receives it, a Purge does not drop
//     it, and Stats.Delayed stays 0. It may come due up to a fraction of a
//     second late (the server's schedule timer), never early.
//   - A redriven message goes to the back of the queue; it does not keep
//     its place.
//   - A late Ack (after the deadline) is sent, and may succeed, but the
//     message may already be with another handle: do not count on it.
//   - ErrLeaseExpired for a superseded lease is known only to the handle
//     that saw the redelivery; another handle's lease reads as not found.
//   - An expired last lease whose holder is gone is dead-lettered at the
//     next Poll of any handle of the subscription, not at its deadline.
//   - Publish to a topic with no subscription stores nothing (interest
//     retention), as in the broker.
//   - Durable: the streams and consumers survive a server restart (file
//     storage, the default).
package natsleasebus
