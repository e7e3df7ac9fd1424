package poller_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hangGuard bounds every wait in these tests, so that a bug shows as a
// failure rather than a hung test binary. It is never a timing assertion.
const hangGuard = 10 * time.Second

// newBroker returns a broker on a mock clock with a 10s visibility timeout,
// the topic "jobs" and the subscription "workers" on it.
func newBroker(t *testing.T, opts ...broker.SubscribeOption) (*clock.Mock, *broker.Broker[string], *broker.Subscription[string]) {
	t.Helper()
	mock := clock.NewMock()
	b, sub := newBrokerOn(t, mock, opts...)
	return mock, b, sub
}

// newBrokerOn is newBroker on the clock clk (clock.New() in a synctest
// bubble). The broker is closed when the test ends.
func newBrokerOn(t *testing.T, clk clock.Clock, opts ...broker.SubscribeOption) (*broker.Broker[string], *broker.Subscription[string]) {
	t.Helper()
	b, err := broker.New[string](broker.WithClock(clk), broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTopic("jobs"); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe("jobs", "workers", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b, sub
}

func publish(t *testing.T, b *broker.Broker[string], payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		if _, err := b.Publish(context.Background(), "jobs", p); err != nil {
			t.Fatal(err)
		}
	}
}

// running is a Run in the background; stop cancels it and returns its
// result.
type running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned err
	err    error
}

func start[T any](t *testing.T, p *poller.Poller[T]) *running {
	t.Helper()
	return startRun(t, context.Background(), p.Run)
}

// startRun runs run(ctx) (p.Run or p.RunUntilIdle) in the background, and
// makes sure it has returned when the test ends.
func startRun(t *testing.T, ctx context.Context, run func(context.Context) error) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = run(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(hangGuard):
			t.Error("the run did not return")
		}
	})
	return r
}

// stop cancels the run and returns Run's result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	return r.wait(t)
}

// wait returns Run's result without cancelling it.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	recv(t, r.done)
	return r.err
}

// returned reports whether Run has returned.
func (r *running) returned() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// recv receives from ch, failing the test if nothing comes.
func recv[V any](t *testing.T, ch <-chan V) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangGuard):
		t.Fatalf("nothing received in %v", hangGuard)
		panic("unreachable")
	}
}

// eventually waits until cond holds, yielding the processor between
// checks. It is for states no channel announces.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached in %v", hangGuard)
		}
		runtime.Gosched()
	}
}

// awaitParked waits until n Polls on sub are parked on the clock.
func awaitParked(t *testing.T, sub *broker.Subscription[string], n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := sub.AwaitParked(ctx, n); err != nil {
		t.Fatalf("AwaitParked(%d): %v", n, err)
	}
}

// events collects an observer's events on a channel.
type events[T any] struct {
	ch chan poller.Event[T]
}

func newEvents[T any]() *events[T] { return &events[T]{ch: make(chan poller.Event[T], 1024)} }

func (e *events[T]) option() poller.Option {
	return poller.WithObserver(func(ev poller.Event[T]) { e.ch <- ev })
}

// next returns the next event, which must have outcome want.
func (e *events[T]) next(t *testing.T, want poller.Outcome) poller.Event[T] {
	t.Helper()
	ev := recv(t, e.ch)
	if ev.Outcome != want {
		t.Fatalf("event %v (err %v, source err %v), want %v", ev.Outcome, ev.Err, ev.SourceErr, want)
	}
	return ev
}

// none checks that no event is pending.
func (e *events[T]) none(t *testing.T) {
	t.Helper()
	select {
	case ev := <-e.ch:
		t.Fatalf("unexpected event %v (err %v, source err %v)", ev.Outcome, ev.Err, ev.SourceErr)
	default:
	}
}

// handlerCall is one call of a blocking test handler.
type handlerCall struct {
	ctx  context.Context
	d    queue.Delivery[string]
	done chan error // the handler returns what is sent here
}

// blockingHandler returns a handler that announces each call on calls and
// returns what the test sends on the call's done channel.
func blockingHandler(calls chan<- handlerCall) poller.Handler[string] {
	return func(ctx context.Context, d queue.Delivery[string]) error {
		c := handlerCall{ctx: ctx, d: d, done: make(chan error)}
		calls <- c
		return <-c.done
	}
}
