// Package leasebuspubsub is a gocloud.dev/pubsub driver for leasebus: a
// *pubsub.Topic and a *pubsub.Subscription over a *broker.Broker[[]byte]
// in the same process. Use OpenTopic to construct a *pubsub.Topic, and
// OpenSubscription to construct a *pubsub.Subscription; code written
// against gocloud's portable API then runs on leasebus, and a test can
// drive its redeliveries with the broker's mock clock.
//
// gocloud bodies are bytes, so the broker's payload type is []byte
// (broker.New[[]byte](), or broker.Open(dir, queue.BytesCodec()) for a
// durable one). The program owns the broker: it creates topics
// (b.CreateTopic) and subscriptions (b.Subscribe, with their visibility
// timeout, max attempts and retry policy), and closes it after shutting
// down its Topics and Subscriptions.
//
// # URLs
//
// For pubsub.OpenTopic and pubsub.OpenSubscription, register a URLOpener
// for the scheme "leasebus" once, at start-up:
//
//	err := leasebuspubsub.Register(pubsub.DefaultURLMux(), b)
//	topic, err := pubsub.OpenTopic(ctx, "leasebus://orders")
//	sub, err := pubsub.OpenSubscription(ctx, "leasebus://orders?subscription=billing")
//
// gocloud's drivers register themselves in init; this one cannot, because
// the opener needs the program's broker, and leasebus keeps no
// package-level state. See URLOpener for the URL format, and Register for
// other schemes and options.
//
// # Message Delivery Semantics
//
// leasebus is at least once: call Message.Ack after processing a message,
// or it will be delivered again. Each message gocloud receives is leased
// for the subscription's visibility timeout.
//
//   - Ack is broker Ack. An ack that arrives after the deadline still
//     deletes the message if it has not been delivered again; if it has,
//     the ack changes nothing (ErrLeaseExpired) and the new holder owns the
//     message. An ack of a message settled already changes nothing
//     (ErrLeaseNotFound). gocloud asks drivers to drop both errors, so this
//     one does: the program cannot see them. An ack that fails because the
//     broker closed is reported by the next Receive.
//   - Nack is a failed attempt: Fail(id, ErrNacked). It spends the attempt;
//     the message comes back after the subscription's RetryPolicy delay
//     (exponential from 1s by default; queue.RetryPolicy{NoBackoff: true}
//     for at once), and a nack on its last attempt (MaxAttempts, 5 by
//     default) dead-letters it, with LastError ErrNacked's text. gocloud
//     has no dead letters: read them with b.DeadLetters or route them to a
//     topic with broker.WithDeadLetterTopic.
//   - gocloud asks ReceiveBatch for batches: one Poll leases up to that
//     many visible messages, waiting up to a second on the broker's clock
//     for the first.
//   - Every received Body is the program's own copy, and so is every sent
//     one: a network driver gives that for free, and the broker stores one
//     payload for every subscription.
//   - Metadata is the message's headers, both ways; a message without
//     headers has nil Metadata. LoggableID is the message ID, the same
//     across redeliveries.
//   - Messages gocloud has prefetched are leased: they count against the
//     subscription's WithMaxInFlight, and competing consumers cannot have
//     them until they are acked, nacked or released.
//
// The README lists every difference from gocloud's semantics and what the
// driver does about each.
// # Leases while gocloud holds a message
//
// gocloud's Subscription prefetches: it keeps a queue of received messages
// sized to about two seconds of the program's recent throughput, and it
// sends acks in the background. A message can therefore sit in that queue,
// or in the program's hands, longer than a lease. Left alone, its lease
// would lapse and the message would be delivered again (spending an
// attempt, possibly to another consumer) while the first copy is still to
// be processed, whose ack would then change nothing.
//
// The driver prevents that: it extends the lease of every message it has
// handed to gocloud and not yet seen acked or nacked, before its deadline
// (ExtensionMargin), by the visibility timeout each time, for at most
// MaxExtension after its receipt (an hour by default). One goroutine per
// Subscription does it, on the broker's clock, with one timer for the
// earliest lease; it runs only while there is a lease to extend, and
// Shutdown stops it and waits for it. A message held past MaxExtension
// lapses and is delivered again, so a stuck consumer cannot hold one for
// ever. With MaxExtension poller.NoExtension, choose a visibility timeout longer
// than the time a message can wait in the prefetch queue plus its
// processing time.
//
// Shutdown flushes the acks and nacks sent before it, then releases every
// lease the driver still holds (Release: visible again at once, the
// attempt not spent): the messages prefetched but never handed out, and
// those the program had not acked yet, whose later acks gocloud drops.
//
// # As
//
// leasebuspubsub exposes the following types for As:
//   - Topic: *broker.Broker[[]byte]
//   - Subscription: *broker.Subscription[[]byte] (the one bound; false if it
//     does not exist), *broker.Broker[[]byte]
//   - Message: queue.Delivery[[]byte] (the attempt, lease, message ID, key,
//     priority, ...; its Deadline is the first lease's, before any
//     extension), *broker.Subscription[[]byte] (the one that leased it; to
//     Reject a poison message, for example, then Ack it)
//   - Message.BeforeSend: *[]broker.PublishOption, the message's publish
//     options, to append to (WithPriority, WithKey, WithDelay, WithTTL,
//     WithDedupID, ...; a WithHeaders adds to the headers from Metadata,
//     its value winning for a key in both)
//   - Message.AfterSend: queue.Message[[]byte], the message as stored
//   - Error: errors.As on the leasebus error (*queue.FullError,
//     *broker.CorruptError)
//
// # Errors
//
// ErrorCode maps leasebus's errors to gcerrors codes:
// broker.ErrTopicNotFound, broker.ErrSubscriptionNotFound and
// queue.ErrLeaseNotFound are NotFound; queue.ErrInvalidArgument is
// InvalidArgument; queue.ErrQueueFull and broker.ErrDedupFull are
// ResourceExhausted; queue.ErrClosed, queue.ErrLeaseExpired and
// broker.ErrLocked are FailedPrecondition; broker.ErrAlreadySubscribed is
// AlreadyExists; broker.ErrCorrupt is Internal; context errors are
// Canceled and DeadlineExceeded; anything else is Unknown. No error is
// retryable: leasebus has none that would succeed on a second try, and a
// retried batch would publish its first messages twice. errors.Is works on
// every error gocloud returns, through its wrapping.
//
// # Time
//
// The lease extension and ReceiveBatch's one-second wait use the broker's
// clock (broker.WithClock), so a test on clock.NewMock() moves them with
// the mock. gocloud's own batching reads the real clock.
package leasebuspubsub
