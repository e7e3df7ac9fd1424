package natsleasebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// TestReleaseOnTheLastAttempt: Release spends no attempt even on the last
// one, and keeps the message's ID, headers and publish time.
func TestReleaseOnTheLastAttempt(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing", natsleasebus.WithMaxAttempts(2))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	msg, err := natsleasebus.Publish(ctx, bus, "orders", "o1", queue.WithHeaders(map[string]string{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	poll := func() queue.Delivery[string] {
		t.Helper()
		ds, err := sub.Poll(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}
	d := poll()
	if err := sub.Nack(d.LeaseID, 0); err != nil {
		t.Fatal(err)
	}
	first := poll()
	for range 3 {
		if err := sub.Release(first.LeaseID); err != nil {
			t.Fatal(err)
		}
		d := poll()
		if d.Attempt != 2 || d.Message.ID != msg.ID || d.Message.Headers.Get("k") != "v" || !d.Message.PublishedAt.Equal(first.Message.PublishedAt) {
			t.Fatalf("after Release: %+v, want attempt 2 and the message as it was (%+v)", d, first)
		}
		first = d
	}
	if err := sub.Ack(first.LeaseID); err != nil {
		t.Fatal(err)
	}
	if dls := deadLettersOf(t, bus, "orders", "billing"); len(dls) != 0 {
		t.Fatalf("dead letters after Releases on the last attempt: %+v", dls)
	}
}

// TestExtendShorter: a lease extended to less than the visibility timeout
// comes back at its new deadline, not at the server's AckWait.
func TestExtendShorter(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing", natsleasebus.WithVisibilityTimeout(time.Minute), natsleasebus.WithPollSlice(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "o1"); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Poll(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := sub.Extend(ds[0].LeaseID, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	again, err := sub.Poll(pctx, 1)
	if err != nil || again[0].Attempt != 2 {
		t.Fatalf("after a short Extend: %v, %v; want the message back, attempt 2", again, err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("back after %v, before the extended deadline", took)
	}
}

func deadLettersOf(t *testing.T, bus *natsleasebus.Bus, topic, name string) []queue.DeadLetter[string] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	dls, err := natsleasebus.FetchDeadLetters[string](ctx, bus, topic, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return dls
}
