package poller_test

// AwaitQuiet: a test waits until the pool is at rest, so that what its
// next Add does depends only on what it did before. Each test checks the
// pool's state right after a wait, with no other wait in between: a quiet
// that came too early fails it.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// awaitQuiet waits until p is quiet.
func awaitQuiet[T any](t *testing.T, p *poller.Poller[T]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := p.AwaitQuiet(ctx); err != nil {
		t.Fatalf("AwaitQuiet: %v", err)
	}
}

// A pool of four idle workers polls from one goroutine: one Poll is
// parked, so AwaitParked(sub, 2) would never return, but the pool is
// quiet. A message then made visible by an Add is running in a handler by
// the time the pool is quiet again.
func TestAwaitQuietIdlePool(t *testing.T) {
	mock, b, sub := newBroker(t)
	calls := make(chan handlerCall, 4)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithWorkers(4))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitQuiet(t, p)
	awaitParked(t, sub, 1) // its one Poll
	if _, err := b.Publish(context.Background(), "jobs", "later", broker.WithDelay(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	awaitQuiet(t, p)
	mock.Add(10 * time.Second)
	awaitQuiet(t, p)
	if st := p.Stats(); st.Running != 1 || st.Polled != 1 {
		t.Fatalf("after the Add: %+v, want the message running", st)
	}
	c := <-calls // already sent: the handler runs
	c.done <- nil
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// Every worker busy: the poll loop waits for room, and that is quiet too.
// A handler that returns frees its room; once its Ack is seen, quiet
// means the next message is running.
func TestAwaitQuietFullPool(t *testing.T) {
	_, b, sub := newBroker(t)
	ev := newEvents[string]()
	calls := make(chan handlerCall, 4)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithWorkers(2), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b", "c")
	r := start(t, p)
	awaitQuiet(t, p)
	if st := p.Stats(); st.Running != 2 || st.InFlight != 2 {
		t.Fatalf("%+v, want both workers running", st)
	}
	c := <-calls
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	awaitQuiet(t, p)
	if st := p.Stats(); st.Running != 2 || st.Polled != 3 {
		t.Fatalf("%+v, want the third message running", st)
	}
	for range 2 {
		(<-calls).done <- nil
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A quiet pool's handler timeout is armed: the Add that reaches it
// cancels the handler's context, and the pool is not quiet until it has.
func TestAwaitQuietHandlerTimeout(t *testing.T) {
	mock, b, sub := newBroker(t)
	calls := make(chan handlerCall, 1)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithHandlerTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	publish(t, b, "x")
	awaitQuiet(t, p)
	c := <-calls
	mock.Add(5 * time.Second)
	awaitQuiet(t, p)
	if err := c.ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the handler's context: %v, want DeadlineExceeded", err)
	}
	c.done <- c.ctx.Err()
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// On a remote source the poller extends leases on a timer: quiet means
// the extension the Add reached is done.
func TestAwaitQuietRemoteExtension(t *testing.T) {
	mock, b, sub := newBroker(t) // visibility 10s: extended at 8s
	calls := make(chan handlerCall, 1)
	p, err := poller.New(remote{sub}, blockingHandler(calls), poller.WithClock(mock))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	publish(t, b, "x")
	awaitQuiet(t, p)
	c := <-calls
	for i := range 3 {
		mock.Add(8 * time.Second)
		awaitQuiet(t, p)
		if got := p.Stats().Extended; got != uint64(i+1) {
			t.Fatalf("after Add %d: %d extensions, want %d", i+1, got, i+1)
		}
	}
	c.done <- nil
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := sub.Stats(); st.Acked != 1 || st.Redelivered != 0 {
		t.Fatalf("%+v, want one ack and no redelivery", st)
	}
}

// failing fails its first Polls, then is its subscription (which it
// embeds, PollFor with Poll, so that the pool sees a backend.PoolPoller:
// its Polls say when they park).
type failing struct {
	*broker.Subscription[string]
	fails atomic.Int32
}

var errFlaky = errors.New("flaky")

func (f *failing) Poll(ctx context.Context, n int) ([]queue.Delivery[string], error) {
	if f.fails.Add(-1) >= 0 {
		return nil, errFlaky
	}
	return f.Subscription.Poll(ctx, n)
}

func (f *failing) PollFor(ctx context.Context, req backend.PollRequest[string]) ([]queue.Delivery[string], bool, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, false, errFlaky
	}
	return f.Subscription.PollFor(ctx, req)
}

// After a failed Poll the pool waits out a backoff on the clock: quiet,
// and the Add that ends it makes it poll again.
func TestAwaitQuietPollBackoff(t *testing.T) {
	mock, b, sub := newBroker(t)
	src := &failing{Subscription: sub}
	src.fails.Store(2)
	calls := make(chan handlerCall, 1)
	p, err := poller.New[string](src, blockingHandler(calls))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "x")
	r := start(t, p)
	awaitQuiet(t, p)
	if st := p.Stats(); st.Errors != 1 || st.Polled != 0 {
		t.Fatalf("%+v, want one failed Poll, waiting", st)
	}
	mock.Add(100 * time.Millisecond) // the first backoff
	awaitQuiet(t, p)
	if st := p.Stats(); st.Errors != 2 || st.Polled != 0 {
		t.Fatalf("%+v, want a second failed Poll, waiting", st)
	}
	mock.Add(200 * time.Millisecond) // doubled
	awaitQuiet(t, p)
	if st := p.Stats(); st.Running != 1 {
		t.Fatalf("%+v, want the message running", st)
	}
	(<-calls).done <- nil
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A drain waits on the clock for running handlers: quiet, and the Add
// that reaches the drain timeout cancels them.
func TestAwaitQuietDrain(t *testing.T) {
	mock, b, sub := newBroker(t)
	calls := make(chan handlerCall, 1)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithDrainTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "x")
	r := start(t, p)
	awaitQuiet(t, p)
	c := <-calls
	r.cancel()
	awaitQuiet(t, p)
	if err := c.ctx.Err(); err != nil {
		t.Fatalf("a draining handler's context: %v, want live until the timeout", err)
	}
	mock.Add(time.Second)
	awaitQuiet(t, p)
	if cause := context.Cause(c.ctx); !errors.Is(cause, poller.ErrDrainTimeout) {
		t.Fatalf("cause %v, want ErrDrainTimeout", cause)
	}
	c.done <- nil
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
}

// AwaitQuiet waits for a run to start; it returns when the run it waited
// on ends; a nil ctx is refused, and a done one ends the wait.
func TestAwaitQuietEdges(t *testing.T) {
	_, _, sub := newBroker(t)
	p, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1012 the nil context is the point
	if err := p.AwaitQuiet(nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("nil ctx: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.AwaitQuiet(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("no run, done ctx: %v, want context.Canceled", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- p.AwaitQuiet(context.Background()) }()
	r := start(t, p) // the wait may begin before or after the start
	if err := recv(t, waited); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// Counts that the one word of AwaitQuiet cannot hold are refused.
func TestPoolSizeLimit(t *testing.T) {
	_, _, sub := newBroker(t)
	h := func(context.Context, queue.Delivery[string]) error { return nil }
	for _, opt := range []poller.Option{poller.WithWorkers(1<<18 + 1), poller.WithMaxOutstanding(1<<18 + 1)} {
		if _, err := poller.New(sub, h, opt); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Fatalf("New: %v, want ErrInvalidArgument", err)
		}
	}
}

// A settled lease leaves the extension timer set for it: the pool is
// still quiet (the timer finds nothing to do when it comes).
func TestAwaitQuietAfterASettle(t *testing.T) {
	_, b, sub := newBroker(t)
	ev := newEvents[string]()
	calls := make(chan handlerCall, 1)
	p, err := poller.New(sub, blockingHandler(calls), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "x")
	r := start(t, p)
	awaitQuiet(t, p) // the lease is held, its timer set
	(<-calls).done <- errFlaky
	ev.next(t, poller.OutcomeRetried)
	awaitQuiet(t, p)
	if st := p.Stats(); st.InFlight != 0 || st.Running != 0 || st.Retried != 1 {
		t.Fatalf("%+v, want nothing held after the retry", st)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// gatedClock is a mock whose first AfterFunc waits for release before it
// registers its timer, as a goroutine descheduled while it arms one.
type gatedClock struct {
	*clock.Mock
	entered    chan struct{} // closed when the first AfterFunc has begun
	release    chan struct{} // closed by the test
	registered atomic.Bool   // the first AfterFunc's timer is registered
	first      atomic.Bool
}

func (g *gatedClock) AfterFunc(d time.Duration, f func()) *clock.Timer {
	if !g.first.Swap(true) {
		close(g.entered)
		<-g.release
		defer g.registered.Store(true)
	}
	return g.Mock.AfterFunc(d, f)
}

// A pool whose lease extension is on its way to its timer is not at rest:
// an Add then could pass the timer's time before the timer is registered,
// and a mock's Add fires only the timers registered when it looks for
// them. AwaitQuiet waits until the timer is set.
func TestAwaitQuietWaitsForTheExtensionTimer(t *testing.T) {
	mock, b, sub := newBroker(t)
	g := &gatedClock{Mock: mock, entered: make(chan struct{}), release: make(chan struct{})}
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New(remote{sub}, blockingHandler(calls), poller.WithClock(g), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a")
	r := start(t, p)
	c := recv(t, calls)
	recv(t, g.entered) // the extension loop is arming its timer, for 8s from now
	quiet := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	go func() { quiet <- p.AwaitQuiet(ctx) }()
	// Nothing can end this wait but the release below, so a bound on it
	// asserts only that AwaitQuiet did not return first.
	select {
	case err := <-quiet:
		close(g.release)
		t.Fatalf("AwaitQuiet returned %v while the extension timer was not yet registered", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(g.release)
	if err := recv(t, quiet); err != nil {
		t.Fatal(err)
	}
	if !g.registered.Load() {
		t.Fatal("quiet before the extension timer was registered")
	}
	mock.Add(8 * time.Second)
	if e := ev.next(t, poller.OutcomeExtended); e.Delivery.Payload != "a" {
		t.Fatalf("extended %q, want a", e.Delivery.Payload)
	}
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// gatedExtend is a remote source whose Extend waits at a gate: entered
// when a call arrives, release to let it through.
type gatedExtend struct {
	remote
	entered chan struct{}
	release chan struct{}
}

func (g gatedExtend) Extend(id lease.ID, timeout time.Duration) error {
	g.entered <- struct{}{}
	<-g.release
	return g.remote.Extend(id, timeout)
}

// While a lease's Extend is in flight the pool is not at rest: once the
// extension loop has taken the lease off its due list, nothing is due and
// no timer is armed, and AwaitQuiet used to report rest, so a test that
// moved the clock next could lose the lease (found from outside: 6 runs
// of 30 over a remote source).
func TestAwaitQuietWaitsForAnExtendInFlight(t *testing.T) {
	mock, b, sub := newBroker(t)
	src := gatedExtend{remote{sub}, make(chan struct{}), make(chan struct{})}
	ev := newEvents[string]()
	calls := make(chan handlerCall)
	p, err := poller.New[string](src, blockingHandler(calls), poller.WithClock(mock), ev.option())
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a")
	r := start(t, p)
	c := recv(t, calls)
	awaitQuiet(t, p)          // the handler runs; the extension timer is armed
	mock.Add(8 * time.Second) // the extension is due
	recv(t, src.entered)      // its Extend is in flight
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.AwaitQuiet(done); err == nil { // an ended context: it looks once, and does not wait
		close(src.release)
		t.Fatal("AwaitQuiet reported rest while an Extend was in flight")
	}
	close(src.release)
	if e := ev.next(t, poller.OutcomeExtended); e.Delivery.Payload != "a" {
		t.Fatalf("extended %q, want a", e.Delivery.Payload)
	}
	awaitQuiet(t, p) // at rest again once the Extend is back and the next one armed
	c.done <- nil
	ev.next(t, poller.OutcomeAcked)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
