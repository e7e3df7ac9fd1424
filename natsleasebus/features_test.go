package natsleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// twoSubs is a bus with two subscriptions of "orders".
func twoSubs(t *testing.T, opts ...natsleasebus.Option) (*natsleasebus.Bus, *natsleasebus.Subscription[string], *natsleasebus.Subscription[string]) {
	t.Helper()
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), append([]natsleasebus.Option{natsleasebus.WithMemoryStorage()}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	var subs [2]*natsleasebus.Subscription[string]
	for i, name := range []string{"billing", "audit"} {
		s, err := natsleasebus.Subscribe[string](ctx, bus, "orders", name, natsleasebus.WithPollSlice(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		subs[i] = s
	}
	return bus, subs[0], subs[1]
}

func payloads(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("m%02d", i)
	}
	return out
}

// TestStats: Visible, InFlight and Delivered from the consumer's info.
func TestStats(t *testing.T) {
	bus, billing, _ := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := natsleasebus.PublishBatch(ctx, bus, "orders", payloads(3)); err != nil {
		t.Fatal(err)
	}
	ds, err := billing.Poll(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := billing.Stats(ctx)
	if err != nil || st.Visible != 2 || st.InFlight != 1 || st.Delivered != 1 {
		t.Fatalf("Stats: %+v, %v; want 2 visible, 1 in flight, 1 delivered", st, err)
	}
	if err := billing.Nack(ds[0].LeaseID, 0); err != nil {
		t.Fatal(err)
	}
	drainDistinct(t, billing, 3, 100*time.Millisecond)
	if st, err := billing.Stats(ctx); err != nil || st.Visible != 0 || st.InFlight != 0 || st.Delivered != 4 {
		t.Fatalf("Stats after the drain: %+v, %v; want 4 delivered, nothing left", st, err)
	}
}

// TestPurge: Purge drops what the subscription holds, in flight included,
// and nothing of the other subscription's.
func TestPurge(t *testing.T) {
	bus, billing, audit := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := natsleasebus.PublishBatch(ctx, bus, "orders", payloads(5)); err != nil {
		t.Fatal(err)
	}
	ds, err := billing.Poll(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	n, err := billing.Purge(ctx)
	if err != nil || n != 5 {
		t.Fatalf("Purge: %d, %v; want 5", n, err)
	}
	if err := billing.Ack(ds[0].LeaseID); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Fatalf("Ack of a purged lease: %v", err)
	}
	expectNothing(t, billing, 300*time.Millisecond)
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "after"); err != nil {
		t.Fatal(err)
	}
	if got := drainDistinct(t, billing, 1, 100*time.Millisecond); got["after"].Attempt != 1 {
		t.Fatalf("after the purge: %+v", got)
	}
	drainDistinct(t, audit, 6, 100*time.Millisecond)
}

// TestPublishDedup: a publish with the WithDedupID of one in the window
// returns the original message and stores nothing.
func TestPublishDedup(t *testing.T) {
	bus, billing, audit := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	first, err := natsleasebus.Publish(ctx, bus, "orders", "o1", queue.WithDedupID("order-1"), queue.WithHeaders(map[string]string{"k": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	again, err := natsleasebus.Publish(ctx, bus, "orders", "o1 again", queue.WithDedupID("order-1"))
	if err != nil || again.ID != first.ID || again.Payload != "o1" || again.Headers.Get("k") != "v" {
		t.Fatalf("duplicate publish: %+v, %v; want the original %+v", again, err, first)
	}
	batch, err := natsleasebus.PublishBatch(ctx, bus, "orders", []string{"o2", "o1 once more"}, queue.WithDedupIDs([]string{"order-2", "order-1"}))
	if err != nil || batch[1].ID != first.ID || batch[0].ID == first.ID {
		t.Fatalf("batch with a duplicate: %+v, %v", batch, err)
	}
	got := drainDistinct(t, billing, 2, 300*time.Millisecond)
	if got["o1"].Message.ID != first.ID {
		t.Fatalf("delivered: %+v", got)
	}
	// Once every subscription has settled it, the original is gone: the
	// duplicate still stores nothing, and returns its own message.
	drainDistinct(t, audit, 2, 100*time.Millisecond)
	if dup, err := natsleasebus.Publish(ctx, bus, "orders", "o1 again", queue.WithDedupID("order-1")); err != nil || dup.Payload != "o1 again" {
		t.Fatalf("duplicate of a settled message: %+v, %v", dup, err)
	}
	expectNothing(t, billing, 200*time.Millisecond)
}

// TestPublishBatch: a batch arrives whole and in order, each message with
// its own ID; invalid options are refused.
func TestPublishBatch(t *testing.T) {
	bus, billing, _ := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	ps := payloads(50)
	msgs, err := natsleasebus.PublishBatch(ctx, bus, "orders", ps)
	if err != nil || len(msgs) != len(ps) {
		t.Fatalf("PublishBatch: %d, %v", len(msgs), err)
	}
	for i := 0; i < len(ps); {
		ds, err := billing.Poll(ctx, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Payload != ps[i] || d.Message.ID != msgs[i].ID {
				t.Fatalf("delivery %d: %q %v, want %q %v", i, d.Payload, d.Message.ID, ps[i], msgs[i].ID)
			}
			if err := billing.Ack(d.LeaseID); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	if msgs, err := natsleasebus.PublishBatch[string](ctx, bus, "orders", nil); msgs != nil || err != nil {
		t.Fatalf("empty batch: %v, %v", msgs, err)
	}
	for _, opt := range []queue.PublishOption{queue.WithDedupID("x"), queue.WithDedupIDs([]string{"a"})} {
		if _, err := natsleasebus.PublishBatch(ctx, bus, "orders", ps[:2], opt); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Fatalf("PublishBatch with a bad id option: %v", err)
		}
	}
}

// TestTryPollAndPollWithVisibility: TryPoll takes what is there without
// waiting; PollWithVisibility leases for its own timeout.
func TestTryPollAndPollWithVisibility(t *testing.T) {
	bus, billing, _ := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if ds := billing.TryPoll(5); len(ds) != 0 {
		t.Fatalf("TryPoll on nothing: %v", ds)
	}
	if _, err := natsleasebus.PublishBatch(ctx, bus, "orders", payloads(3)); err != nil {
		t.Fatal(err)
	}
	ds := billing.TryPoll(2)
	if len(ds) != 2 || ds[0].Payload != "m00" {
		t.Fatalf("TryPoll(2): %v", ds)
	}
	short, err := billing.PollWithVisibility(ctx, 1, 300*time.Millisecond)
	if err != nil || short[0].Payload != "m02" || time.Until(short[0].Deadline) > 300*time.Millisecond {
		t.Fatalf("PollWithVisibility: %v, %v", short, err)
	}
	// Back after its own 300ms, not the consumer's 30s.
	again, err := billing.Poll(ctx, 1)
	if err != nil || again[0].Payload != "m02" || again[0].Attempt != 2 {
		t.Fatalf("after the short lease: %v, %v", again, err)
	}
	if _, err := billing.PollWithVisibility(ctx, 1, 0); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("PollWithVisibility(0): %v", err)
	}
}

// TestTTL: a message whose TTL has passed when it is delivered is
// dead-lettered (Expired) instead; a redrive counts the TTL again.
func TestTTL(t *testing.T) {
	bus, billing, _ := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	stale, err := natsleasebus.Publish(ctx, bus, "orders", "stale", queue.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "fresh", queue.WithTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// The handles read the TTL on the real clock, at delivery: wait for
	// the instant it passes, as the message says, not for a guess.
	untilInstant(t, stale.PublishedAt.Add(time.Second))
	got := drainDistinct(t, billing, 1, 200*time.Millisecond)
	if _, ok := got["fresh"]; !ok {
		t.Fatalf("delivered %v, want fresh alone", got)
	}
	dls := deadLettersOf(t, bus, "orders", "billing")
	if len(dls) != 1 || dls[0].Message.Payload != "stale" || dls[0].Reason != queue.ReasonExpired || dls[0].Attempts != 0 {
		t.Fatalf("dead letters %+v, want stale, expired, 0 attempts", dls)
	}
	if n, err := natsleasebus.Redrive(ctx, bus, "orders", "billing", func(queue.DeadLetter[string]) bool { return true }); n != 1 || err != nil {
		t.Fatalf("Redrive: %d, %v", n, err)
	}
	if got := drainDistinct(t, billing, 1, 100*time.Millisecond); got["stale"].Attempt != 1 {
		t.Fatalf("redriven: %+v", got)
	}
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "x", queue.WithTTL(0)); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("WithTTL(0): %v", err)
	}
}

// TestFilterAndAckBatch: a handle's filter skips what it rejects (acked,
// never handed out); AckBatch acks many at once.
func TestFilterAndAckBatch(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "eu", natsleasebus.WithPollSlice(50*time.Millisecond),
		natsleasebus.WithFilter(func(m queue.Message[string]) bool { return m.Headers.Get("region") == "eu" }))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i, region := range []string{"eu", "us", "eu", "us", "eu"} {
		if _, err := natsleasebus.Publish(ctx, bus, "orders", fmt.Sprintf("%s%d", region, i), queue.WithHeaders(map[string]string{"region": region})); err != nil {
			t.Fatal(err)
		}
	}
	var ids []lease.ID
	var got []string
	for len(got) < 3 {
		ds, err := sub.Poll(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			got = append(got, d.Payload)
			ids = append(ids, d.LeaseID)
		}
	}
	if fmt.Sprint(got) != "[eu0 eu2 eu4]" {
		t.Fatalf("filtered deliveries %v", got)
	}
	if err := sub.AckBatch(ids); err != nil {
		t.Fatal(err)
	}
	if err := sub.AckBatch(ids[:1]); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Fatalf("AckBatch of an acked lease: %v", err)
	}
	expectNothing(t, sub, 200*time.Millisecond)
	if st, err := sub.Stats(ctx); err != nil || st.Visible != 0 || st.InFlight != 0 {
		t.Fatalf("Stats: %+v %v", st, err)
	}
	if _, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "x", natsleasebus.WithFilter(func(queue.Message[int]) bool { return true })); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("WithFilter of another type: %v", err)
	}
}

// TestInFlightCapAndRedeliveryOrder: a nacked message comes back before
// one never delivered, and the in-flight cap holds across handles.
//
// The cap is checked last, and the message after it is awaited leniently:
// a pull at the cap leaves the server a request that the client has
// stopped reading, and a message freed within moments (before the client's
// unsubscribe reaches the server) goes to it and comes back only when its
// lease expires, an attempt spent (a known defect of the backend, see the
// README). The short visibility keeps that wait within the test.
func TestInFlightCapAndRedeliveryOrder(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	bus := open(t, connect(t, srv.srv.ClientURL()), natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	a, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "capped", natsleasebus.WithMaxInFlight(2),
		natsleasebus.WithVisibilityTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "capped") // a second handle, bound as it is
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := natsleasebus.PublishBatch(ctx, bus, "orders", payloads(3)); err != nil {
		t.Fatal(err)
	}
	// One Poll returns what the server's pull brings, at least one: the
	// second may come in the next.
	var ds []queue.Delivery[string]
	for len(ds) < 2 {
		got, err := a.Poll(ctx, 2-len(ds))
		if err != nil {
			t.Fatalf("Poll: %v (after %v)", err, ds)
		}
		ds = append(ds, got...)
	}
	if len(ds) != 2 || ds[0].Payload != "m00" || ds[1].Payload != "m01" {
		t.Fatalf("polled %v, want m00 and m01", ds)
	}
	// m00 comes back before m02, which was never delivered.
	if err := a.Nack(ds[0].LeaseID, 0); err != nil {
		t.Fatal(err)
	}
	again, err := b.Poll(ctx, 1)
	if err != nil || len(again) != 1 || again[0].Payload != "m00" || again[0].Attempt != 2 {
		t.Fatalf("after the Nack: %v, %v; want m00 on attempt 2", again, err)
	}
	// Both handles hold one each: at the cap the server holds a no-wait
	// pull (about a second here) and answers it with nothing.
	if got := a.TryPoll(3); len(got) != 0 {
		t.Fatalf("a handle leased %d with the cap reached", len(got))
	}
	for _, settle := range []func() error{
		func() error { return a.Ack(ds[1].LeaseID) },
		func() error { return b.Ack(again[0].LeaseID) },
	} {
		if err := settle(); err != nil {
			t.Fatal(err)
		}
	}
	last, err := b.Poll(ctx, 3) // m02: at once, or after one lease if the stale pull took it
	if err != nil || len(last) != 1 || last[0].Payload != "m02" {
		t.Fatalf("last Poll: %v, %v; want m02", last, err)
	}
	if err := b.Ack(last[0].LeaseID); err != nil {
		t.Fatal(err)
	}
}

// TestPurgeCountsWhatWasJustPublished: Purge's count is exact at once
// after publishes the server has confirmed. The server counts a
// consumer's pending messages in a loop of its own, after it has answered
// the publish, one consumer after another; a count read from the
// consumer's info could miss what was just published (the suite's Purge
// case failed so, about 1 run in 40). Hundreds of other consumers on the
// subject keep that loop behind a Poll and the Purge that follow the
// publish.
func TestPurgeCountsWhatWasJustPublished(t *testing.T) {
	bus, billing, _ := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	st, err := bus.JetStream().Stream(ctx, defaultStream)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := st.CreateConsumer(ctx, js.ConsumerConfig{
			Durable: fmt.Sprintf("other%d", i), FilterSubject: bus.Subject("orders"), AckPolicy: js.AckExplicitPolicy, MemoryStorage: true,
		}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 50 {
		if _, err := natsleasebus.PublishBatch(ctx, bus, "orders", payloads(3)); err != nil {
			t.Fatal(err)
		}
		ds, err := billing.Poll(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := billing.Purge(ctx)
		if err != nil || got != 3 {
			t.Fatalf("round %d: Purge: %d, %v; want 3 (%d of them in flight)", round, got, err, len(ds))
		}
	}
}
