package natsleasebus_test

// One receipt, one delivery: after the server loses its consumer state
// (as a crash before its file store synced does), it delivers a stream
// sequence again with the same delivery count, and the receipt must
// still be new.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

func TestReceiptIsNewAfterTheServerForgetsDeliveries(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	bus := open(t, nc, natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing",
		natsleasebus.WithVisibilityTimeout(time.Minute), natsleasebus.WithPollSlice(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "o1"); err != nil {
		t.Fatal(err)
	}
	first := pollOneJS(ctx, t, sub)

	// The server forgets the consumer's deliveries: it delivers again
	// from its ack floor, with no delivery on record.
	cfg := sub.Consumer().CachedInfo().Config
	if _, err := bus.JetStream().ResetConsumer(ctx, defaultStream, cfg.Durable); err != nil {
		t.Fatal(err)
	}

	again := pollOneJS(ctx, t, sub)
	if again.Payload != "o1" || again.Attempt != 1 {
		t.Fatalf("after the consumer was lost: %q at attempt %d, want o1 at 1 (the server's count restarted)", again.Payload, again.Attempt)
	}
	if again.LeaseID == first.LeaseID {
		t.Fatalf("the delivery after the server forgot the first has the first's lease ID %v", first.LeaseID)
	}
	if err := sub.Ack(first.LeaseID); !errors.Is(err, queue.ErrLeaseExpired) {
		t.Fatalf("Ack of the first receipt = %v, want ErrLeaseExpired (its message was delivered again)", err)
	}
	if err := sub.Ack(again.LeaseID); err != nil {
		t.Fatalf("Ack of the current receipt: %v", err)
	}
	if err := sub.Ack(first.LeaseID); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Fatalf("Ack of the first receipt after its message was acked = %v, want ErrLeaseNotFound", err)
	}
}

// Two handles on one subscription mint receipts in scopes of their own
// (they once shared one, a hash of the stream and consumer names, so a
// server that forgot a delivery and gave it to the other handle gave it
// the same receipt), and neither settles the other's.
func TestReceiptsOfTwoHandlesDiffer(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	bus := open(t, nc, natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	subscribe := func() *natsleasebus.Subscription[string] {
		s, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing",
			natsleasebus.WithVisibilityTimeout(time.Minute), natsleasebus.WithPollSlice(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := subscribe(), subscribe()
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "o1"); err != nil {
		t.Fatal(err)
	}
	da := pollOneJS(ctx, t, a)
	if err := a.Release(da.LeaseID); err != nil { // back on the subscription's subject: b gets it
		t.Fatal(err)
	}
	db := pollOneJS(ctx, t, b)
	if da.LeaseID.Scope() == db.LeaseID.Scope() {
		t.Fatalf("two handles minted receipts in one scope: %v and %v", da.LeaseID, db.LeaseID)
	}
	if err := a.Ack(db.LeaseID); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Fatalf("Ack on a of b's receipt = %v, want ErrLeaseNotFound", err)
	}
	if err := b.Ack(db.LeaseID); err != nil {
		t.Fatal(err)
	}
}

// pollOneJS polls sub until it delivers one message.
func pollOneJS(ctx context.Context, t *testing.T, sub *natsleasebus.Subscription[string]) queue.Delivery[string] {
	t.Helper()
	ds, err := sub.Poll(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Poll = %v, %v; want one delivery", ds, err)
	}
	return ds[0]
}
