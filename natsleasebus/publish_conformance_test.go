package natsleasebus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lbbackend "github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/backend/publishtest"
	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// TestPublisherConformance runs the publishing seam's suite over
// JetStream, on an embedded server in real time.
func TestPublisherConformance(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	bus := open(t, nc, natsleasebus.WithMemoryStorage(), natsleasebus.WithDelays())
	pub, err := natsleasebus.NewPublisher[string](bus, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}
	publishtest.Run(t, &jsPubHarness{bus: bus, pub: pub, maxPayload: int(nc.MaxPayload())})
}

type jsPubHarness struct {
	bus        *natsleasebus.Bus
	pub        *natsleasebus.Publisher[string]
	maxPayload int
	seq        atomic.Int64
	mu         sync.Mutex
	subs       map[string]*natsleasebus.Subscription[string]
}

func (h *jsPubHarness) Capabilities() publishtest.Capabilities {
	return publishtest.Capabilities{
		Unit: 150 * time.Millisecond,
		// The stream's duplicate window (two minutes by default), on the
		// server's clock: the suite cannot move it, and skips the case
		// past it.
		DedupWindow: 2 * time.Minute,
		MaxDelay:    1<<63 - 1, // message schedules, on a bus opened WithDelays
		TTL:         true,      // emulated by the handles at delivery
		MaxSize:     h.maxPayload,
		// Not: FakeClock (the server keeps time), Priorities and Keys
		// (refused by name: see Publisher).
	}
}

func (h *jsPubHarness) Publisher() lbbackend.Publisher[string] { return h.pub }

func (h *jsPubHarness) NewTopic(ctx context.Context) (string, error) {
	topic := fmt.Sprintf("pt-%d", h.seq.Add(1))
	sub, err := natsleasebus.Subscribe[string](ctx, h.bus, topic, "reader",
		natsleasebus.WithCodec(queue.StringCodec()), natsleasebus.WithPollSlice(50*time.Millisecond))
	if err != nil {
		return "", err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[string]*natsleasebus.Subscription[string]{}
	}
	h.subs[topic] = sub
	return topic, nil
}

func (h *jsPubHarness) Receive(ctx context.Context, topic string, n int) ([]queue.Message[string], error) {
	h.mu.Lock()
	sub := h.subs[topic]
	h.mu.Unlock()
	var out []queue.Message[string]
	for len(out) < n {
		var ds []queue.Delivery[string]
		if ctx.Err() != nil {
			ds = sub.TryPoll(n - len(out))
			if len(ds) == 0 {
				return out, nil
			}
		} else {
			var err error
			if ds, err = sub.Poll(ctx, n-len(out)); err != nil {
				return out, nil // ctx ended: what there is
			}
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

func (h *jsPubHarness) Advance(time.Duration) error { return publishtest.ErrCannotAdvance }

func (h *jsPubHarness) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sub := range h.subs {
		sub.Close()
	}
	return nil
}
