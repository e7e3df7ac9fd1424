package broker_test

import (
	"context"
	"testing"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// TestOneAllocationPerPublish holds the hot path's allocation budget: a
// publish allocates its envelope and nothing else, and a delivery and its
// ack (PollInto, AckBatch) allocate nothing. Run without -race, which
// allocates on its own.
func TestOneAllocationPerPublish(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	b, err := broker.New[[]byte]()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	s, err := b.Subscribe("t", "s")
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte("x")
	buf := make([]queue.Delivery[[]byte], 1)
	ids := make([]lease.ID, 1)
	publish := testing.AllocsPerRun(1000, func() {
		if _, err := b.Publish(ctx, "t", payload); err != nil {
			t.Fatal(err)
		}
	})
	if publish != 1 {
		t.Errorf("Publish: %v allocations, want 1 (the envelope)", publish)
	}
	// A trace context in the headers, as OpenTelemetry's propagator writes it.
	opt := broker.WithHeaders(map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "x=1"})
	headers := testing.AllocsPerRun(1000, func() {
		if _, err := b.Publish(ctx, "t", payload, opt); err != nil {
			t.Fatal(err)
		}
	})
	if headers != 2 {
		t.Errorf("Publish with two headers: %v allocations, want 2 (the envelope, the headers)", headers)
	}
	settle := testing.AllocsPerRun(1000, func() {
		if n, err := s.PollInto(ctx, buf); err != nil || n != 1 {
			t.Fatal(n, err)
		}
		ids[0] = buf[0].LeaseID
		if err := s.AckBatch(ids); err != nil {
			t.Fatal(err)
		}
	})
	if settle != 0 {
		t.Errorf("PollInto + AckBatch: %v allocations, want 0", settle)
	}
}
