package suite

import (
	"context"

	"gocloud.dev/pubsub"
	"gocloud.dev/pubsub/mempubsub"
)

// MemPubSub is Go CDK's in-memory driver behind the portable pubsub API.
var MemPubSub = Impl{
	Name:   "mempubsub",
	Module: "gocloud.dev/pubsub/mempubsub v0.47.0",
	Notes: "Receive returns one message (the portable type batches underneath), Ack is async; " +
		"no order (the driver scans a map); an idle driver sleeps 250 ms before it polls again",
	peer: true,
	New:  newMemPubSub,
	skip: func(w Workload, _ bool) string {
		if w.Bench == Exp.Bench {
			return "ack deadline runs on the real clock only (time.Now in the driver)"
		}
		return ""
	},
	once: func(w Workload) bool { return w.Bench == D1e6.Bench }, // 10^6 Sends to build the backlog
	maxMsgs: func(w Workload, short bool) int {
		switch w.Bench {
		case W4.Bench: // a round trip can wait out the driver's 250 ms poll sleep
			if short {
				return 10
			}
			return 40
		case S1.Bench:
			if short {
				return 200
			}
			return 1000
		case S10.Bench, S100.Bench: // so can every round, on every subscription
			if short {
				return 5 * w.Param // 5 rounds
			}
			return 10 * w.Param
		}
		if short { // ~20 µs a message
			return 5000
		}
		return 20_000
	},
}

type memPubSub struct {
	topic *pubsub.Topic
	subs  []*pubsub.Subscription
}

func newMemPubSub(s Setup) (System, error) {
	m := &memPubSub{topic: mempubsub.NewTopic()}
	for range s.Subs {
		m.subs = append(m.subs, mempubsub.NewSubscription(m.topic, visibility(s)))
	}
	return m, nil
}

func (m *memPubSub) Publish(ctx context.Context, p []byte) error {
	return m.topic.Send(ctx, &pubsub.Message{Body: p})
}

func (m *memPubSub) Consumer(sub int) Consumer { return memPubSubConsumer{m.subs[sub]} }

func (m *memPubSub) Close() error {
	ctx := context.Background()
	for _, s := range m.subs {
		s.Shutdown(ctx)
	}
	return m.topic.Shutdown(ctx)
}

type memPubSubConsumer struct{ s *pubsub.Subscription }

func (c memPubSubConsumer) Take(ctx context.Context, _ int, fn func([]byte)) (int, error) {
	msg, err := c.s.Receive(ctx)
	if err != nil {
		return 0, err
	}
	if fn != nil {
		fn(msg.Body)
	}
	msg.Ack()
	return 1, nil
}
