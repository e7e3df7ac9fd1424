package wmleasebus_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/wmleasebus"
)

// features are what leasebus offers, in the terms of watermill's
// universal tests (pubsub/tests.Features, whose comments define them):
//
//   - ConsumerGroups: a ConsumerGroup is a subscription; groups each get
//     every message, and the members of one compete.
//   - ExactlyOnceDelivery: false. At least once: a lease that lapses, or
//     a message released at Close, is delivered again.
//   - GuaranteedOrder, with GuaranteedOrderWithSingleSubscriber: a
//     subscription delivers in publish order (within a priority), and one
//     Subscribe with Concurrency 1 hands its messages out in that order.
//     Several Subscribers of one group take turns, so the order in which
//     their messages reach a merged channel is not kept.
//   - Persistent: in watermill's sense ("persistent between multiple
//     instances of a Pub/Sub"): the broker keeps a group's messages while
//     no Subscriber of the group runs, and every Subscriber of a broker
//     shares them. Across a process restart only on a broker from
//     broker.Open; the durable run checks that case too, and
//     TestDurableRestart reopens the directory.
//   - NewSubscriberReceivesOldMessages: false. A subscription gets the
//     messages published after it was created; leasebus keeps no log to
//     replay (TestNewSubscriberReceivesOldMessages is skipped for that).
//   - RestartServiceCommand: none. The broker lives in the test's process:
//     there is no server to restart (TestReconnect is skipped for that).
//   - ContextPreserved: false. A message's context does not travel through
//     the broker (a durable broker could not store it).
func features() tests.Features {
	return tests.Features{
		ConsumerGroups:                      true,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    false,
		ContextPreserved:                    false,
	}
}

// suiteOptions are the subscription options the suite runs with. The
// suite treats a Nack as "deliver again", for as many Nacks as it sends
// (TestContinueAfterErrors sends 300 to 50 messages), so its
// subscriptions have no attempt limit; it waits in real time, so the
// backoff after a Nack is short. This package's own tests check the
// defaults: an attempt limit, then a dead letter.
func suiteOptions() []broker.SubscribeOption {
	return []broker.SubscribeOption{
		broker.WithMaxAttempts(queue.UnlimitedAttempts),
		broker.WithRetry(queue.RetryPolicy{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond}),
	}
}

// constructors returns the suite's constructors over b: every Pub/Sub
// they make shares the broker, as the instances of a service share their
// message broker. The plain constructor uses one consumer group, as
// watermill's Kafka and SQL tests do (the suite's persistence cases need
// instances that share a subscription).
func constructors(b *broker.Broker[[]byte]) (tests.PubSubConstructor, tests.ConsumerGroupPubSubConstructor) {
	withGroup := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		logger := watermill.NopLogger{}
		pub, err := wmleasebus.NewPublisher(b, wmleasebus.PublisherConfig{}, logger)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := wmleasebus.NewSubscriber(b, wmleasebus.SubscriberConfig{
			ConsumerGroup:    group,
			SubscribeOptions: suiteOptions(),
			BatchSize:        4,
		}, logger)
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub
	}
	return func(t *testing.T) (message.Publisher, message.Subscriber) { return withGroup(t, "test") }, withGroup
}

func TestPubSubInMemory(t *testing.T) {
	b, err := broker.New[[]byte]()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	plain, group := constructors(b)
	tests.TestPubSub(t, features(), plain, group)
}

func TestPubSubDurable(t *testing.T) {
	b, err := broker.Open[[]byte](t.TempDir(), queue.BytesCodec())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	plain, group := constructors(b)
	tests.TestPubSub(t, features(), plain, group)
}
