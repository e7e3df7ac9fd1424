package broker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/backend/publishtest"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// TestPublisherConformance runs the publishing seam's suite over the
// broker, in memory and durable: it carries every option.
func TestPublisherConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		b, mock := brokertest.New[string](t, broker.WithDedupWindow(time.Hour))
		publishtest.Run(t, &brokerHarness{b: b, mock: mock})
	})
	t.Run("durable", func(t *testing.T) {
		mock := clock.NewMock()
		mock.Set(brokertest.Epoch)
		b, err := broker.Open(t.TempDir(), queue.StringCodec(), broker.WithClock(mock), broker.WithDedupWindow(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		publishtest.Run(t, &brokerHarness{b: b, mock: mock})
	})
}

type brokerHarness struct {
	b    *broker.Broker[string]
	mock *clock.Mock
	seq  atomic.Int64
}

func (h *brokerHarness) Capabilities() publishtest.Capabilities {
	return publishtest.Capabilities{
		Unit: time.Second, FakeClock: true, DedupWindow: time.Hour, MaxDelay: 1<<63 - 1,
		Priorities: true, Keys: true, TTL: true,
	}
}

func (h *brokerHarness) Publisher() backend.Publisher[string] { return h.b }

func (h *brokerHarness) NewTopic(context.Context) (string, error) {
	topic := fmt.Sprintf("pt-%d", h.seq.Add(1))
	if err := h.b.CreateTopic(topic); err != nil {
		return "", err
	}
	_, err := h.b.Subscribe(topic, "reader", broker.WithKeyConcurrency(1))
	return topic, err
}

func (h *brokerHarness) Receive(ctx context.Context, topic string, n int) ([]queue.Message[string], error) {
	sub, err := h.b.Subscription(topic, "reader")
	if err != nil {
		return nil, err
	}
	var out []queue.Message[string]
	for len(out) < n {
		var ds []queue.Delivery[string]
		if ctx.Err() != nil {
			ds = sub.TryPoll(n - len(out))
		} else if ds, err = sub.Poll(ctx, n-len(out)); err != nil {
			return out, nil // ctx ended: what there is
		}
		if len(ds) == 0 {
			return out, nil
		}
		for _, d := range ds {
			if err := sub.Ack(d.LeaseID); err != nil {
				return out, err
			}
			out = append(out, d.Message)
		}
	}
	return out, nil
}

func (h *brokerHarness) Advance(d time.Duration) error { h.mock.Add(d); return nil }

func (h *brokerHarness) Close() error { return nil }
