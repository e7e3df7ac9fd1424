package natsleasebus_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// ackFixture is a subscription on a connection whose acks can fail on
// demand, holding one delivered message. opts come after the fixture's
// own (a settle timeout of 200ms), so they override them.
func ackFixture(t *testing.T, vis time.Duration, opts ...natsleasebus.SubscribeOption) (*faults, *nats.Conn, *natsleasebus.Subscription[string], queue.Delivery[string]) {
	t.Helper()
	srv := startServer(t, t.TempDir(), -1)
	f := &faults{}
	nc := connectFaulty(t, srv.srv.ClientURL(), f)
	bus := open(t, nc, natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing", append([]natsleasebus.SubscribeOption{
		natsleasebus.WithVisibilityTimeout(vis), natsleasebus.WithSettleTimeout(200 * time.Millisecond),
		natsleasebus.WithPollSlice(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "o1"); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Poll(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	return f, nc, sub, ds[0]
}

// settled checks that the consumer holds nothing: the ack reached the
// server.
func settled(t *testing.T, sub *natsleasebus.Subscription[string]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	info, err := sub.Consumer().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
		t.Fatalf("after Ack: %d ack pending, %d pending, %d redelivered; want the message gone", info.NumAckPending, info.NumPending, info.NumRedelivered)
	}
}

// TestAckRetriesTransientErrors: an Ack whose first tries time out (lost
// on the way) or find no responder (as while the consumer's leader moves)
// is tried again within the lease, and succeeds.
func TestAckRetriesTransientErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  faultMode
		tries int
	}{
		{"timeout", dropFrame, 2},
		{"no responders", misroute, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _, sub, d := ackFixture(t, 5*time.Second)
			f.arm(tc.mode, tc.tries)
			if err := sub.Ack(d.LeaseID); err != nil {
				t.Fatalf("Ack with %d %s faults: %v", tc.tries, tc.name, err)
			}
			if f.hits() != tc.tries {
				t.Fatalf("%d acks intercepted, want %d", f.hits(), tc.tries)
			}
			settled(t, sub)
		})
	}
}

// TestAckGivesUpAtTheDeadline: an Ack that keeps failing returns the error
// once the lease's deadline has passed, keeps the lease held, and the
// message is delivered again.
func TestAckGivesUpAtTheDeadline(t *testing.T) {
	const vis = time.Second
	f, _, sub, d := ackFixture(t, vis)
	f.arm(dropFrame, -1)
	start := time.Now()
	left := d.Deadline.Sub(start)
	err := sub.Ack(d.LeaseID)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ack with every try lost: %v, want one matching context.DeadlineExceeded", err)
	}
	if f.hits() < 3 || took < left-300*time.Millisecond || took > left+500*time.Millisecond {
		t.Errorf("Ack gave up after %v and %d tries; the lease had %v left", took, f.hits(), left)
	}
	t.Log(err)
	f.arm(dropFrame, 0)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	ds, err := sub.Poll(ctx, 1)
	if err != nil || ds[0].Attempt != 2 {
		t.Fatalf("after the failed Ack: %v %v, want the message again", ds, err)
	}
	if err := sub.Ack(ds[0].LeaseID); err != nil {
		t.Fatal(err)
	}
}

// TestAckPermanentErrorNotRetried: an error no retry can fix (the
// connection is closed) returns at once, not at the deadline.
func TestAckPermanentErrorNotRetried(t *testing.T) {
	_, nc, sub, d := ackFixture(t, 5*time.Second)
	nc.Close()
	start := time.Now()
	err := sub.Ack(d.LeaseID)
	if !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("Ack on a closed connection: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Ack on a closed connection took %v: retried a permanent error", took)
	}
}

// TestAckTriesAgainWhenTheConnectionComesBack: an Ack whose request was
// lost with a connection that dropped (a server killed before it
// answered) is tried again as soon as the client has reconnected, not
// after the settle timeout, so a pool takes new work at once.
func TestAckTriesAgainWhenTheConnectionComesBack(t *testing.T) {
	// Only a reconnect ends the lost try: the settle timeout is an hour.
	f, nc, sub, d := ackFixture(t, time.Hour, natsleasebus.WithSettleTimeout(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()

	f.arm(dropFrame, 1) // the first ack never reaches the server
	acked := make(chan error, 1)
	go func() { acked <- sub.Ack(d.LeaseID) }()
	for f.hits() < 1 { // wait for the ack to be lost
		select {
		case err := <-acked:
			t.Fatalf("Ack returned %v before its request was lost", err)
		case <-ctx.Done():
			t.Fatal("the ack was never sent")
		default:
			runtime.Gosched()
		}
	}
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	f.sever()
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("the client did not reconnect")
	}
	select {
	case err := <-acked:
		if err != nil {
			t.Fatalf("Ack after the reconnect: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Ack still waiting for the reply the old connection lost")
	}
	settled(t, sub)
}
