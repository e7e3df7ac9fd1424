package sqsleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// A FIFO queue as a Subscription sees it: each message's Key is its
// group, a group's messages come in order and not while one of it is
// leased, and a receipt expires with its visibility timeout, so a late
// Ack is refused (queue.ErrLeaseExpired) and the message comes again.
func TestFIFOQueue(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "orders.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "10"})
	ctx := context.Background()
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range [][2]string{{"a", "a1"}, {"b", "b1"}, {"a", "a2"}} {
		if _, err := pub.Publish(ctx, topicOf(url), m[1], queue.WithKey(m[0])); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := sub.Poll(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].Payload != "a1" || ds[0].Key != "a" {
		t.Fatalf("first Poll: %+v, %v; want a1 of group a", ds, err)
	}
	a1 := ds[0]
	// a2 waits behind a1; b1 does not.
	ds, err = sub.Poll(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Payload != "b1" || ds[0].Key != "b" {
		t.Fatalf("second Poll: %+v, %v; want b1 alone", ds, err)
	}
	if err := sub.Ack(ds[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	// a1's lease lapses: the late Ack is refused, and a1 comes again.
	srv.Clock.Add(10 * time.Second)
	if err := sub.Ack(a1.LeaseID); !errors.Is(err, queue.ErrLeaseExpired) {
		t.Fatalf("late Ack on a FIFO queue: %v, want ErrLeaseExpired", err)
	}
	ds, err = sub.Poll(ctx, 10)
	if err != nil || len(ds) < 1 || ds[0].Payload != "a1" || ds[0].Attempt != 2 {
		t.Fatalf("after the lapse: %+v, %v; want a1 at attempt 2 first", ds, err)
	}
	for _, d := range ds {
		if err := sub.Ack(d.LeaseID); err != nil {
			t.Fatal(err)
		}
	}
	if len(ds) == 1 {
		ds = pollAll(t, sub, 1)
	} else {
		ds = ds[1:]
	}
	if ds[0].Payload != "a2" {
		t.Fatalf("then %q, want a2", ds[0].Payload)
	}
}
