package poller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// A pool made WithRegistry shows in it while it runs: its settings, and
// each running handler with its message, start time, deadline and
// extensions, the longest-running first; it leaves when Run returns.
func TestRegistryShowsRunningHandlers(t *testing.T) {
	mock, b, sub := newBroker(t) // visibility timeout 10s
	reg := new(poller.Registry)  // the zero Registry is ready (the console's tests use NewRegistry)
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(remote{sub}, blockingHandler(calls), poller.WithClock(mock), poller.WithWorkers(2),
		poller.WithExtension(0, time.Minute), poller.WithRegistry(reg, "billing"), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Pools(); len(got) != 0 {
		t.Fatalf("before Run: %+v, want no pool", got)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "first")
	c1 := recv(t, calls)
	mock.Add(3 * time.Second)
	publish(t, b, "second")
	c2 := recv(t, calls)

	pools := reg.Pools()
	if len(pools) != 1 {
		t.Fatalf("pools %+v, want one", pools)
	}
	ps := pools[0]
	if ps.Name != "billing" || ps.Workers != 2 || !ps.Started.Equal(epoch) || !ps.Now.Equal(epoch.Add(3*time.Second)) || ps.Draining {
		t.Fatalf("pool %+v", ps)
	}
	if ps.Stats.Running != 2 || len(ps.Handlers) != 2 {
		t.Fatalf("pool %+v, want two handlers running", ps)
	}
	h0, h1 := ps.Handlers[0], ps.Handlers[1]
	if h0.MessageID != c1.d.ID || !h0.Started.Equal(epoch) || !h0.Deadline.Equal(epoch.Add(10*time.Second)) ||
		h0.Attempt != 1 || h0.Topic != "jobs" || h0.LeaseID != c1.d.LeaseID || h0.Extensions != 0 || h0.Batch != 1 {
		t.Fatalf("oldest handler %+v, want the first message's, started at 0s", h0)
	}
	if h1.MessageID != c2.d.ID || !h1.Started.Equal(epoch.Add(3*time.Second)) {
		t.Fatalf("second handler %+v, want the second message's, started at 3s", h1)
	}

	// At 8s the first lease is extended (2s margin) to 18s.
	mock.Add(5 * time.Second)
	if e := ev.next(t, poller.OutcomeExtended); e.Delivery.ID != c1.d.ID {
		t.Fatalf("extended %v, want the first message", e.Delivery.ID)
	}
	h0 = reg.Pools()[0].Handlers[0]
	if h0.Extensions != 1 || !h0.Deadline.Equal(epoch.Add(18*time.Second)) {
		t.Fatalf("after the extension: %+v, want 1 extension and the deadline at 18s", h0)
	}

	// A handler that returns leaves the list before its outcome is told.
	c1.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if hs := reg.Pools()[0].Handlers; len(hs) != 1 || hs[0].MessageID != c2.d.ID {
		t.Fatalf("after the first returned: %+v, want the second alone", hs)
	}
	c2.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := reg.Pools(); len(got) != 0 {
		t.Fatalf("after Run returned: %+v, want no pool", got)
	}
}

func TestRegistryRefusesBadArguments(t *testing.T) {
	_, _, sub := newBroker(t)
	h := func(ctx context.Context, d queue.Delivery[string]) error { return nil }
	for name, o := range map[string]poller.Option{
		"nil registry": poller.WithRegistry(nil, "x"),
		"empty name":   poller.WithRegistry(poller.NewRegistry(), ""),
	} {
		if _, err := poller.New(sub, h, o); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}
