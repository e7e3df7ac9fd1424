package natsleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// TestPublishDelay: a delayed message is a JetStream message schedule; it
// reaches every subscription when due (one made after the publish too:
// it fans out when due), on its first attempt, keeping its publish time,
// and the streams are left empty.
func TestPublishDelay(t *testing.T) {
	bus, billing, audit := twoSubs(t, natsleasebus.WithDelays())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	const delay = 600 * time.Millisecond
	later, err := natsleasebus.Publish(ctx, bus, "orders", "later", queue.WithDelay(delay),
		queue.WithHeaders(map[string]string{"k": "v"}), queue.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := natsleasebus.PublishBatch(ctx, bus, "orders", []string{"b1", "b2"}, queue.WithDelay(delay))
	if err != nil {
		t.Fatal(err)
	}
	late, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "late")
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "now", queue.WithDelay(0)); err != nil {
		t.Fatal(err)
	}
	subs := []*natsleasebus.Subscription[string]{billing, audit, late}
	for _, sub := range subs {
		ds, err := sub.Poll(ctx, 5)
		if err != nil || len(ds) != 1 || ds[0].Payload != "now" {
			t.Fatalf("first Poll: %v, %v; want only the undelayed message", ds, err)
		}
		if err := sub.Ack(ds[0].LeaseID); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range subs {
		got := map[string]queue.Delivery[string]{}
		for len(got) < 3 {
			ds, err := sub.Poll(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				got[d.Payload] = d
				if err := sub.Ack(d.LeaseID); err != nil {
					t.Fatal(err)
				}
			}
		}
		d := got["later"]
		if d.ID != later.ID || d.Attempt != 1 || !d.PublishedAt.Equal(later.PublishedAt) || d.Headers.Get("k") != "v" || d.Topic != "orders" {
			t.Fatalf("delayed delivery %+v, want id %v, attempt 1, published %v, header k=v", d, later.ID, later.PublishedAt)
		}
		if since := time.Since(later.PublishedAt); since < delay {
			t.Fatalf("delivered %v after the publish, before its delay %v", since, delay)
		}
		for i, m := range msgs {
			if b := got[m.Payload]; b.ID != m.ID || b.Attempt != 1 {
				t.Fatalf("batch message %d delivered as %+v, want id %v on attempt 1", i, b, m.ID)
			}
		}
	}
	// Every subscription settled them: the topics' stream is empty. The
	// schedules are gone (each purged as it fired), the three due copies
	// stay for dueRetention.
	for _, c := range []struct{ stream, filter string }{
		{defaultStream, ">"},
		{defaultStream + "_SCHED", "leasebus.delay.>"},
	} {
		if err := eventually(ctx, func() error {
			if n := streamSubjects(t, bus, c.stream, c.filter); n != 0 {
				return fmt.Errorf("%d messages left on %s in %s", n, c.filter, c.stream)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamSubjects(t, bus, defaultStream+"_SCHED", "leasebus.due.>"); n != 3 { // one each, whatever the subscriptions
		t.Fatalf("%d due copies, want 3", n)
	}
}

// streamSubjects returns how many messages stream name holds on the
// subjects filter matches.
func streamSubjects(t *testing.T, bus *natsleasebus.Bus, name, filter string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	st, err := bus.JetStream().Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, js.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestPublishOptionsRefused: without WithDelays a delay is refused, and so
// are a negative delay, a priority and an ordering key; nothing is
// published.
func TestPublishOptionsRefused(t *testing.T) {
	bus, billing, _ := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for name, c := range map[string]struct {
		opt  queue.PublishOption
		want error
	}{
		"delay without WithDelays": {queue.WithDelay(time.Second), natsleasebus.ErrUnsupported},
		"negative delay":           {queue.WithDelay(-time.Second), queue.ErrInvalidArgument},
		"priority":                 {queue.WithPriority(queue.PriorityHigh), natsleasebus.ErrUnsupported},
		"invalid priority":         {queue.WithPriority(queue.Priority(99)), queue.ErrInvalidArgument},
		"ordering key":             {queue.WithKey("customer-1"), natsleasebus.ErrUnsupported},
	} {
		if _, err := natsleasebus.Publish(ctx, bus, "orders", name, c.opt); !errors.Is(err, c.want) {
			t.Errorf("Publish with %s: %v, want an error matching %v", name, err, c.want)
		}
		if _, err := natsleasebus.PublishBatch(ctx, bus, "orders", []string{name}, c.opt); !errors.Is(err, c.want) {
			t.Errorf("PublishBatch with %s: %v, want an error matching %v", name, err, c.want)
		}
	}
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "x", queue.WithKey("k")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ErrUnsupported does not match errors.ErrUnsupported: %v", err)
	}
	// The defaults of the refused options are accepted.
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "plain", queue.WithPriority(queue.PriorityNormal), queue.WithKey(""), queue.WithDelay(0)); err != nil {
		t.Fatal(err)
	}
	ds, err := billing.Poll(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Payload != "plain" {
		t.Fatalf("Poll: %v, %v; want the one plain message", ds, err)
	}
}

// TestPublishDelayDedup: a delayed publish repeated with its dedup id
// within the window returns the original, read back from its schedule.
func TestPublishDelayDedup(t *testing.T) {
	bus, billing, _ := twoSubs(t, natsleasebus.WithDelays())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	first, err := natsleasebus.Publish(ctx, bus, "orders", "original", queue.WithDelay(300*time.Millisecond), queue.WithDedupID("d-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := natsleasebus.Publish(ctx, bus, "orders", "copy", queue.WithDelay(300*time.Millisecond), queue.WithDedupID("d-1"))
	if err != nil || again.ID != first.ID || again.Payload != "original" || !again.PublishedAt.Equal(first.PublishedAt) {
		t.Fatalf("duplicate: %+v, %v; want the original %+v", again, err, first)
	}
	ds, err := billing.Poll(ctx, 2)
	if err != nil || len(ds) != 1 || ds[0].ID != first.ID {
		t.Fatalf("Poll: %v, %v; want the original once", ds, err)
	}
	if err := billing.Ack(ds[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if ds, err := billing.Poll(short, 1); len(ds) != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Poll: %v, %v; want nothing", ds, err)
	}
}

// TestOpenWithDelaysOnAnExistingBus: a topics' stream made without
// WithDelays does not source the schedules: Open WithDelays refuses it,
// naming the setting and changing nothing, unless WithUpdateStreams adds
// the source (keeping the stream's duplicate window, which Redrive and
// Release rely on).
func TestOpenWithDelaysOnAnExistingBus(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	open(t, nc, natsleasebus.WithMemoryStorage())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, err := natsleasebus.Open(ctx, nc, natsleasebus.WithDelays())
	var mm *natsleasebus.ConfigMismatchError
	if !errors.As(err, &mm) || mm.Name != defaultStream || mm.Diffs[0].Setting != "Sources" || mm.Diffs[0].Option != "WithDelays" {
		t.Fatalf("Open WithDelays on a bus without: %v", err)
	}
	bus := open(t, nc, natsleasebus.WithDelays(), natsleasebus.WithUpdateStreams())
	c := streamConfig(t, bus.JetStream(), defaultStream)
	if len(c.Sources) != 1 || c.Sources[0].Name != defaultStream+"_SCHED" || c.Duplicates != 2*time.Minute {
		t.Fatalf("after the update: sources %+v, duplicate window %v", c.Sources, c.Duplicates)
	}
	if sc := streamConfig(t, bus.JetStream(), defaultStream+"_SCHED"); sc.Storage != js.MemoryStorage {
		t.Errorf("schedules' stream storage %v, want memory as the others", sc.Storage)
	}
	// Bound as it is now, with or without the option.
	open(t, nc, natsleasebus.WithDelays())
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := natsleasebus.Publish(ctx, bus, "orders", "later", queue.WithDelay(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Poll(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].Payload != "later" {
		t.Fatalf("Poll: %v, %v", ds, err)
	}
	// A schedules' stream that does not allow schedules is refused.
	if _, err := bus.JetStream().CreateStream(ctx, js.StreamConfig{Name: "PLAIN_SCHED", Subjects: []string{"plain.delay.>", "plain.due.>"}, Storage: js.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	_, err = natsleasebus.Open(ctx, nc, natsleasebus.WithStream("PLAIN"), natsleasebus.WithSubjectPrefix("plain"), natsleasebus.WithDelays())
	if !errors.As(err, &mm) || mm.Name != "PLAIN_SCHED" || mm.Diffs[0].Setting != "AllowMsgSchedules, AllowMsgTTL" {
		t.Fatalf("Open WithDelays on a schedules' stream without schedules: %v", err)
	}
}
