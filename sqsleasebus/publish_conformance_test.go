package sqsleasebus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/backend/publishtest"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// TestPublisherConformance runs the publishing seam's suite over SQS
// (leasebus's server, on a mock clock), on FIFO queues and on standard
// ones: each carries what the other does not.
func TestPublisherConformance(t *testing.T) {
	for _, fifo := range []bool{true, false} {
		name := map[bool]string{true: "fifo", false: "standard"}[fifo]
		t.Run(name, func(t *testing.T) {
			srv := sqstest.Start(t)
			pub, err := sqsleasebus.NewPublisher[string](srv.Client, queue.StringCodec(), sqsleasebus.WithClock(srv.Clock))
			if err != nil {
				t.Fatal(err)
			}
			publishtest.Run(t, &sqsPubHarness{srv: srv, pub: pub, fifo: fifo, subs: map[string]*sqsleasebus.Subscription[string]{}})
		})
	}
}

type sqsPubHarness struct {
	srv  *sqstest.Server
	pub  *sqsleasebus.Publisher[string]
	fifo bool
	seq  atomic.Int64
	mu   sync.Mutex
	subs map[string]*sqsleasebus.Subscription[string]
}

func (h *sqsPubHarness) Capabilities() publishtest.Capabilities {
	c := publishtest.Capabilities{Unit: time.Second, FakeClock: true, MaxSize: 1 << 20}
	if h.fifo {
		c.DedupWindow = 5 * time.Minute // SQS's, fixed
		c.Keys = true                   // message groups
	} else {
		c.MaxDelay = 15 * time.Minute // DelaySeconds
	}
	return c
}

func (h *sqsPubHarness) Publisher() backend.Publisher[string] { return h.pub }

func (h *sqsPubHarness) NewTopic(ctx context.Context) (string, error) {
	name := fmt.Sprintf("pt-%d", h.seq.Add(1))
	attrs := map[string]string{}
	if h.fifo {
		name += ".fifo"
		attrs["FifoQueue"] = "true"
	}
	out, err := h.srv.Client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", err
	}
	sub, err := sqsleasebus.Subscribe[string](ctx, h.srv.Client, aws.ToString(out.QueueUrl), queue.StringCodec(), sqsleasebus.WithClock(h.srv.Clock))
	if err != nil {
		return "", err
	}
	h.mu.Lock()
	h.subs[name] = sub
	h.mu.Unlock()
	return name, nil
}

// Receive polls topic's subscription and acks what it gets. With ctx done
// it takes what is visible at once: a Poll that the server holds parked
// (nothing visible) is canceled.
func (h *sqsPubHarness) Receive(ctx context.Context, topic string, n int) ([]queue.Message[string], error) {
	h.mu.Lock()
	sub := h.subs[topic]
	h.mu.Unlock()
	now := ctx.Err() != nil
	var out []queue.Message[string]
	for len(out) < n {
		pctx, cancel := context.WithCancel(context.Background())
		if !now {
			pctx, cancel = context.WithCancel(ctx)
		}
		type result struct {
			ds  []queue.Delivery[string]
			err error
		}
		got := make(chan result, 1)
		go func() {
			ds, err := sub.Poll(pctx, n-len(out))
			got <- result{ds, err}
		}()
		var r result
		if now {
			parked := make(chan error, 1)
			go func() { parked <- h.srv.Server.AwaitParked(pctx, topic, 1) }()
			select {
			case r = <-got:
			case <-parked:
				cancel()
				r = <-got
			}
		} else {
			r = <-got
		}
		cancel()
		if r.err != nil {
			return out, nil // canceled, or ctx ended: what there is
		}
		for _, d := range r.ds {
			if err := sub.Ack(d.LeaseID); err != nil {
				return out, err
			}
			out = append(out, d.Message)
		}
	}
	return out, nil
}

func (h *sqsPubHarness) Advance(d time.Duration) error { h.srv.Clock.Add(d); return nil }

func (h *sqsPubHarness) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sub := range h.subs {
		sub.Close()
	}
	return nil
}
