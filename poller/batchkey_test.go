package poller_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// WithBatchByKey: a gathered batch goes to the handler one key at a time,
// keys in the order of their first delivery, deliveries in order within
// a key, the messages without a key together; each call's outcomes are
// its own.
func TestBatchByKey(t *testing.T) {
	mock, b, sub := newBroker(t, broker.WithKeyConcurrency(10))
	log := &batchLog{clk: mock, start: mock.Now()}
	ev := newEvents[string]()
	p, err := poller.NewBatch(sub, func(_ context.Context, ds []queue.Delivery[string]) ([]error, error) {
		log.record(ds)
		if ds[0].Key == "B" {
			return nil, errors.New("tenant B's API is down")
		}
		return nil, nil
	}, poller.WithBatchMax(6, time.Hour), poller.WithBatchByKey(), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ payload, key string }{{"a1", "A"}, {"b1", "B"}, {"n1", ""}, {"a2", "A"}, {"b2", "B"}, {"a3", "A"}} {
		if _, err := b.Publish(context.Background(), "jobs", m.payload, broker.WithKey(m.key)); err != nil {
			t.Fatal(err)
		}
	}
	start(t, p)
	outcomes := map[string]poller.Outcome{}
	batch := map[string]int{}
	for range 6 {
		e := recv(t, ev.ch)
		outcomes[e.Delivery.Payload] = e.Outcome
		batch[e.Delivery.Payload] = e.Batch
	}
	quiet(t, p)
	if want := []string{"0s a1 a2 a3", "0s b1 b2", "0s n1"}; !slices.Equal(log.get(), want) {
		t.Fatalf("calls %q, want %q", log.get(), want)
	}
	for payload, want := range map[string]poller.Outcome{"a1": poller.OutcomeAcked, "a2": poller.OutcomeAcked, "a3": poller.OutcomeAcked,
		"b1": poller.OutcomeRetried, "b2": poller.OutcomeRetried, "n1": poller.OutcomeAcked} {
		if outcomes[payload] != want {
			t.Errorf("%s: %v, want %v", payload, outcomes[payload], want)
		}
	}
	if want := map[string]int{"a1": 3, "a2": 3, "a3": 3, "b1": 2, "b2": 2, "n1": 1}; !maps.Equal(batch, want) {
		t.Errorf("events' Batch %v, want %v", batch, want)
	}
}

// WithBatchByKey is for NewBatch; New refuses it.
func TestBatchByKeyIsForNewBatch(t *testing.T) {
	_, _, sub := newBroker(t)
	_, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error { return nil }, poller.WithBatchByKey())
	if !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("New with WithBatchByKey: %v", err)
	}
}

// A pool that drains between the calls of a batch grouped by key releases
// the deliveries of the calls not made, unspent.
func TestBatchByKeyDrainReleasesTheRest(t *testing.T) {
	_, b, sub := newBroker(t, broker.WithKeyConcurrency(10))
	inA, release := make(chan struct{}), make(chan struct{})
	reg := poller.NewRegistry()
	ev := newEvents[string]()
	var calls [][]string
	p, err := poller.NewBatch(sub, func(_ context.Context, ds []queue.Delivery[string]) ([]error, error) {
		var call []string
		for _, d := range ds {
			call = append(call, d.Payload)
		}
		calls = append(calls, call)
		if ds[0].Key == "A" {
			close(inA)
			<-release
		}
		return nil, nil
	}, poller.WithBatchMax(3, time.Hour), poller.WithBatchByKey(), poller.WithRegistry(reg, "digests"), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ payload, key string }{{"a1", "A"}, {"b1", "B"}, {"a2", "A"}} {
		if _, err := b.Publish(context.Background(), "jobs", m.payload, broker.WithKey(m.key)); err != nil {
			t.Fatal(err)
		}
	}
	run := start(t, p)
	<-inA
	hs := reg.Pools()[0].Handlers
	if len(hs) != 2 || hs[0].Batch != 2 || hs[1].Batch != 2 || hs[0].Key != "A" {
		t.Fatalf("the registry shows %+v, want A's two, in a call of 2", hs)
	}
	run.cancel() // the drain waits for A's call, then makes no more
	close(release)
	if err := run.wait(t); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"a1", "a2"}}; !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("calls %q, want only A's", calls)
	}
	got := map[string]poller.Outcome{}
	for range 3 {
		e := recv(t, ev.ch)
		got[e.Delivery.Payload] = e.Outcome
	}
	if got["a1"] != poller.OutcomeAcked || got["a2"] != poller.OutcomeAcked || got["b1"] != poller.OutcomeReleased {
		t.Fatalf("outcomes %v: want a1, a2 acked, b1 released", got)
	}
	ds := sub.TryPoll(1)
	if len(ds) != 1 || ds[0].Payload != "b1" || ds[0].Attempt != 1 {
		t.Fatalf("after the drain: %+v, want b1 at attempt 1", ds)
	}
}
