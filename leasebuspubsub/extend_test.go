package leasebuspubsub

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"gocloud.dev/pubsub"
	"gocloud.dev/pubsub/driver"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

const vis = 30 * time.Second // every test broker's visibility timeout; the default margin is 6s

// armLog records the extension loop's timers: the last one armed (zero:
// the loop exited), and a channel closed at each change.
type armLog struct {
	mu   sync.Mutex
	last time.Time
	n    int
	ch   chan struct{}
}

func newArmLog() *armLog { return &armLog{ch: make(chan struct{})} }

func (l *armLog) hook(at time.Time) {
	l.mu.Lock()
	l.last, l.n = at, l.n+1
	close(l.ch)
	l.ch = make(chan struct{})
	l.mu.Unlock()
}

// await waits until the loop's last timer is for want (zero: until it
// exited), so that a test moves the mock only once the loop sleeps on it.
func (l *armLog) await(t *testing.T, want time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for {
		l.mu.Lock()
		if l.n > 0 && l.last.Equal(want) {
			l.mu.Unlock()
			return
		}
		ch, last := l.ch, l.last
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("extension loop armed for %v, want %v", last, want)
		}
	}
}

// setup returns a broker on a mock clock with topic "jobs" and its
// subscription "work", and a driver subscription on it whose extension
// loop reports to the returned log. The driver is closed when the test
// ends (again, if the test closed it).
func setup(t *testing.T, opts *SubscriptionOptions, subOpts ...broker.SubscribeOption) (*broker.Broker[[]byte], *clock.Mock, *broker.Subscription[[]byte], *subscription, *armLog) {
	t.Helper()
	b, mock := brokertest.New[[]byte](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(vis)))
	bsub := brokertest.Subscribe(t, b, "jobs", "work", subOpts...)
	if opts == nil {
		opts = &SubscriptionOptions{}
	}
	ds, err := openSubscription(b, "jobs", "work", opts)
	if err != nil {
		t.Fatal(err)
	}
	log := newArmLog()
	ds.testArmed = log.hook
	t.Cleanup(func() { _ = ds.Close() })
	return b, mock, bsub, ds, log
}

func ctxGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

func ackIDs(ms []*driver.Message) []driver.AckID {
	ids := make([]driver.AckID, len(ms))
	for i, m := range ms {
		ids[i] = m.AckID
	}
	return ids
}

// A message the program holds unacked through gocloud keeps its lease for
// several visibility timeouts, and its ack then deletes it.
func TestExtensionKeepsAHeldMessageLeased(t *testing.T) {
	ctx := ctxGuard(t)
	b, mock, bsub, ds, log := setup(t, nil)
	s := pubsub.NewSubscription(ds, nil, nil)
	brokertest.Publish(t, b, "jobs", []byte("resize"))
	t0 := mock.Now()

	m, err := s.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	log.await(t, t0.Add(vis-6*time.Second)) // extended 6s before the deadline
	mock.Add(24 * time.Second)
	log.await(t, t0.Add(48*time.Second)) // extended to t0+54: next at 48
	mock.Add(24 * time.Second)           // t0+48: the first deadline is 18s past
	log.await(t, t0.Add(72*time.Second))

	if again := bsub.TryPoll(1); len(again) != 0 {
		t.Fatalf("delivered again while held: attempt %d", again[0].Attempt)
	}
	if st := bsub.Stats(); st.InFlight != 1 || st.Redelivered != 0 {
		t.Fatalf("stats while held: %+v", st)
	}
	m.Ack()
	if err := s.Shutdown(ctx); err != nil { // flushes the ack
		t.Fatal(err)
	}
	if st := bsub.Stats(); st.Acked != 1 || st.InFlight != 0 || st.Visible != 0 || st.Redelivered != 0 {
		t.Fatalf("after the ack: %+v", st)
	}
}

// The trap: gocloud prefetches, and the messages it leased but has not
// handed out yet wait in its queue. Extended, they stay leased and their
// acks delete them; with poller.NoExtension they are all delivered again after
// the visibility timeout, spending an attempt, and the first copies' acks
// change nothing.
func TestPrefetchedMessagesAcrossTheVisibilityTimeout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ext        time.Duration
		redeliver  int
		ackedAfter uint64
	}{
		{"extended", 0, 0, 5},
		{"poller.NoExtension", poller.NoExtension, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxGuard(t)
			b, mock, bsub, ds, log := setup(t, &SubscriptionOptions{MaxExtension: tc.ext})
			brokertest.Publish(t, b, "jobs", []byte("a"), []byte("b"), []byte("c"), []byte("d"), []byte("e"))
			t0 := mock.Now()
			ms, err := ds.ReceiveBatch(ctx, 5) // as gocloud does, to fill its queue
			if err != nil || len(ms) != 5 {
				t.Fatalf("ReceiveBatch: %d messages, %v", len(ms), err)
			}
			if tc.ext == poller.NoExtension {
				mock.Add(48 * time.Second)
			} else {
				log.await(t, t0.Add(24*time.Second))
				mock.Add(24 * time.Second)
				log.await(t, t0.Add(48*time.Second))
				mock.Add(24 * time.Second)
				log.await(t, t0.Add(72*time.Second))
			}
			again := bsub.TryPoll(5)
			if len(again) != tc.redeliver {
				t.Fatalf("%d delivered again, want %d", len(again), tc.redeliver)
			}
			for _, d := range again {
				if d.Attempt != 2 {
					t.Fatalf("redelivered %q at attempt %d, want 2", d.Payload, d.Attempt)
				}
			}
			if err := ds.SendAcks(ctx, ackIDs(ms)); err != nil { // gocloud's acks of the first copies
				t.Fatalf("SendAcks: %v (stale acks must be dropped)", err)
			}
			if st := bsub.Stats(); st.Acked != tc.ackedAfter {
				t.Fatalf("acked %d, want %d (%+v)", st.Acked, tc.ackedAfter, st)
			}
		})
	}
}

// A lease is extended up to MaxExtension after its receipt, then lapses.
func TestExtensionStopsAtMaxExtension(t *testing.T) {
	ctx := ctxGuard(t)
	b, mock, bsub, ds, log := setup(t, &SubscriptionOptions{MaxExtension: 40 * time.Second})
	brokertest.Publish(t, b, "jobs", []byte("stuck"))
	t0 := mock.Now()
	ms, err := ds.ReceiveBatch(ctx, 1)
	if err != nil || len(ms) != 1 {
		t.Fatalf("ReceiveBatch: %d, %v", len(ms), err)
	}
	log.await(t, t0.Add(24*time.Second))
	mock.Add(24 * time.Second) // extended to the limit, t0+40; next at t0+34
	log.await(t, t0.Add(34*time.Second))
	mock.Add(10 * time.Second) // at the limit: no more; the loop has nothing left
	log.await(t, time.Time{})
	mock.Add(5*time.Second + 999*time.Millisecond)
	if got := bsub.TryPoll(1); len(got) != 0 {
		t.Fatalf("lapsed before the limit, at attempt %d", got[0].Attempt)
	}
	mock.Add(time.Millisecond) // t0+40
	got := bsub.TryPoll(1)
	if len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("at the limit: %+v, want the message at attempt 2", got)
	}
	if err := ds.SendAcks(ctx, ackIDs(ms)); err != nil {
		t.Fatalf("stale ack: %v", err)
	}
}

// Close stops the loop and releases what the driver holds: visible at
// once, the attempt not spent. The acks of released messages change
// nothing.
func TestCloseReleasesHeldLeases(t *testing.T) {
	ctx := ctxGuard(t)
	b, _, bsub, ds, log := setup(t, nil)
	brokertest.Publish(t, b, "jobs", []byte("a"), []byte("b"), []byte("c"))
	ms, err := ds.ReceiveBatch(ctx, 3)
	if err != nil || len(ms) != 3 {
		t.Fatalf("ReceiveBatch: %d, %v", len(ms), err)
	}
	if err := ds.SendAcks(ctx, ackIDs(ms[:1])); err != nil { // a is acked
		t.Fatal(err)
	}
	if err := ds.Close(); err != nil {
		t.Fatal(err)
	}
	log.await(t, time.Time{}) // the loop exited (and Close waited for it)
	got := bsub.TryPoll(3)
	if len(got) != 2 || string(got[0].Payload) != "b" || string(got[1].Payload) != "c" {
		t.Fatalf("after Close: %v, want b and c", got)
	}
	for _, d := range got {
		if d.Attempt != 1 {
			t.Fatalf("%q at attempt %d after a release, want 1", d.Payload, d.Attempt)
		}
	}
	if err := ds.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if st := bsub.Stats(); st.Acked != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// ReceiveBatch waits up to a second on the broker's clock, and returns a
// message as soon as one is published.
func TestReceiveBatchWaitsOnTheBrokersClock(t *testing.T) {
	ctx := ctxGuard(t)
	b, mock, bsub, ds, _ := setup(t, nil)
	type result struct {
		ms  []*driver.Message
		err error
	}
	receive := func() chan result {
		c := make(chan result, 1)
		go func() {
			ms, err := ds.ReceiveBatch(ctx, 10)
			c <- result{ms, err}
		}()
		return c
	}

	c := receive()
	if err := bsub.AwaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	mock.Add(time.Second)
	if r := <-c; r.err != nil || len(r.ms) != 0 {
		t.Fatalf("after a second: %d messages, %v; want an empty batch", len(r.ms), r.err)
	}

	c = receive()
	if err := bsub.AwaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	brokertest.Publish(t, b, "jobs", []byte("now"))
	r := <-c
	if r.err != nil || len(r.ms) != 1 || string(r.ms[0].Body) != "now" {
		t.Fatalf("after a publish: %v, %v", r.ms, r.err)
	}
	if err := ds.SendAcks(ctx, ackIDs(r.ms)); err != nil {
		t.Fatal(err)
	}
}

// The driver binds its subscription by name: removed, receives fail with
// NotFound; subscribed again, they go on with the new one; acks of the
// removed one's messages change nothing and are not errors.
func TestRebindsByName(t *testing.T) {
	ctx := ctxGuard(t)
	b, _, _, ds, _ := setup(t, nil)
	brokertest.Publish(t, b, "jobs", []byte("old"))
	old, err := ds.ReceiveBatch(ctx, 1)
	if err != nil || len(old) != 1 {
		t.Fatalf("ReceiveBatch: %v, %v", old, err)
	}

	if err := b.Unsubscribe("jobs", "work"); err != nil {
		t.Fatal(err)
	}
	bsub := brokertest.Subscribe(t, b, "jobs", "work")
	brokertest.Publish(t, b, "jobs", []byte("new"))
	for i := 0; ; i++ {
		if i == 2 {
			t.Fatal("two receives and no message from the new subscription")
		}
		ms, err := ds.ReceiveBatch(ctx, 1) // the first finds the old one closed, and binds the new one
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 {
			if string(ms[0].Body) != "new" {
				t.Fatalf("got %q", ms[0].Body)
			}
			if err := ds.SendAcks(ctx, ackIDs(append(ms, old...))); err != nil {
				t.Fatalf("SendAcks with a removed subscription's lease: %v", err)
			}
			break
		}
	}
	if st := bsub.Stats(); st.Acked != 1 {
		t.Fatalf("new subscription: %+v", st)
	}

	if err := b.Unsubscribe("jobs", "work"); err != nil {
		t.Fatal(err)
	}
	_, err = ds.ReceiveBatch(ctx, 1)
	if got := errorCode(err); got.String() != "NotFound" {
		t.Fatalf("after Unsubscribe: %v (%v), want NotFound", err, got)
	}
}

// A receive that races Close hands its messages back rather than leaving
// them leased to nobody.
func TestReceiveAfterCloseReleases(t *testing.T) {
	b, _, bsub, ds, _ := setup(t, nil)
	sub, err := ds.bound()
	if err != nil {
		t.Fatal(err)
	}
	brokertest.Publish(t, b, "jobs", []byte("late"))
	if err := ds.Close(); err != nil {
		t.Fatal(err)
	}
	ds2 := sub.TryPoll(1) // what a ReceiveBatch under way when Close ran has leased
	if _, err := ds.track(sub, ds2); err == nil {
		t.Fatal("track after Close: nil error")
	}
	got := bsub.TryPoll(1)
	if len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("after the racing receive: %+v, want the message back unspent", got)
	}
}

func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "OK"},
		{context.Canceled, "Canceled"},
		{context.DeadlineExceeded, "DeadlineExceeded"},
		{broker.ErrTopicNotFound, "NotFound"},
		{broker.ErrSubscriptionNotFound, "NotFound"},
		{queue.ErrLeaseNotFound, "NotFound"},
		{broker.ErrAlreadySubscribed, "AlreadyExists"},
		{ErrRegistered, "AlreadyExists"},
		{queue.ErrInvalidArgument, "InvalidArgument"},
		{queue.ErrQueueFull, "ResourceExhausted"},
		{&queue.FullError{Subscription: "s", Limit: 1, Err: queue.ErrQueueFull}, "ResourceExhausted"},
		{broker.ErrDedupFull, "ResourceExhausted"},
		{queue.ErrClosed, "FailedPrecondition"},
		{errSubscriptionClosed, "FailedPrecondition"},
		{queue.ErrLeaseExpired, "FailedPrecondition"},
		{broker.ErrLocked, "FailedPrecondition"},
		{broker.ErrCorrupt, "Internal"},
		{ErrNacked, "Unknown"},
	} {
		for _, err := range []error{tc.err, wrap(tc.err)} {
			if got := errorCode(err).String(); got != tc.want {
				t.Errorf("errorCode(%v) = %s, want %s", err, got, tc.want)
			}
		}
	}
}

// wrap wraps err as leasebus does (nil stays nil).
func wrap(err error) error {
	if err == nil {
		return nil
	}
	return &wrapped{err}
}

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "op: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

// Receives, acks, extensions and a moving mock clock, all at once, under
// -race. Two receivers hold every message 40s, longer than its lease, then
// ack it; the clock moves a second at a time, each time once the loop
// sleeps on a future timer. No lease may lapse: every message is acked
// once, none delivered again (which, held past its lease, takes an
// extension), and Close leaves no goroutine (goleak).
func TestExtensionUnderConcurrency(t *testing.T) {
	ctx := ctxGuard(t)
	b, mock, bsub, ds, log := setup(t, nil)
	const n, hold = 200, 40 * time.Second
	for i := range n {
		brokertest.Publish(t, b, "jobs", []byte{byte(i)})
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 { // gocloud may run several ReceiveBatch at once
		wg.Go(func() {
			type recv struct {
				id driver.AckID
				at time.Time
			}
			var held []recv
			for rctx.Err() == nil {
				ms, err := ds.ReceiveBatch(rctx, 7) // returns at once, or when the clock has moved a second
				if err != nil {
					return
				}
				now := mock.Now()
				for _, m := range ms {
					held = append(held, recv{m.AckID, now})
				}
				var due []driver.AckID
				for len(held) > 0 && now.Sub(held[0].at) >= hold {
					due, held = append(due, held[0].id), held[1:]
				}
				if err := ds.SendAcks(rctx, due); err != nil && rctx.Err() == nil {
					t.Errorf("SendAcks: %v", err)
				}
			}
		})
	}
	start := mock.Now()
	for bsub.Stats().Acked < n {
		if mock.Now().Sub(start) > 10*time.Minute { // 41s are enough when no lease lapses
			stop()
			wg.Wait()
			t.Fatalf("not all acked after 10 minutes of the clock: %+v", bsub.Stats())
		}
		log.awaitAsleep(t, mock.Now())
		mock.Add(time.Second)
	}
	stop()
	wg.Wait()
	if err := ds.Close(); err != nil {
		t.Fatal(err)
	}
	if st := bsub.Stats(); st.Acked != n || st.Redelivered != 0 || st.Delivered != n {
		t.Fatalf("stats: %+v, want each message delivered and acked once", st)
	}
}

// awaitAsleep waits until the extension loop is not running or sleeps on
// a timer after now, so that moving the clock cannot outrun it.
func (l *armLog) awaitAsleep(t *testing.T, now time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for {
		l.mu.Lock()
		if l.n == 0 || l.last.IsZero() || l.last.After(now) {
			l.mu.Unlock()
			return
		}
		ch := l.ch
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("extension loop still due at %v", now)
		}
	}
}
