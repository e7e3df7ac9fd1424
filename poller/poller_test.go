package poller_test

// The poller's run: its arguments, concurrency, poll errors and foreign
// sources, and the wrapped sources the tests share. Extension, handler
// results, draining and RunUntilIdle have files of their own.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Both of leasebus's own sources satisfy the interfaces.
var (
	_ poller.Source[string] = (*broker.Subscription[string])(nil)
	_ poller.Source[string] = (*core.Queue[string])(nil)
	_ backend.Rejecter      = (*broker.Subscription[string])(nil)
	_ backend.Rejecter      = (*core.Queue[string])(nil)
)

var epoch = time.Unix(0, 0)

// plainSource hides every method of its source but Source's: no Reject,
// no Config.
type plainSource struct{ poller.Source[string] }

func TestConcurrencyNeverExceedsWorkers(t *testing.T) {
	const workers, outstanding, total = 4, 12, 40
	_, b, sub := newBroker(t)
	var cur, peak, started, acked atomic.Int32
	release, done := make(chan struct{}), make(chan struct{})
	var p *poller.Poller[string]
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			m := peak.Load()
			if n <= m || peak.CompareAndSwap(m, n) {
				break
			}
		}
		if r := p.Stats().Running; r > workers {
			t.Errorf("Stats().Running = %d", r)
		}
		started.Add(1)
		<-release
		return nil
	}, poller.WithWorkers(workers), poller.WithMaxOutstanding(outstanding), poller.WithBatch(5),
		poller.WithObserver(func(e poller.Event[string]) {
			if e.Outcome == poller.OutcomeAcked && acked.Add(1) == total {
				close(done)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	for range total {
		publish(t, b, "m")
	}
	r := start(t, p)
	t.Cleanup(func() { // before Run's cleanup, should the test fail early
		select {
		case <-release:
		default:
			close(release)
		}
	})

	// Every worker busy and the buffer full: still only `workers` run.
	eventually(t, func() bool { return p.Stats().InFlight == outstanding && started.Load() >= workers })
	if n, st := started.Load(), p.Stats(); n != workers || st.Running != workers {
		t.Fatalf("%d handlers started, Stats %+v; want %d", n, st, workers)
	}
	close(release)
	recv(t, done)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := peak.Load(); got != workers {
		t.Fatalf("peak concurrency %d, want %d", got, workers)
	}
	if st := sub.Stats(); st.Acked != total {
		t.Fatalf("sub stats %+v", st)
	}
}

func TestTenThousandMessagesEightWorkers(t *testing.T) {
	const total = 10_000
	b, err := broker.New[int]()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.CreateTopic("jobs")
	sub, err := b.Subscribe("jobs", "workers")
	if err != nil {
		t.Fatal(err)
	}
	var seen [total]atomic.Int32
	var acked atomic.Int32
	done := make(chan struct{})
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[int]) error {
		seen[d.Payload].Add(1)
		return nil
	}, poller.WithWorkers(8), poller.WithObserver(func(e poller.Event[int]) {
		if e.Outcome == poller.OutcomeAcked && e.SourceErr == nil && acked.Add(1) == total {
			close(done)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	for i := range total {
		if _, err := b.Publish(context.Background(), "jobs", i); err != nil {
			t.Fatal(err)
		}
	}
	recv(t, done)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("message %d handled %d times", i, n)
		}
	}
	if st := sub.Stats(); st.Acked != total || st.Redelivered != 0 || st.InFlight != 0 || st.Visible != 0 {
		t.Fatalf("sub stats %+v", st)
	}
	if st := p.Stats(); st.Polled != total || st.Acked != total || st.Errors != 0 || st.InFlight != 0 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestInvalidArguments(t *testing.T) {
	_, _, sub := newBroker(t)
	h := func(context.Context, queue.Delivery[string]) error { return nil }
	cases := map[string][]poller.Option{
		"negative workers":              {poller.WithWorkers(-1)},
		"negative batch":                {poller.WithBatch(-1)},
		"negative max outstanding":      {poller.WithMaxOutstanding(-1)},
		"max outstanding below workers": {poller.WithWorkers(4), poller.WithMaxOutstanding(3)},
		"negative handler timeout":      {poller.WithHandlerTimeout(-time.Second)},
		"negative margin":               {poller.WithExtension(-time.Second, 0)},
		"negative extension limit":      {poller.WithExtension(0, -2)},
		"negative drain timeout":        {poller.WithDrainTimeout(-time.Second)},
		"nil clock":                     {poller.WithClock(nil)},
		"zero option":                   {poller.Option{}},
		"observer of another type":      {poller.WithObserver(func(poller.Event[int]) {})},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := poller.New(sub, h, opts...)
			if !errors.Is(err, queue.ErrInvalidArgument) || p != nil {
				t.Fatalf("New: %v, %v; want an error matching ErrInvalidArgument", p, err)
			}
		})
	}
	if _, err := poller.New[string](nil, h); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("nil source: %v", err)
	}
	if _, err := poller.New(sub, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("nil handler: %v", err)
	}
	p, err := poller.New(sub, h, poller.WithWorkers(0), poller.WithExtension(0, poller.NoExtension), poller.WithLogger(nil), poller.WithObserver[string](nil))
	if err != nil {
		t.Fatalf("zero values: %v", err)
	}
	//lint:ignore SA1012 a nil context is what is being tested
	if err := p.Run(nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("Run(nil): %v", err)
	}
}

func TestRunTwice(t *testing.T) {
	_, b, sub := newBroker(t)
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	if err := p.Run(context.Background()); !errors.Is(err, poller.ErrRunning) {
		t.Fatalf("second Run: %v, want ErrRunning", err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// Once it has returned, Run may run again.
	r = start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	c := recv(t, calls)
	c.done <- nil
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Acked != 1 {
		t.Fatalf("poller stats %+v", st)
	}
}

func TestSourceClosed(t *testing.T) {
	_, b, sub := newBroker(t)
	calls := make(chan handlerCall)
	p, err := poller.New(sub, blockingHandler(calls), poller.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	awaitParked(t, sub, 1)
	publish(t, b, "x")
	c := recv(t, calls)
	awaitParked(t, sub, 1) // polling with the free worker's slot
	b.Close()
	recv(t, c.ctx.Done()) // cancelled at once: nothing it does can be settled now
	if cause := context.Cause(c.ctx); !errors.Is(cause, queue.ErrClosed) {
		t.Fatalf("cause %v, want ErrClosed", cause)
	}
	c.done <- nil
	if err := r.wait(t); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Run: %v, want ErrClosed", err)
	}
	if st := p.Stats(); st.Errors != 1 || st.Acked != 0 { // the Ack failed
		t.Fatalf("poller stats %+v", st)
	}
}

// flakySource fails its first polls, recording when each poll came; the
// poll after them closes healthy and blocks.
type flakySource struct {
	plainSource
	fails   int
	at      []time.Time
	healthy chan struct{}
}

func (s *flakySource) Poll(ctx context.Context, n int) ([]queue.Delivery[string], error) {
	s.at = append(s.at, time.Now())
	if len(s.at) <= s.fails {
		return nil, errors.New("unavailable")
	}
	close(s.healthy)
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestPollErrorBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Inside the bubble the real clock is synctest's fake one: time
		// moves only when every goroutine is blocked, so gaps are exact.
		src := &flakySource{fails: 4, healthy: make(chan struct{})}
		p, err := poller.New[string](src, func(context.Context, queue.Delivery[string]) error { return nil },
			poller.WithClock(clock.New()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- p.Run(ctx) }()
		<-src.healthy
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(src.at) != 5 {
			t.Fatalf("%d polls, want 5", len(src.at))
		}
		var gaps []time.Duration
		for i := 1; i < len(src.at); i++ {
			gaps = append(gaps, src.at[i].Sub(src.at[i-1]))
		}
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
		if !slices.Equal(gaps, want) {
			t.Fatalf("gaps between polls %v, want %v", gaps, want)
		}
		if st := p.Stats(); st.Errors != 4 {
			t.Fatalf("poller stats %+v", st)
		}
	})
}

// A source's receipts are its own: the poller passes them back untouched.
func TestForeignSource(t *testing.T) {
	mock := clock.NewMock()
	src := &fakeSource{clock: mock, acked: make(chan lease.ID, 1)}
	p, err := poller.New[string](src, func(context.Context, queue.Delivery[string]) error { return nil }, poller.WithClock(mock))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	if got := recv(t, src.acked); got != lease.NewID(7, 42, 1) {
		t.Fatalf("acked %v", got)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// fakeSource hands out one delivery with its own lease ID, then blocks.
type fakeSource struct {
	plainSource
	clock  clock.Clock
	polled atomic.Bool
	acked  chan lease.ID
}

func (s *fakeSource) Poll(ctx context.Context, n int) ([]queue.Delivery[string], error) {
	if !s.polled.Swap(true) {
		return []queue.Delivery[string]{{LeaseID: lease.NewID(7, 42, 1), Attempt: 1, Deadline: s.clock.Now().Add(time.Minute)}}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *fakeSource) Ack(id lease.ID) error { s.acked <- id; return nil }

// Several observers add up: each sees every event, in the order given, so
// an instrumentation's observer and the program's own coexist.
func TestObserversAddUp(t *testing.T) {
	_, b, sub := newBroker(t)
	first, second := newEvents[string](), newEvents[string]()
	var order []string
	var mu sync.Mutex
	note := func(who string) poller.Option {
		return poller.WithObserver(func(poller.Event[string]) { mu.Lock(); order = append(order, who); mu.Unlock() })
	}
	p, err := poller.New(sub, func(context.Context, queue.Delivery[string]) error { return nil },
		first.option(), note("a"), poller.WithObserver[string](nil), second.option(), note("b"))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "m")
	r := start(t, p)
	a, c := first.next(t, poller.OutcomeAcked), second.next(t, poller.OutcomeAcked)
	if a.Delivery.Payload != "m" || c.Delivery.LeaseID != a.Delivery.LeaseID {
		t.Fatalf("the observers saw %v and %v", a.Delivery, c.Delivery)
	}
	if err := r.stop(t); err != nil { // every observer call has returned
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 2 || order[0] != "a" || order[1] != "b" {
		t.Fatalf("order %v, want [a b]", order)
	}
}
