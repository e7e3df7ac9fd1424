package poller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// batchLog records each call of a batch handler: when (on clk, from its
// start) and which payloads, with their attempts past the first.
type batchLog struct {
	clk   clock.Clock
	start time.Time

	mu    sync.Mutex
	calls []string // "1s m7 m8", "6s m2#2"
}

func (l *batchLog) record(ds []queue.Delivery[string]) {
	var b strings.Builder
	fmt.Fprint(&b, l.clk.Since(l.start))
	for _, d := range ds {
		fmt.Fprintf(&b, " %s", d.Payload)
		if d.Attempt > 1 {
			fmt.Fprintf(&b, "#%d", d.Attempt)
		}
	}
	l.mu.Lock()
	l.calls = append(l.calls, b.String())
	l.mu.Unlock()
}

func (l *batchLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func quiet[T any](t *testing.T, p *poller.Poller[T]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := p.AwaitQuiet(ctx); err != nil {
		t.Fatal(err)
	}
}

// Batches on a mock clock are exact: which messages share a call is what
// the test published and when it moved the clock past the linger; each
// message's outcome is its own (an ack, a retry after a delay, a dead
// letter); the retried one comes back alone after its delay and the
// linger. The handler tells the test of each call, and the observer of
// each outcome: AwaitQuiet counts a running handler as at rest, as it
// does a single handler, so the test waits for the call's outcomes first.
func TestBatchOnMockClock(t *testing.T) {
	mock, b, sub := newBroker(t, broker.WithMaxAttempts(3))
	log := &batchLog{clk: mock, start: mock.Now()}
	calls := make(chan string, 8)
	outcomes := make(chan poller.Event[string], 16)
	p, err := poller.NewBatch(sub, func(_ context.Context, ds []queue.Delivery[string]) ([]error, error) {
		log.record(ds)
		outs := make([]error, len(ds))
		for i, d := range ds {
			switch {
			case d.Payload == "m2" && d.Attempt == 1:
				outs[i] = poller.RetryAfter(5*time.Second, errors.New("busy"))
			case d.Payload == "m5":
				outs[i] = poller.GiveUp(errors.New("malformed"))
			}
		}
		calls <- log.get()[len(log.get())-1]
		return outs, nil
	}, poller.WithBatchMax(3, time.Second), poller.WithObserver(func(ev poller.Event[string]) { outcomes <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	expect := func(want string) {
		t.Helper()
		if got := recv(t, calls); got != want {
			t.Fatalf("call %q, want %q (calls so far %q)", got, want, log.get())
		}
		for range strings.Count(want, " ") { // one outcome a message
			recv(t, outcomes)
		}
		quiet(t, p)
	}
	publish(t, b, "m1", "m2", "m3", "m4", "m5", "m6", "m7")
	start(t, p)
	expect("0s m1 m2 m3")
	expect("0s m4 m5 m6") // m7 waits for company
	mock.Add(500 * time.Millisecond)
	publish(t, b, "m8")
	quiet(t, p)
	mock.Add(500 * time.Millisecond) // the linger of m7's batch passes: m7 and m8
	expect("1s m7 m8")
	mock.Add(4 * time.Second) // m2's retry is due at 5s; its batch lingers to 6s
	quiet(t, p)
	select {
	case c := <-calls:
		t.Fatalf("call %q before the linger of m2's batch", c)
	default:
	}
	mock.Add(time.Second)
	expect("6s m2#2")

	st := p.Stats()
	if st.Acked != 7 || st.Retried != 1 || st.DeadLettered != 1 || st.Running != 0 || st.InFlight != 0 {
		t.Fatalf("%+v: want 7 acked, 1 retried, 1 dead-lettered", st)
	}
	if dl := b.DeadLetters(); len(dl) != 1 || dl[0].Message.Payload != "m5" || dl[0].LastError != "malformed" {
		t.Fatalf("dead letters %+v: want m5, malformed", dl)
	}
}

// One error for every message, a panic, and outcomes of the wrong length
// each settle every message of the batch as a failure.
func TestBatchFailsEveryMessage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		h       poller.BatchHandler[string]
		wantErr func(error) bool
	}{
		{"one error", func(context.Context, []queue.Delivery[string]) ([]error, error) {
			return []error{nil}, errors.New("warehouse down") // the error wins over outcomes
		}, func(err error) bool { return err != nil && err.Error() == "warehouse down" }},
		{"panic", func(context.Context, []queue.Delivery[string]) ([]error, error) {
			panic("bulk insert bug")
		}, func(err error) bool { var pe *poller.PanicError; return errors.As(err, &pe) }},
		{"wrong length", func(context.Context, []queue.Delivery[string]) ([]error, error) {
			return []error{nil}, nil
		}, func(err error) bool { return errors.Is(err, poller.ErrBatchOutcomes) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, b, sub := newBroker(t)
			ev := newEvents[string]()
			p, err := poller.NewBatch(sub, tc.h, poller.WithBatchMax(3, time.Hour), ev.option()) // the three in one call
			if err != nil {
				t.Fatal(err)
			}
			publish(t, b, "a", "b", "c")
			start(t, p)
			for range 3 {
				e := ev.next(t, poller.OutcomeRetried)
				if !tc.wantErr(e.Err) {
					t.Fatalf("%s: err %v", e.Delivery.Payload, e.Err)
				}
			}
			quiet(t, p)
			if st := sub.Stats(); st.Acked != 0 || st.Delayed+st.Visible != 3 {
				t.Fatalf("%+v: want the three back, none acked", st)
			}
		})
	}
}

// A batch waiting to fill when the pool stops is released unspent: its
// messages are visible again, with no attempt spent.
func TestBatchLingeringIsReleasedOnStop(t *testing.T) {
	_, b, sub := newBroker(t)
	called := make(chan []queue.Delivery[string], 1)
	p, err := poller.NewBatch(sub, func(_ context.Context, ds []queue.Delivery[string]) ([]error, error) {
		called <- ds
		return nil, nil
	}, poller.WithBatchMax(10, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "b")
	r := start(t, p)
	quiet(t, p)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	select {
	case ds := <-called:
		t.Fatalf("handler called with %d deliveries", len(ds))
	default:
	}
	if st := p.Stats(); st.Released != 2 {
		t.Fatalf("%+v: want both released", st)
	}
	ds := sub.TryPoll(2)
	if len(ds) != 2 || ds[0].Attempt != 1 || ds[1].Attempt != 1 {
		t.Fatalf("after the stop: %+v, want both again on attempt 1", ds)
	}
}

// The options a batch pool takes, and refuses.
func TestBatchBadInput(t *testing.T) {
	_, _, sub := newBroker(t)
	nop := func(context.Context, []queue.Delivery[string]) ([]error, error) { return nil, nil }
	for name, err := range map[string]error{
		"nil handler":     func() error { _, err := poller.NewBatch[string](sub, nil); return err }(),
		"nil source":      func() error { _, err := poller.NewBatch[string](nil, nop); return err }(),
		"zero":            func() error { _, err := poller.NewBatch(sub, nop, poller.WithBatchMax(0, 0)); return err }(),
		"too many":        func() error { _, err := poller.NewBatch(sub, nop, poller.WithBatchMax(1<<14+1, 0)); return err }(),
		"negative linger": func() error { _, err := poller.NewBatch(sub, nop, poller.WithBatchMax(5, -1)); return err }(),
		"less than batch": func() error {
			_, err := poller.NewBatch(sub, nop, poller.WithBatchMax(5, 0), poller.WithMaxOutstanding(4))
			return err
		}(),
		"workers × batch": func() error {
			_, err := poller.NewBatch(sub, nop, poller.WithWorkers(1<<10), poller.WithBatchMax(1<<9, 0))
			return err
		}(),
		"New with a batch": func() error { _, err := poller.New(sub, blockingHandler(nil), poller.WithBatchMax(5, 0)); return err }(),
	} {
		if !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := poller.NewBatch(sub, nop, poller.WithWorkers(4), poller.WithBatchMax(1<<14, 0)); err != nil {
		t.Errorf("4 workers of 16384: %v", err)
	}
}

// WithRate counts messages, not calls: inside a synctest bubble, 60
// messages through batches of up to 5 on a pool paced at 10 a second (a
// bucket of 10): by every instant, at most 10 plus 10 a second since the
// start have begun, and all are acked after 5s.
func TestBatchRateCountsMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, sub := newBrokerOn(t, clock.New())
		start0 := time.Now()
		var mu sync.Mutex
		var started []time.Duration // one per message
		p, err := poller.NewBatch(sub, func(_ context.Context, ds []queue.Delivery[string]) ([]error, error) {
			mu.Lock()
			for range ds {
				started = append(started, time.Since(start0))
			}
			mu.Unlock()
			return nil, nil
		}, poller.WithBatchMax(5, 250*time.Millisecond), poller.WithWorkers(2), poller.WithRate(10, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			publish(t, b, fmt.Sprint(i))
		}
		r := start(t, p)
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(started) != 60 || sub.Stats().Acked != 60 {
			t.Fatalf("%d started, %+v", len(started), sub.Stats())
		}
		for i, at := range started { // sorted: a call's messages share one instant
			if allowed := 10 + int(at/(100*time.Millisecond)); i+1 > allowed {
				t.Fatalf("message %d began at %v: at most %d by then", i+1, at, allowed)
			}
		}
	})
}
