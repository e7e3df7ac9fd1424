package natsleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// TestDottedTopicsAndWildcards: dotted topics are subjects, and a
// subscription's topic may be a pattern ('*' one segment, '>' or '#' one
// or more), each delivery naming its own topic.
func TestDottedTopicsAndWildcards(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	subs := map[string]*natsleasebus.Subscription[string]{}
	for _, topic := range []string{"orders.*", "orders.>", "orders.eu.created"} {
		s, err := natsleasebus.Subscribe[string](ctx, bus, topic, "billing", natsleasebus.WithPollSlice(50*time.Millisecond))
		if err != nil {
			t.Fatalf("Subscribe %q: %v", topic, err)
		}
		t.Cleanup(func() { s.Close() })
		subs[topic] = s
	}
	for _, topic := range []string{"orders.eu.created", "orders.us", "orders.eu", "payments.eu"} {
		if _, err := natsleasebus.Publish(ctx, bus, topic, topic); err != nil {
			t.Fatal(err)
		}
	}
	for pattern, want := range map[string][]string{
		"orders.*":          {"orders.us", "orders.eu"},
		"orders.>":          {"orders.eu.created", "orders.us", "orders.eu"},
		"orders.eu.created": {"orders.eu.created"},
	} {
		got := drainDistinct(t, subs[pattern], len(want), 200*time.Millisecond)
		for _, topic := range want {
			if d, ok := got[topic]; !ok || d.Message.Topic != topic {
				t.Errorf("%s: %q delivered as %+v", pattern, topic, d)
			}
		}
	}

	// A pattern's dead letters and their redrive keep each message's topic.
	if _, err := natsleasebus.Publish(ctx, bus, "orders.eu", "bad"); err != nil {
		t.Fatal(err)
	}
	star := subs["orders.*"]
	ds, err := star.Poll(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := star.Reject(ds[0].LeaseID, errors.New("no")); err != nil {
		t.Fatal(err)
	}
	dls, err := natsleasebus.FetchDeadLetters[string](ctx, bus, "orders.*", "billing", 1)
	if err != nil || len(dls) != 1 || dls[0].Message.Topic != "orders.eu" {
		t.Fatalf("dead letters of orders.*: %+v, %v", dls, err)
	}
	if n, err := natsleasebus.Redrive(ctx, bus, "orders.*", "billing", func(queue.DeadLetter[string]) bool { return true }); n != 1 || err != nil {
		t.Fatalf("Redrive: %d, %v", n, err)
	}
	ds, err = star.Poll(ctx, 1)
	if err != nil || ds[0].Payload != "bad" || ds[0].Message.Topic != "orders.eu" || ds[0].Attempt != 1 {
		t.Fatalf("redriven: %+v, %v", ds, err)
	}
	if err := star.Release(ds[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	ds, err = star.Poll(ctx, 1)
	if err != nil || ds[0].Message.Topic != "orders.eu" {
		t.Fatalf("released: %+v, %v", ds, err)
	}
	_ = star.Ack(ds[0].LeaseID)

	// '#' is '>': the same subscription.
	hash, err := natsleasebus.Subscribe[string](ctx, bus, "orders.#", "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer hash.Close()
	if hash.Consumer().CachedInfo().Name != subs["orders.>"].Consumer().CachedInfo().Name {
		t.Errorf("orders.# and orders.> are different consumers")
	}
	for _, bad := range []string{"orders.*", "orders.>", "orders..eu", ".orders", "orders.e u"} {
		if _, err := natsleasebus.Publish(ctx, bus, bad, "x"); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("Publish to %q: %v", bad, err)
		}
	}
	for _, bad := range []string{"orders.>.eu", "orders.e*", "", "orders."} {
		if _, err := natsleasebus.Subscribe[string](ctx, bus, bad, "x"); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("Subscribe to %q: %v", bad, err)
		}
	}
}
