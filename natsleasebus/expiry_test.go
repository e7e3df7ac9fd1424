package natsleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// untilInstant returns at the instant at on the real clock, which the
// JetStream handles keep (a TTL's end, read at delivery): a wait for that
// condition, bounded by the hang guard.
func untilInstant(t *testing.T, at time.Time) {
	t.Helper()
	d := time.Until(at)
	if d > hangGuard {
		t.Fatalf("%v is further than the hang guard", at)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// TestExpiredLastLeaseWithNoHandle: the last lease of a message expires
// while no handle of its subscription is connected; a handle that
// connects later finds it dead-lettered, and nothing is left stranded in
// the stream or the consumer.
func TestExpiredLastLeaseWithNoHandle(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	const vis = 300 * time.Millisecond
	first, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing",
		natsleasebus.WithVisibilityTimeout(vis), natsleasebus.WithMaxAttempts(2), natsleasebus.WithPollSlice(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "slow"); err != nil {
		t.Fatal(err)
	}
	ds, err := first.Poll(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Nack(ds[0].LeaseID, 0); err != nil {
		t.Fatal(err)
	}
	ds, err = first.Poll(ctx, 1)
	if err != nil || ds[0].Attempt != 2 {
		t.Fatalf("second delivery: %v %v", ds, err)
	}
	first.Close() // the last lease is held by no one: the server lets it lapse on its own clock

	// A handle that connects receives its next delivery (a third, past
	// the limit) and dead-letters it: its Poll returns nothing.
	second, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing", natsleasebus.WithPollSlice(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	pctx, pcancel := context.WithTimeout(ctx, 4*vis)
	got, err := second.Poll(pctx, 1)
	pcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Poll after the last lease expired: %v, %v; want nothing delivered", got, err)
	}
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
	dls, err := natsleasebus.FetchDeadLetters[string](fctx, bus, "orders", "billing", 1)
	fcancel()
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters: %v, %v; want the expired message", dls, err)
	}
	if dl := dls[0]; dl.Message.Payload != "slow" || dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 2 || dl.LastError != "lease expired" {
		t.Errorf("dead letter %+v", dl)
	}
	info, err := second.Consumer().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Errorf("consumer after dead-lettering: %d pending, %d ack pending", info.NumPending, info.NumAckPending)
	}
	si, err := bus.JetStream().Stream(ctx, defaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := si.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("%d messages left in the stream, want 0", n)
	}
}
