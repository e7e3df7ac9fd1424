package sourcetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// testPoolCancel: Registry.Cancel stops three running jobs, each settled
// over the backend as its caller chose, whatever the handler returns: "r"
// retried with its attempt spent (it comes back as attempt 2), "d"
// dead-lettered with reason cancelled and the cancellation as its last
// error (retried on a
// source that cannot reject), "x" deleted (acked: it never comes back).
// Each handler's context ends with a cause matching poller.ErrCancelled.
func (s *suite) testPoolCancel(t *testing.T) {
	topic := s.topic(t)
	o := s.opts()
	o.RetryInitial = s.unit
	sub := s.subscribe(t, topic, "pool-cancel", o)
	s.publish(t, topic, "r", "d", "x")
	started := make(chan queue.Delivery[string], 8)
	causes := make(chan error, 8)
	reg := poller.NewRegistry()
	p, events := s.runCancel(t, sub, reg, started, causes)
	running := map[string]queue.Delivery[string]{}
	for len(running) < 3 {
		d := recv(t, s.bounded(t), started, "a handler start")
		running[d.Payload] = d
	}
	for payload, as := range map[string]poller.CancelAs{"r": poller.CancelRetry, "d": poller.CancelDeadLetter, "x": poller.CancelDelete} {
		ok(t, "Cancel "+payload, reg.Cancel(running[payload].ID, as))
	}
	for range 3 {
		errIs(t, "the cancelled handler's context.Cause", recv(t, s.bounded(t), causes, "a handler's cause"), poller.ErrCancelled)
	}
	_, rejects := sub.(backend.Rejecter)
	want := map[string]poller.Outcome{"r": poller.OutcomeRetried, "d": poller.OutcomeRetried, "x": poller.OutcomeAcked}
	if rejects {
		want["d"] = poller.OutcomeDeadLettered
	}
	for range 3 {
		ev := s.settledAny(t, events)
		if w, seen := want[ev.Delivery.Payload]; !seen || ev.Outcome != w || ev.SourceErr != nil {
			t.Fatalf("%s: %v (source err %v), want %v", ev.Delivery.Payload, ev.Outcome, ev.SourceErr, w)
		}
		delete(want, ev.Delivery.Payload)
	}
	errIs(t, "Cancel of a job no longer running", reg.Cancel(running["x"].ID, poller.CancelDelete), poller.ErrNotRunning)
	if !rejects {
		return // d comes back too, in an order the backend decides
	}
	dl := s.deadLetters(t, sub, 1)[0]
	if dl.Payload != "d" || dl.Reason != queue.ReasonCancelled || !strings.Contains(dl.LastError, "cancelled") {
		t.Fatalf("dead letter %+v, want d, reason cancelled, its last error the cancellation", dl)
	}
	if s.caps.FakeClock { // r's retry, after its backoff
		ok(t, "AwaitQuiet", p.AwaitQuiet(s.bounded(t)))
		s.elapse(t, s.unit)
	}
	if d := recv(t, s.bounded(t), started, "r's second attempt"); d.Payload != "r" || d.Attempt != 2 {
		t.Fatalf("after the cancels, %q attempt %d started, want r attempt 2", d.Payload, d.Attempt)
	}
	if ev := s.settled(t, events, "r"); ev.Outcome != poller.OutcomeAcked {
		t.Fatalf("r's second attempt: %v", ev.Outcome)
	}
	s.expectNoneAfter(t, sub, s.vis+s.unit) // x was deleted, r acked
}

// recv receives from ch before ctx ends.
func recv[V any](t *testing.T, ctx context.Context, ch <-chan V, what string) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("no %s", what)
		var zero V
		return zero
	}
}

// runCancel runs a pool WithRegistry(reg) over sub until the test ends:
// its handler reports each delivery on started; on a first attempt it
// then waits for its context to end, sends the context's cause on causes
// and returns an error of its own, which Cancel's choice overrides; on a
// later attempt it returns nil.
func (s *suite) runCancel(t *testing.T, sub Subscription, reg *poller.Registry, started chan<- queue.Delivery[string], causes chan<- error) (*poller.Poller[string], <-chan poller.Event[string]) {
	t.Helper()
	events := make(chan poller.Event[string], 64)
	p, err := poller.New[string](sub, func(ctx context.Context, d queue.Delivery[string]) error {
		started <- d
		if d.Attempt > 1 {
			return nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return errors.New("the handler's own error")
	}, poller.WithWorkers(3), poller.WithRegistry(reg, "cancel"),
		poller.WithObserver(func(ev poller.Event[string]) { events <- ev }))
	ok(t, "poller.New", err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		ok(t, "Run", <-ran)
	})
	return p, events
}
