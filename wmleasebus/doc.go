// Package wmleasebus is a watermill (github.com/ThreeDotsLabs/watermill)
// Pub/Sub over a leasebus broker: a message.Publisher, and a
// message.Subscriber that is also a message.SubscribeInitializer, both on a
// *broker.Broker[[]byte] that the application owns (from broker.New, or
// broker.Open for one that survives a restart).
//
//	b, _ := broker.New[[]byte]()
//	pub, _ := wmleasebus.NewPublisher(b, wmleasebus.PublisherConfig{}, logger)
//	sub, _ := wmleasebus.NewSubscriber(b, wmleasebus.SubscriberConfig{ConsumerGroup: "billing"}, logger)
//	router.AddHandler("charge", "orders", sub, "charged", pub, charge)
//
// It passes watermill's universal Pub/Sub tests (pubsub/tests.TestPubSub),
// in memory and on a durable broker, with the features leasebus has.
//
// # Mapping
//
//   - A watermill topic is a leasebus topic of the same name, created on
//     first use (unless DoNotCreateTopicIfMissing).
//   - A consumer group (SubscriberConfig.ConsumerGroup) is a leasebus
//     subscription of that name: each group gets every message, the
//     Subscribe calls of one group compete for its messages, and it keeps
//     them while no one consumes. Without a group, each Subscribe call has
//     a subscription of its own, removed when it ends (fan-out, as in
//     GoChannel).
//   - Payload is the leasebus payload; Metadata are the message's headers;
//     the UUID travels in the header UUIDHeaderKey. A custom Marshaler can
//     add publish options (ordering key, priority, delay, TTL, dedup ID).
//   - Ack acks the lease. Nack fails it (Subscription.Fail): the attempt is
//     spent, the message comes back after the subscription's RetryPolicy
//     backoff, and after its MaxAttempts (5 by default) it is
//     dead-lettered, where watermill would redeliver it for ever.
//   - DeliveryFromContext(msg.Context()) gives the leasebus delivery:
//     attempt, max attempts, lease, message ID, key, priority.
//
// # Topics
//
// A watermill topic must be a valid leasebus topic name: non-empty UTF-8
// of at most 255 bytes, without spaces or control characters, without the
// wildcard characters '*', '>' and '#', and without an empty dot-separated
// segment ("a..b", ".a"). Others are refused with ErrInvalidTopic rather
// than mapped, so that a topic has one name, the same to watermill and to
// leasebus code (wildcard subscriptions, dead-letter topics, DeleteTopic).
// Dots keep their leasebus meaning: "orders.created" is a topic that the
// leasebus pattern "orders.*" matches.
//
// # Delivery semantics
//
// At least once. A Subscribe call hands out one message at a time
// (Concurrency 1) and waits for its Ack or Nack before the next, so a
// subscription's order (priority, then publish order) reaches watermill
// unchanged; a nacked message waits out its backoff while later ones
// overtake it, unless they share its ordering key (broker.WithKey, through
// a Marshaler), which holds them back behind it. Messages published to a
// topic before a group's subscription exists are not the group's: create it
// first (SubscribeInitialize, or broker.Subscribe at startup).
//
// While a message waits for its Ack or Nack, its lease is kept, up to
// MaxExtension (one hour by default: the lease is taken for that long at
// once); past that the
// message is delivered again, with an attempt spent. When a Subscribe ends
// (its context, Close, or the subscription or broker closing) what it holds
// is released: the prefetched messages, and the one handed out but not
// settled, are visible again at once with no attempt spent. An Ack after
// that is lost, and the message is delivered again.
//
// # Concurrency
//
// Publisher and Subscriber are safe for concurrent use. Each Subscribe call
// runs a leasebus poller (package poller) with Concurrency workers and
// goroutines of its own; Close (or the Subscribe's context) ends them, and
// Close returns once every one has ended. The broker is never closed by
// this package.
//
// # Time
//
// Lease deadlines, extensions and retry backoff run on the broker's clock
// (broker.WithClock): on a benbjohnson/clock mock, a test moves them with
// mock.Add, after Subscription.AwaitParked. Watermill's own timeouts (its
// router, its tests) run in real time.
package wmleasebus
