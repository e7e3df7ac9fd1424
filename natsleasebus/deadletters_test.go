package natsleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// dlFixture is a bus on a faulty connection with two subscriptions of
// "orders": billing, whose handle rejects every message of payloads, and
// audit, which acks them. It returns the ids the messages were published
// with.
func dlFixture(t *testing.T, payloads []string, opts ...natsleasebus.Option) (f *faults, bus *natsleasebus.Bus, billing, audit *natsleasebus.Subscription[string], ids map[string]uuid.UUID) {
	t.Helper()
	srv := startServer(t, t.TempDir(), -1)
	f = &faults{}
	bus = open(t, connectFaulty(t, srv.srv.ClientURL(), f), append([]natsleasebus.Option{natsleasebus.WithMemoryStorage()}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	sub := func(name string) *natsleasebus.Subscription[string] {
		s, err := natsleasebus.Subscribe[string](ctx, bus, "orders", name, natsleasebus.WithPollSlice(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	billing, audit = sub("billing"), sub("audit")
	ids = map[string]uuid.UUID{}
	for _, p := range payloads {
		m, err := natsleasebus.Publish(ctx, bus, "orders", p)
		if err != nil {
			t.Fatal(err)
		}
		ids[p] = m.ID
	}
	for _, s := range []*natsleasebus.Subscription[string]{billing, audit} {
		for n := 0; n < len(payloads); {
			ds, err := s.Poll(ctx, len(payloads))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if s == billing {
					err = s.Reject(d.LeaseID, errors.New("bad "+d.Payload))
				} else {
					err = s.Ack(d.LeaseID)
				}
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
	return f, bus, billing, audit, ids
}

// drainDistinct polls sub until it has want messages, then checks that
// no other message comes within quiet; it fails on a message delivered
// twice.
func drainDistinct(t *testing.T, sub *natsleasebus.Subscription[string], want int, quiet time.Duration) map[string]queue.Delivery[string] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	got := map[string]queue.Delivery[string]{}
	for len(got) < want {
		ds, err := sub.Poll(ctx, want)
		if err != nil {
			t.Fatalf("after %d of %d: %v", len(got), want, err)
		}
		for _, d := range ds {
			if _, dup := got[d.Payload]; dup {
				t.Fatalf("%q delivered twice", d.Payload)
			}
			got[d.Payload] = d
			if err := sub.Ack(d.LeaseID); err != nil {
				t.Fatal(err)
			}
		}
	}
	expectNothing(t, sub, quiet)
	return got
}

func expectNothing(t *testing.T, sub *natsleasebus.Subscription[string], quiet time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), quiet)
	defer cancel()
	if ds, err := sub.Poll(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s/%s: got %v, %v; want nothing", sub.Topic(), sub.Name(), ds, err)
	}
}

func deadLetters(t *testing.T, bus *natsleasebus.Bus) []queue.DeadLetter[string] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	dls, err := natsleasebus.FetchDeadLetters[string](ctx, bus, "orders", "billing", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, dl := range dls {
		if dl.Subscription != "billing" || dl.Topic != "orders" {
			t.Errorf("dead letter of %s on %q, want billing on orders", dl.Subscription, dl.Topic)
		}
	}
	return dls
}

// TestRedrive: the matching dead letters go back to their subscription
// alone, as fresh messages with their ids, and leave the dead letters'
// stream; the others stay.
func TestRedrive(t *testing.T) {
	_, bus, billing, audit, ids := dlFixture(t, []string{"m0", "m1", "m2"})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	n, err := natsleasebus.Redrive(ctx, bus, "orders", "billing", func(dl queue.DeadLetter[string]) bool {
		return dl.Message.Payload != "m2"
	})
	if err != nil || n != 2 {
		t.Fatalf("Redrive: %d, %v; want 2", n, err)
	}
	if dls := deadLetters(t, bus); len(dls) != 1 || dls[0].Message.Payload != "m2" {
		t.Fatalf("dead letters left: %+v, want m2 alone", dls)
	}
	got := drainDistinct(t, billing, 2, 300*time.Millisecond)
	for _, p := range []string{"m0", "m1"} {
		d, ok := got[p]
		if !ok || d.Attempt != 1 || d.Message.ID != ids[p] || d.Message.Topic != "orders" {
			t.Errorf("redriven %s: %+v, want attempt 1, id %v", p, d, ids[p])
		}
		if d.Message.Headers.Get(headerRedrivenFrom) != "" {
			t.Errorf("redriven %s shows the internal header %s", p, headerRedrivenFrom)
		}
	}
	expectNothing(t, audit, 200*time.Millisecond)
	if n, err := natsleasebus.Redrive(ctx, bus, "orders", "billing", func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload != "m2" }); n != 0 || err != nil {
		t.Fatalf("second Redrive: %d, %v; want 0", n, err)
	}
	if _, err := natsleasebus.Redrive(ctx, bus, "orders", "nobody", func(queue.DeadLetter[string]) bool { return true }); !errors.Is(err, broker.ErrSubscriptionNotFound) {
		t.Fatalf("Redrive of a missing subscription: %v", err)
	}
	if _, err := natsleasebus.Redrive[string](ctx, bus, "orders", "billing", nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("Redrive(nil): %v", err)
	}
}

// TestRedriveConcurrent: two Redrives of the same dead letters at once
// put each back once.
func TestRedriveConcurrent(t *testing.T) {
	const n = 20
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = fmt.Sprintf("m%02d", i)
	}
	_, bus, billing, _, _ := dlFixture(t, payloads)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	var (
		wg     sync.WaitGroup
		counts [2]int
		errs   [2]error
	)
	for i := range counts {
		wg.Go(func() {
			counts[i], errs[i] = natsleasebus.Redrive(ctx, bus, "orders", "billing", func(queue.DeadLetter[string]) bool { return true })
		})
	}
	wg.Wait()
	if counts[0]+counts[1] != n || errs[0] != nil || errs[1] != nil {
		t.Fatalf("Redrives: %v %v, want %d in all", counts, errs, n)
	}
	drainDistinct(t, billing, n, 300*time.Millisecond)
	if dls := deadLetters(t, bus); len(dls) != 0 {
		t.Fatalf("%d dead letters left", len(dls))
	}
}

// TestRedriveAfterAFailedDelete: a Redrive that republished a dead letter
// but could not delete it fails; the next one deletes it without
// republishing it again.
func TestRedriveAfterAFailedDelete(t *testing.T) {
	f, bus, billing, _, _ := dlFixture(t, []string{"m0"})
	f.armPrefix([]byte("$JS.API.STREAM.MSG.DELETE."), dropFrame, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	n, err := natsleasebus.Redrive(ctx, bus, "orders", "billing", func(queue.DeadLetter[string]) bool { return true })
	cancel()
	if err == nil || f.hits() != 1 {
		t.Fatalf("Redrive with its delete lost: %d, %v (%d deletes lost)", n, err, f.hits())
	}
	t.Log(err)
	ctx, cancel = context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	n, err = natsleasebus.Redrive(ctx, bus, "orders", "billing", func(queue.DeadLetter[string]) bool { return true })
	if err != nil || n != 0 {
		t.Fatalf("second Redrive: %d, %v; want 0 (already republished)", n, err)
	}
	if dls := deadLetters(t, bus); len(dls) != 0 {
		t.Fatalf("%d dead letters left", len(dls))
	}
	drainDistinct(t, billing, 1, 300*time.Millisecond)
}

// TestDeadLetterLimits: the dead letters' stream keeps at most the
// configured number per subscription, the oldest dropped; a stream Open
// creates is bounded by default, and an existing one that differs from
// the options is refused.
func TestDeadLetterLimits(t *testing.T) {
	_, bus, _, _, _ := dlFixture(t, []string{"m0", "m1", "m2"}, natsleasebus.WithDeadLetterLimits(natsleasebus.DeadLetterLimits{PerSubscription: 2, MaxAge: time.Hour}))
	dls := deadLetters(t, bus)
	if len(dls) != 2 || dls[0].Message.Payload != "m1" || dls[1].Message.Payload != "m2" {
		t.Fatalf("dead letters %+v, want m1 and m2", dls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	st, err := bus.JetStream().Stream(ctx, defaultStream+"_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxMsgsPerSubject != 2 || c.MaxAge != time.Hour {
		t.Errorf("dead-letter stream %+v", c)
	}
	_, err = natsleasebus.OpenJetStream(ctx, bus.JetStream(), natsleasebus.WithDeadLetterLimits(natsleasebus.DeadLetterLimits{PerSubscription: 5}))
	var mm *natsleasebus.ConfigMismatchError
	if !errors.As(err, &mm) || mm.Name != defaultStream+"_DLQ" || mm.Diffs[0].Setting != "MaxMsgsPerSubject" {
		t.Fatalf("Open with other dead-letter limits: %v", err)
	}
	other, err := natsleasebus.OpenJetStream(ctx, bus.JetStream(), natsleasebus.WithStream("OTHER"), natsleasebus.WithSubjectPrefix("other"))
	if err != nil {
		t.Fatal(err)
	}
	st, err = other.JetStream().Stream(ctx, "OTHER_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxMsgsPerSubject != defaultDeadLettersPerSubscription || c.Storage != js.FileStorage {
		t.Errorf("default dead-letter stream %+v", c)
	}
	if _, err := natsleasebus.OpenJetStream(ctx, bus.JetStream(), natsleasebus.WithDeadLetterLimits(natsleasebus.DeadLetterLimits{MaxMsgs: -2})); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("MaxMsgs -2: %v", err)
	}
}
