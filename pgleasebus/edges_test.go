package pgleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/queue"
)

// topicSub creates topic and subscribes name to it, with a publisher.
func topicSub(t *testing.T, e *env, topic, name string, opts ...pgleasebus.SubscribeOption) (*pgleasebus.Subscription[string], *pgleasebus.Publisher[string]) {
	t.Helper()
	ctx := bounded(t)
	if err := e.bus.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	sub, err := pgleasebus.Subscribe(ctx, e.bus, topic, name, queue.StringCodec(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	pub, err := pgleasebus.NewPublisher(e.bus, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}
	return sub, pub
}

func payloads(ds []queue.Delivery[string]) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Payload
	}
	return out
}

func TestPublishTxCommitsAndRollsBack(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	sub, pub := topicSub(t, e, "orders", "billing")
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishTx(ctx, tx, "orders", "rolled back"); err != nil {
		t.Fatal(err)
	}
	if ds := sub.TryPoll(1); len(ds) != 0 {
		t.Fatalf("visible before the commit: %v", payloads(ds))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		_, err := pub.PublishBatchTx(ctx, tx, "orders", []string{"a", "b"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if ds := sub.TryPoll(10); strings.Join(payloads(ds), ",") != "a,b" {
		t.Fatalf("after the commit: %v", payloads(ds))
	}
	if _, err := pub.PublishTx(ctx, nil, "orders", "x"); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("PublishTx with a nil tx: %v", err)
	}
}

// A Poll parked in one process wakes at another's commit, through
// LISTEN/NOTIFY: two buses on one schema, each with its own pool.
func TestPollWakesAtAnotherProcesssCommit(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	sub, _ := topicSub(t, e, "orders", "billing")
	other, err := pgleasebus.Open(ctx, newPool(t), pgleasebus.WithClock(e.clk), pgleasebus.WithSchema(e.bus.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	pub, err := pgleasebus.NewPublisher(other, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []queue.Delivery[string], 1)
	go func() {
		ds, _ := sub.Poll(ctx, 1)
		got <- ds
	}()
	if err := sub.AwaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, "orders", "from elsewhere"); err != nil {
		t.Fatal(err)
	}
	if ds := <-got; len(ds) != 1 || ds[0].Payload != "from elsewhere" {
		t.Fatalf("woke with %v", payloads(ds))
	}
}

// Handles in two processes share one subscription: every message is
// leased by exactly one of them.
func TestCompetingConsumersAcrossProcesses(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	_, pub := topicSub(t, e, "jobs", "workers")
	const n = 2000
	batch := make([]string, n)
	for i := range batch {
		batch[i] = string(rune('a'+i%26)) + strings.Repeat("x", i%7) + "-" + uuid.NewString()
	}
	if _, err := pub.PublishBatch(ctx, "jobs", batch); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for p := range 2 {
		bus := e.bus
		if p == 1 {
			var err error
			if bus, err = pgleasebus.Open(ctx, newPool(t), pgleasebus.WithClock(e.clk), pgleasebus.WithSchema(e.bus.Schema())); err != nil {
				t.Fatal(err)
			}
			defer bus.Close()
		}
		for range 4 {
			sub, err := pgleasebus.Subscribe(ctx, bus, "jobs", "workers", queue.StringCodec())
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					ds := sub.TryPoll(25)
					if len(ds) == 0 {
						return
					}
					for _, d := range ds {
						mu.Lock()
						seen[d.Payload]++
						mu.Unlock()
						if err := sub.Ack(d.LeaseID); err != nil {
							t.Error(err)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d of %d delivered", len(seen), n)
	}
	for p, c := range seen {
		if c != 1 {
			t.Fatalf("%q delivered %d times", p, c)
		}
	}
}

func TestRejectAndUndecodable(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	if err := e.bus.CreateTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	sub, err := pgleasebus.Subscribe(ctx, e.bus, "orders", "typed", queue.JSONCodec[struct{ N int }]())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := pgleasebus.NewPublisher(e.bus, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"not json", `{"N":7}`} {
		if _, err := pub.Publish(ctx, "orders", p); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := sub.Poll(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Payload.N != 7 {
		t.Fatalf("poll: %+v, %v", ds, err)
	}
	if err := sub.Reject(ds[0].LeaseID, errors.New("no")); err != nil {
		t.Fatal(err)
	}
	if err := sub.Reject(ds[0].LeaseID, errors.New("again")); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Fatalf("a second Reject: %v", err)
	}
	dls, err := pgleasebus.DeadLetters(ctx, e.bus, queue.StringCodec())
	if err != nil || len(dls) != 2 {
		t.Fatalf("dead letters: %+v, %v", dls, err)
	}
	if dls[0].Reason != queue.ReasonRejected || !strings.HasPrefix(dls[0].LastError, "decode: ") || dls[0].Message.Payload != "not json" {
		t.Errorf("the undecodable one: %+v", dls[0])
	}
	if dls[1].Reason != queue.ReasonRejected || dls[1].LastError != "no" || len(dls[1].History) != 1 || dls[1].History[0].Outcome != queue.AttemptRejected {
		t.Errorf("the rejected one: %+v", dls[1])
	}
}

func TestSubscribeSettings(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	if _, err := pgleasebus.Subscribe[string](ctx, e.bus, "nope", "s", nil); !errors.Is(err, queue.ErrTopicNotFound) {
		t.Fatalf("subscribe to a missing topic: %v", err)
	}
	_, pub := topicSub(t, e, "orders", "billing", pgleasebus.WithVisibilityTimeout(time.Minute))
	// Bound as stored; an option that differs is refused by name.
	again, err := pgleasebus.Subscribe[string](ctx, e.bus, "orders", "billing", nil)
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	_, err = pgleasebus.Subscribe[string](ctx, e.bus, "orders", "billing", nil, pgleasebus.WithVisibilityTimeout(time.Second), pgleasebus.WithMaxAttempts(queue.DefaultMaxAttempts))
	if !errors.Is(err, pgleasebus.ErrConfigMismatch) || !strings.Contains(err.Error(), "WithVisibilityTimeout") || strings.Contains(err.Error(), "WithMaxAttempts") {
		t.Fatalf("a differing option: %v", err)
	}
	upd, err := pgleasebus.Subscribe[string](ctx, e.bus, "orders", "billing", nil, pgleasebus.WithVisibilityTimeout(time.Second), pgleasebus.WithUpdate())
	if err != nil {
		t.Fatal(err)
	}
	defer upd.Close()
	if _, err := pub.Publish(ctx, "orders", "m"); err != nil {
		t.Fatal(err)
	}
	ds, err := upd.Poll(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].Deadline.Sub(e.clk.Now()) != time.Second {
		t.Fatalf("after the update: %+v, %v", ds, err)
	}
	for name, opt := range map[string]pgleasebus.SubscribeOption{
		"zero visibility":   pgleasebus.WithVisibilityTimeout(0),
		"zero attempts":     pgleasebus.WithMaxAttempts(0),
		"zero keys":         pgleasebus.WithKeyConcurrency(0),
		"negative TTL":      pgleasebus.WithDefaultTTL(-1),
		"bad retry":         pgleasebus.WithRetry(queue.RetryPolicy{Jitter: 2}),
		"zero option value": {},
	} {
		if _, err := pgleasebus.Subscribe[string](ctx, e.bus, "orders", "fresh", nil, opt); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"", "a b", "a..b", ".a", strings.Repeat("x", 201)} {
		if _, err := pgleasebus.Subscribe[string](ctx, e.bus, "orders", name, nil); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("subscription name %q: %v", name, err)
		}
		if err := e.bus.CreateTopic(ctx, name); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("topic name %q: %v", name, err)
		}
	}
}

func TestUnsubscribeAndDeleteTopic(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	sub, pub := topicSub(t, e, "orders", "billing")
	if _, err := pub.Publish(ctx, "orders", "m"); err != nil {
		t.Fatal(err)
	}
	ds := sub.TryPoll(1)
	if err := e.bus.Unsubscribe(ctx, "orders", "billing"); err != nil {
		t.Fatal(err)
	}
	if err := e.bus.Unsubscribe(ctx, "orders", "billing"); !errors.Is(err, queue.ErrSubscriptionNotFound) {
		t.Fatalf("a second Unsubscribe: %v", err)
	}
	if err := sub.Ack(ds[0].LeaseID); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Fatalf("Ack after Unsubscribe: %v", err)
	}
	if err := e.bus.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := e.bus.DeleteTopic(ctx, "orders"); !errors.Is(err, queue.ErrTopicNotFound) {
		t.Fatalf("a second DeleteTopic: %v", err)
	}
	if _, err := pub.Publish(ctx, "orders", "m"); !errors.Is(err, queue.ErrTopicNotFound) {
		t.Fatalf("publish to a deleted topic: %v", err)
	}
	if topics, err := e.bus.Topics(ctx); err != nil || len(topics) != 0 {
		t.Fatalf("topics: %v, %v", topics, err)
	}
}

func TestClosed(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	sub, pub := topicSub(t, e, "orders", "billing")
	if _, err := pub.Publish(ctx, "orders", "m"); err != nil {
		t.Fatal(err)
	}
	ds := sub.TryPoll(1)
	blocked := make(chan error, 1)
	other, err := pgleasebus.Subscribe[string](ctx, e.bus, "orders", "billing", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := other.Poll(ctx, 1)
		blocked <- err
	}()
	if err := other.AwaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := sub.Poll(ctx, 1); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Poll after Close: %v", err)
	}
	if err := sub.Ack(ds[0].LeaseID); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Ack after Close: %v", err)
	}
	if err := e.bus.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("a Poll blocked when the bus closed: %v", err)
	}
	if _, err := pub.Publish(ctx, "orders", "m"); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Publish after the bus closed: %v", err)
	}
	if _, err := pgleasebus.Subscribe[string](ctx, e.bus, "orders", "billing", nil); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Subscribe after the bus closed: %v", err)
	}
	if err := e.bus.Close(); err != nil {
		t.Fatalf("a second Close of the bus: %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	sub, pub := topicSub(t, e, "orders", "billing")
	if _, err := pub.Publish(ctx, "orders", "m"); err != nil {
		t.Fatal(err)
	}
	ds := sub.TryPoll(1)
	id := ds[0].LeaseID
	for name, err := range map[string]error{
		"Poll(0)":               func() error { _, err := sub.Poll(ctx, 0); return err }(),
		"Poll(-1)":              func() error { _, err := sub.Poll(ctx, -1); return err }(),
		"PollWithVisibility(0)": func() error { _, err := sub.PollWithVisibility(ctx, 1, 0); return err }(),
		"Extend(0)":             sub.Extend(id, 0),
		"Nack(-1)":              sub.Nack(id, -1),
		"ReleaseAfter(-1)":      sub.ReleaseAfter(id, -1),
		"FailAfter(-1)":         sub.FailAfter(id, -1, nil),
		"AwaitParked(-1)":       sub.AwaitParked(ctx, -1),
		"Peek limit 0":          func() error { _, err := sub.Peek(ctx, queue.PeekQuery{}); return err }(),
		"Open nil pool":         func() error { _, err := pgleasebus.Open(ctx, nil); return err }(),
		"WithSchema":            func() error { _, err := pgleasebus.Open(ctx, e.pool, pgleasebus.WithSchema("Bad-Name")); return err }(),
		"WithDedupWindow(0)":    func() error { _, err := pgleasebus.Open(ctx, e.pool, pgleasebus.WithDedupWindow(0)); return err }(),
		"WithMaxMessageSize(0)": func() error { _, err := pgleasebus.Open(ctx, e.pool, pgleasebus.WithMaxMessageSize(0)); return err }(),
		"WithClock(nil)":        func() error { _, err := pgleasebus.Open(ctx, e.pool, pgleasebus.WithClock(nil)); return err }(),
		"NewPublisher(nil)":     func() error { _, err := pgleasebus.NewPublisher[string](nil, nil); return err }(),
		"Subscribe(nil)":        func() error { _, err := pgleasebus.Subscribe[string](ctx, nil, "orders", "x", nil); return err }(),
		"dedup IDs to Publish":  func() error { _, err := pub.Publish(ctx, "orders", "m", queue.WithDedupIDs([]string{"a"})); return err }(),
		"dedup ID to a batch": func() error {
			_, err := pub.PublishBatch(ctx, "orders", []string{"m"}, queue.WithDedupID("a"))
			return err
		}(),
		"dedup IDs count": func() error {
			_, err := pub.PublishBatch(ctx, "orders", []string{"m"}, queue.WithDedupIDs([]string{"a", "b"}))
			return err
		}(),
	} {
		if !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error matching queue.ErrInvalidArgument", name, err)
		}
	}
	// A lease of no subscription, or of another's, acks nothing.
	if err := sub.Ack(lease.ID{}); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Errorf("Ack of the zero lease: %v", err)
	}
	if err := sub.Ack(lease.NewID(id.Scope()+1, id.Seq(), id.Delivery())); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Errorf("Ack of another subscription's lease: %v", err)
	}
	if err := sub.Ack(lease.NewID(id.Scope(), id.Seq(), id.Delivery()+1)); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Errorf("Ack of a delivery never made: %v", err)
	}
	if err := sub.Ack(id); err != nil {
		t.Fatal(err)
	}
	if err := sub.Ack(id); !errors.Is(err, queue.ErrLeaseNotFound) {
		t.Errorf("a second Ack: %v", err)
	}
	// A done context publishes nothing.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := pub.Publish(done, "orders", "m"); !errors.Is(err, context.Canceled) {
		t.Errorf("Publish with a done ctx: %v", err)
	}
	if ds := sub.TryPoll(1); len(ds) != 0 {
		t.Errorf("a done ctx's publish was stored: %v", payloads(ds))
	}
}

// A delay or a TTL of centuries is held at the largest instant, never
// overflowing into the past.
func TestFarDurations(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	sub, pub := topicSub(t, e, "orders", "billing")
	if _, err := pub.Publish(ctx, "orders", "never", queue.WithDelay(math.MaxInt64)); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, "orders", "forever", queue.WithTTL(math.MaxInt64)); err != nil {
		t.Fatal(err)
	}
	ds := sub.TryPoll(10)
	if len(ds) != 1 || ds[0].Payload != "forever" {
		t.Fatalf("leased %v", payloads(ds))
	}
	if err := sub.Extend(ds[0].LeaseID, math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(100 * 365 * 24 * time.Hour)
	if st, err := sub.Stats(ctx); err != nil || st.Delayed != 1 || st.InFlight != 1 || st.DeadLettered != 0 {
		t.Fatalf("a century on: %v, %v", st, err)
	}
	if err := sub.Nack(ds[0].LeaseID, math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if st, err := sub.Stats(ctx); err != nil || st.Delayed != 2 {
		t.Fatalf("after a Nack of centuries: %v, %v", st, err)
	}
}

func TestOpenRefusesANewerSchema(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	if _, err := e.pool.Exec(ctx, "UPDATE "+e.bus.Schema()+".meta SET value = '99' WHERE key = 'version'"); err != nil {
		t.Fatal(err)
	}
	_, err := pgleasebus.Open(ctx, e.pool, pgleasebus.WithSchema(e.bus.Schema()))
	if !errors.Is(err, pgleasebus.ErrSchemaNewer) || !strings.Contains(err.Error(), "99") {
		t.Fatalf("Open of a newer schema: %v", err)
	}
}

// Replicas that start together migrate one at a time, and all open.
func TestOpenConcurrently(t *testing.T) {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	ctx := bounded(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := pgleasebus.Open(ctx, pool, pgleasebus.WithSchema(schema), pgleasebus.WithoutListen())
			if err == nil {
				b.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// An empty payload is stored, delivered, edited and redriven as empty:
// an empty bytea, never NULL.
func TestEmptyPayload(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	sub, pub := topicSub(t, e, "orders", "billing")
	if _, err := pub.Publish(ctx, "orders", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishBatch(ctx, "orders", []string{"", "x"}); err != nil {
		t.Fatal(err)
	}
	ds := sub.TryPoll(10)
	if strings.Join(payloads(ds), ",") != ",,x" {
		t.Fatalf("delivered %q", payloads(ds))
	}
	if err := sub.Reject(ds[2].LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	n, err := pgleasebus.RedriveWith(ctx, e.bus, queue.StringCodec(), func(queue.DeadLetter[string]) (string, bool) { return "", true })
	if err != nil || n != 1 {
		t.Fatalf("RedriveWith to an empty payload: %d, %v", n, err)
	}
	if ds := sub.TryPoll(10); len(ds) != 1 || ds[0].Payload != "" {
		t.Fatalf("after the redrive: %q", payloads(ds))
	}
}

// A burst of publishes in another process, faster than its NOTIFY
// interval, wakes a Poll parked here for every one of them: the publishes
// that send no NOTIFY of their own are announced by one at the interval's
// end. The mock clock never moves, so no Poll looks again by itself.
func TestBurstFromAnotherProcess(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	sub, _ := topicSub(t, e, "orders", "billing")
	got := make(chan int, 1)
	go func() {
		n := 0
		for n < 3 {
			ds, err := sub.Poll(ctx, 10)
			if err != nil {
				break
			}
			n += len(ds)
		}
		got <- n
	}()
	if err := sub.AwaitParked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The first publish notifies; the next two, within its interval, do
	// not, and are announced by the NOTIFY at the interval's end.
	short, err := pgleasebus.Open(ctx, newPool(t), pgleasebus.WithClock(e.clk), pgleasebus.WithSchema(e.bus.Schema()),
		pgleasebus.WithNotifyInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	spub, err := pgleasebus.NewPublisher(short, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := spub.Publish(ctx, "orders", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := <-got; n != 3 {
		t.Fatalf("leased %d of 3", n)
	}
}
