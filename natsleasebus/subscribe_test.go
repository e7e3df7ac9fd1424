package natsleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/natsleasebus"
)

func consumerConfig(t *testing.T, c js.Consumer) js.ConsumerConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.Config
}

// TestSubscribeRefusesOtherSettings: a second Subscribe whose explicit
// options differ from the shared consumer's fails with a typed error and
// leaves the consumer as the first handle set it.
func TestSubscribeRefusesOtherSettings(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	first, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing",
		natsleasebus.WithVisibilityTimeout(30*time.Second), natsleasebus.WithMaxAttempts(5))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing",
		natsleasebus.WithVisibilityTimeout(2*time.Second), natsleasebus.WithMaxAttempts(1))
	if err == nil {
		second.Close()
	}
	var mm *natsleasebus.ConfigMismatchError
	if !errors.As(err, &mm) || !errors.Is(err, natsleasebus.ErrConfigMismatch) {
		t.Fatalf("second Subscribe with other settings: err = %v, want a *ConfigMismatchError", err)
	}
	if mm.Kind != "consumer" || mm.Name != "orders_billing" || len(mm.Diffs) != 2 || mm.Diffs[0].Setting != "AckWait" || mm.Diffs[0].Option != "WithVisibilityTimeout" {
		t.Errorf("mismatch %+v", mm)
	}
	t.Log(err)
	if c := consumerConfig(t, first.Consumer()); c.AckWait != 30*time.Second {
		t.Errorf("the refused Subscribe changed the consumer: AckWait %v", c.AckWait)
	}
}

// TestSubscribeBindsAsItIs: a Subscribe with no options binds to the
// consumer as it is, and its deliveries carry the consumer's limits.
func TestSubscribeBindsAsItIs(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	first, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing",
		natsleasebus.WithVisibilityTimeout(20*time.Second), natsleasebus.WithMaxAttempts(3), natsleasebus.WithMaxInFlight(7))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	before := consumerConfig(t, first.Consumer())
	second, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing")
	if err != nil {
		t.Fatalf("Subscribe with no options: %v", err)
	}
	defer second.Close()
	after := consumerConfig(t, first.Consumer())
	if after.AckWait != before.AckWait || after.MaxDeliver != before.MaxDeliver || after.MaxAckPending != 7 {
		t.Errorf("a Subscribe with no options changed the consumer: %+v, was %+v", after, before)
	}
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "o1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ds, err := second.Poll(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	if d.MaxAttempts != 3 {
		t.Errorf("delivery MaxAttempts %d, want the consumer's 3", d.MaxAttempts)
	}
	if lease := d.Deadline.Sub(start); lease < 19*time.Second || lease > 21*time.Second+time.Since(start) {
		t.Errorf("delivery deadline %v after the Poll, want the consumer's 20s", lease)
	}
	if err := second.Ack(d.LeaseID); err != nil {
		t.Fatal(err)
	}
}

// TestSubscribeUpdatesWhenAsked: WithUpdateConsumer changes the settings
// the options name and keeps the others the consumer has.
func TestSubscribeUpdatesWhenAsked(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	first, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing",
		natsleasebus.WithVisibilityTimeout(20*time.Second), natsleasebus.WithMaxInFlight(7))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing",
		natsleasebus.WithVisibilityTimeout(5*time.Second), natsleasebus.WithUpdateConsumer())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if c := consumerConfig(t, first.Consumer()); c.AckWait != 5*time.Second || c.MaxAckPending != 7 {
		t.Errorf("after the update: AckWait %v MaxAckPending %d, want 5s and the kept 7", c.AckWait, c.MaxAckPending)
	}
}
