package pgleasebus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/backend/publishtest"
	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/queue"
)

// TestPublisherConformance runs the publishing seam's suite over a real
// PostgreSQL on the bus's mock clock.
func TestPublisherConformance(t *testing.T) {
	e := newEnv(t, pgleasebus.WithDedupWindow(time.Hour), pgleasebus.WithMaxMessageSize(1<<20))
	pub, err := pgleasebus.NewPublisher[string](e.bus, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}
	publishtest.Run(t, &pgPubHarness{env: e, pub: pub, subs: map[string]*pgleasebus.Subscription[string]{}})
}

type pgPubHarness struct {
	*env
	pub  *pgleasebus.Publisher[string]
	seq  atomic.Int64
	mu   sync.Mutex
	subs map[string]*pgleasebus.Subscription[string]
}

func (h *pgPubHarness) Capabilities() publishtest.Capabilities {
	return publishtest.Capabilities{
		Unit: time.Second, FakeClock: true, DedupWindow: time.Hour, MaxDelay: 1<<63 - 1,
		Priorities: true, Keys: true, TTL: true, MaxSize: 1 << 20, // WithMaxMessageSize
	}
}

func (h *pgPubHarness) Publisher() backend.Publisher[string] { return h.pub }

func (h *pgPubHarness) NewTopic(ctx context.Context) (string, error) {
	topic := fmt.Sprintf("pt-%d", h.seq.Add(1))
	if err := h.bus.CreateTopic(ctx, topic); err != nil {
		return "", err
	}
	sub, err := pgleasebus.Subscribe(ctx, h.bus, topic, "reader", queue.StringCodec())
	if err != nil {
		return "", err
	}
	h.mu.Lock()
	h.subs[topic] = sub
	h.mu.Unlock()
	return topic, nil
}

func (h *pgPubHarness) Receive(ctx context.Context, topic string, n int) ([]queue.Message[string], error) {
	h.mu.Lock()
	sub := h.subs[topic]
	h.mu.Unlock()
	if sub == nil {
		return nil, fmt.Errorf("no topic %q", topic)
	}
	var out []queue.Message[string]
	for len(out) < n {
		var ds []queue.Delivery[string]
		if ctx.Err() != nil {
			ds = sub.TryPoll(n - len(out))
		} else if got, err := sub.Poll(ctx, n-len(out)); err == nil {
			ds = got
		} else if ctx.Err() != nil {
			return out, nil // ctx ended: what there is
		} else {
			return out, err
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

func (h *pgPubHarness) Advance(d time.Duration) error { h.clk.Add(d); return nil }

func (h *pgPubHarness) Close() error { return nil }
