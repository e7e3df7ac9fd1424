package brokertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// failures is a TB that records what the helpers fail with.
type failures struct{ msgs []string }

func (f *failures) Helper() {}
func (f *failures) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// one checks that exactly one failure was recorded, containing want.
func (f *failures) one(t *testing.T, want string) {
	t.Helper()
	if len(f.msgs) != 1 || !strings.Contains(f.msgs[0], want) {
		t.Fatalf("failures %q, want one containing %q", f.msgs, want)
	}
	f.msgs = nil
}

// The recorder keeps each message's outcomes in order, from a real pool;
// RequireAcked and RequireHandled wait on them.
func TestRecorderAndRequireAcked(t *testing.T) {
	b, _ := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "t", "s")
	rec := brokertest.NewRecorder[string]()
	pool, err := poller.New(sub, func(_ context.Context, d queue.Delivery[string]) error {
		switch {
		case d.Payload == "dead":
			return poller.GiveUp(errors.New("bad input"))
		case d.Attempt == 1:
			return poller.RetryAfter(0, errors.New("try again"))
		}
		return nil
	}, rec.Option())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	defer func() { cancel(); <-done }()
	ms := brokertest.Publish(t, b, "t", "ok", "dead")
	ok, dead := ms[0].ID, ms[1].ID

	var f failures
	if d := brokertest.RequireAcked(&f, rec, ok); d.Attempt != 2 || len(f.msgs) != 0 {
		t.Fatalf("acked attempt %d, failures %q", d.Attempt, f.msgs)
	}
	brokertest.RequireAcked(&f, rec, dead)
	f.one(t, "was dead-lettered: attempt 1 dead-lettered (bad input)")
	evs := brokertest.RequireHandled(&f, rec, ok, 2)
	if len(evs) != 2 || evs[0].Outcome != poller.OutcomeRetried || evs[1].Outcome != poller.OutcomeAcked || len(f.msgs) != 0 {
		t.Fatalf("handled %v, failures %q", evs, f.msgs)
	}
	if got := rec.Events(ok); len(got) != 2 {
		t.Fatalf("events %v", got)
	}
	if got := rec.Events(uuid.New()); len(got) != 0 {
		t.Fatalf("events of an unknown message: %v", got)
	}
}

// RequireDeadLettered matches the message, the reason and the last error;
// each mismatch fails with what there is.
func TestRequireDeadLettered(t *testing.T) {
	b, _ := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithMaxAttempts(1)))
	sub := brokertest.Subscribe(t, b, "t", "s")
	m := brokertest.Publish(t, b, "t", "x")[0]
	d := sub.TryPoll(1)[0]
	if err := sub.Fail(d.LeaseID, errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	var f failures
	if dl := brokertest.RequireDeadLettered(&f, b, m.ID, queue.ReasonMaxAttempts, "boom"); dl.Attempts != 1 || len(f.msgs) != 0 {
		t.Fatalf("dead letter %+v, failures %q", dl, f.msgs)
	}
	brokertest.RequireDeadLettered(&f, b, m.ID, queue.ReasonRejected, "boom")
	f.one(t, `want rejected with last error "boom", have [max-attempts (s)`)
	brokertest.RequireDeadLettered(&f, b, m.ID, queue.ReasonMaxAttempts, "other")
	f.one(t, `last error "boom"`)
	brokertest.RequireDeadLettered(&f, b, uuid.New(), queue.ReasonMaxAttempts, "boom")
	f.one(t, "is not dead-lettered")
}

// RequireQueued counts every place a message waits; RequireNothingDelivered
// fails after any delivery.
func TestRequireQueuedAndNothingDelivered(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Minute)))
	sub := brokertest.Subscribe(t, b, "t", "s")
	var f failures
	brokertest.RequireQueued(&f, sub, 0)
	brokertest.Publish(t, b, "t", "a", "b")
	brokertest.RequireQueued(&f, sub, 2)
	brokertest.RequireNothingDelivered(&f, sub)
	if len(f.msgs) != 0 {
		t.Fatalf("failures %q", f.msgs)
	}
	d := sub.TryPoll(1)[0]
	brokertest.RequireQueued(&f, sub, 2) // one in flight, one visible
	brokertest.RequireNothingDelivered(&f, sub)
	f.one(t, "delivered 1 times")
	if err := sub.Ack(d.LeaseID); err != nil {
		t.Fatal(err)
	}
	brokertest.RequireQueued(&f, sub, 2)
	f.one(t, "holds 1 messages (visible 1, delayed 0, held back 0, in flight 0), want 2")
	mock.Add(time.Hour)
	brokertest.RequireQueued(&f, sub, 1)
	if len(f.msgs) != 0 {
		t.Fatalf("failures %q", f.msgs)
	}
}
