package leasebuspubsub_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"gocloud.dev/gcerrors"
	"gocloud.dev/pubsub"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/leasebuspubsub"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

const hangGuard = 30 * time.Second // bounds waits; never a timing assertion

func guard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// open returns a gocloud Topic on "jobs" and a Subscription on its
// subscription "work", shut down when the test ends (if the test has not).
func open(t *testing.T, b *broker.Broker[[]byte], opts *leasebuspubsub.SubscriptionOptions) (*pubsub.Topic, *pubsub.Subscription) {
	t.Helper()
	top, err := leasebuspubsub.OpenTopic(b, "jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := leasebuspubsub.OpenSubscription(b, "jobs", "work", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = top.Shutdown(ctx)
		_ = s.Shutdown(ctx)
	})
	return top, s
}

func receive(t *testing.T, ctx context.Context, s *pubsub.Subscription) (*pubsub.Message, queue.Delivery[[]byte]) {
	t.Helper()
	m, err := s.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	var d queue.Delivery[[]byte]
	if !m.As(&d) {
		t.Fatal("Message.As(queue.Delivery[[]byte]) failed")
	}
	return m, d
}

func send(t *testing.T, ctx context.Context, top *pubsub.Topic, body string, md map[string]string) {
	t.Helper()
	if err := top.Send(ctx, &pubsub.Message{Body: []byte(body), Metadata: md}); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

// Nack is a failed attempt: the message waits the subscription's retry
// delay, and comes back with its attempt raised.
func TestNackSpendsTheAttemptAndWaitsTheRetryDelay(t *testing.T) {
	ctx := guard(t)
	b, mock := brokertest.New[[]byte](t)
	bsub := brokertest.Subscribe(t, b, "jobs", "work", broker.WithRetry(queue.RetryPolicy{Initial: 2 * time.Second}))
	top, s := open(t, b, nil)
	send(t, ctx, top, "charge", nil)

	m, d := receive(t, ctx, s)
	if d.Attempt != 1 {
		t.Fatalf("first delivery at attempt %d", d.Attempt)
	}
	m.Nack()
	if err := s.Shutdown(ctx); err != nil { // flushes the nack
		t.Fatal(err)
	}
	if st := bsub.Stats(); st.Delayed != 1 || st.Visible != 0 || st.InFlight != 0 {
		t.Fatalf("after Nack: %+v, want the message waiting its retry delay", st)
	}
	mock.Add(2*time.Second - time.Nanosecond)
	if got := bsub.TryPoll(1); len(got) != 0 {
		t.Fatal("visible before the retry delay")
	}
	mock.Add(time.Nanosecond)
	got := bsub.TryPoll(1)
	if len(got) != 1 || got[0].Attempt != 2 || got[0].ID != d.ID {
		t.Fatalf("after the retry delay: %+v, want the message at attempt 2", got)
	}
}

// A message nacked on every attempt is dead-lettered after MaxAttempts,
// with ErrNacked as its last error, its body and headers kept.
func TestNackDeadLettersAfterMaxAttempts(t *testing.T) {
	ctx := guard(t)
	b, _ := brokertest.New[[]byte](t)
	bsub := brokertest.Subscribe(t, b, "jobs", "work",
		broker.WithMaxAttempts(3), broker.WithRetry(queue.RetryPolicy{NoBackoff: true}))
	top, s := open(t, b, nil)
	send(t, ctx, top, "poison", map[string]string{"kind": "bad"})

	for attempt := 1; attempt <= 3; attempt++ {
		m, d := receive(t, ctx, s)
		if d.Attempt != attempt || d.MaxAttempts != 3 {
			t.Fatalf("delivery %d: attempt %d of %d", attempt, d.Attempt, d.MaxAttempts)
		}
		m.Nack()
	}
	// Shutdown returns once the last nack, which dead-letters it, is sent.
	// (Not bsub.AwaitIdle: it can return before the dead letter reaches
	// b.DeadLetters.)
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if st := bsub.Stats(); st.DeadLettered != 1 || st.InFlight+st.Visible+st.Delayed != 0 {
		t.Fatalf("stats: %+v", st)
	}
	dls := b.DeadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 3 || dl.LastError != leasebuspubsub.ErrNacked.Error() ||
		string(dl.Message.Payload) != "poison" || dl.Message.Headers.Get("kind") != "bad" || dl.Subscription != "work" {
		t.Fatalf("dead letter: %+v", dl)
	}
}

// Ack deletes the message; Receive-Ack of many messages by competing
// gocloud Subscriptions on one leasebus subscription delivers each once.
func TestCompetingConsumersAckEveryMessageOnce(t *testing.T) {
	ctx := guard(t)
	b, err := broker.New[[]byte]() // the real clock: gocloud's batching runs in real time
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.CreateTopic("jobs"); err != nil {
		t.Fatal(err)
	}
	bsub, err := b.Subscribe("jobs", "work")
	if err != nil {
		t.Fatal(err)
	}
	const n, consumers = 300, 3
	top, err := leasebuspubsub.OpenTopic(b, "jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = top.Shutdown(ctx) }()

	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	rctx, stop := context.WithCancel(ctx)
	for range consumers {
		s, err := leasebuspubsub.OpenSubscription(b, "jobs", "work", nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer func() { _ = s.Shutdown(ctx) }()
			for {
				m, err := s.Receive(rctx)
				if err != nil {
					return
				}
				mu.Lock()
				seen[string(m.Body)]++
				done := len(seen) == n
				mu.Unlock()
				m.Ack()
				if done {
					stop()
				}
			}
		})
	}
	for i := range n {
		send(t, ctx, top, fmt.Sprint(i), nil)
	}
	wg.Wait() // each Shutdown flushed its acks
	stop()
	if len(seen) != n {
		t.Fatalf("received %d distinct messages, want %d", len(seen), n)
	}
	if err := bsub.AwaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if st := bsub.Stats(); st.Acked != n || st.Redelivered != 0 {
		t.Fatalf("stats: %+v, want %d acked and none redelivered", st, n)
	}
}

// Metadata and headers are the same thing, both ways; no headers is nil
// Metadata.
func TestMetadataRoundTrip(t *testing.T) {
	ctx := guard(t)
	b, _ := brokertest.New[[]byte](t)
	bsub := brokertest.Subscribe(t, b, "jobs", "work")
	top, s := open(t, b, nil)
	md := map[string]string{"a": "1", "": "empty key", "weird\x00key": "ünïcode", "b": ""}

	send(t, ctx, top, "gocloud to leasebus", md)
	got := bsub.TryPoll(1)
	if len(got) != 1 || !maps.Equal(maps.Collect(got[0].Headers.All()), md) {
		t.Fatalf("headers %v, want %v", got[0].Headers, md)
	}
	if err := bsub.Ack(got[0].LeaseID); err != nil {
		t.Fatal(err)
	}

	if _, err := b.Publish(ctx, "jobs", []byte("leasebus to gocloud"), broker.WithHeaders(md)); err != nil {
		t.Fatal(err)
	}
	m, _ := receive(t, ctx, s)
	if !maps.Equal(m.Metadata, md) {
		t.Fatalf("metadata %v, want %v", m.Metadata, md)
	}
	m.Ack()

	brokertest.Publish(t, b, "jobs", []byte("no headers"))
	m, _ = receive(t, ctx, s)
	if m.Metadata != nil {
		t.Fatalf("metadata %#v, want nil", m.Metadata)
	}
	m.Ack()
}

// A sent body is copied, so the sender may reuse its buffer; a received
// body is the receiver's own, so changing it changes no other copy.
func TestBodiesAreCopied(t *testing.T) {
	ctx := guard(t)
	b, _ := brokertest.New[[]byte](t)
	brokertest.Subscribe(t, b, "jobs", "work", broker.WithRetry(queue.RetryPolicy{NoBackoff: true}))
	other := brokertest.Subscribe(t, b, "jobs", "other")
	top, s := open(t, b, nil)

	buf := []byte("original")
	if err := top.Send(ctx, &pubsub.Message{Body: buf}); err != nil {
		t.Fatal(err)
	}
	copy(buf, "CHANGED!")
	m, _ := receive(t, ctx, s)
	if string(m.Body) != "original" {
		t.Fatalf("received %q after the sender reused its buffer", m.Body)
	}
	copy(m.Body, "mutated!")
	m.Nack()
	m, d := receive(t, ctx, s)
	if string(m.Body) != "original" || string(d.Payload) != "original" {
		t.Fatalf("redelivered %q (delivery %q) after a receiver changed its copy", m.Body, d.Payload)
	}
	m.Ack()
	if got := other.TryPoll(1); len(got) != 1 || string(got[0].Payload) != "original" {
		t.Fatalf("the other subscription got %v", got)
	}
}

// BeforeSend's *[]broker.PublishOption sets leasebus's publish options;
// AfterSend sees the stored message, whose ID the delivery carries.
func TestPublishOptionsThroughBeforeSend(t *testing.T) {
	ctx := guard(t)
	b, mock := brokertest.New[[]byte](t)
	bsub := brokertest.Subscribe(t, b, "jobs", "work")
	top, s := open(t, b, nil)

	withOpts := func(body string, opts ...broker.PublishOption) queue.Message[[]byte] {
		var stored queue.Message[[]byte]
		err := top.Send(ctx, &pubsub.Message{
			Body: []byte(body),
			BeforeSend: func(as func(any) bool) error {
				var p *[]broker.PublishOption
				if !as(&p) {
					return errors.New("no *[]broker.PublishOption")
				}
				*p = append(*p, opts...)
				return nil
			},
			AfterSend: func(as func(any) bool) error {
				if !as(&stored) {
					return errors.New("no queue.Message")
				}
				return nil
			},
		})
		if err != nil {
			t.Fatalf("Send %s: %v", body, err)
		}
		return stored
	}
	late := withOpts("late", broker.WithDelay(time.Minute))
	low := withOpts("low", broker.WithPriority(queue.PriorityLow))
	urgent := withOpts("urgent", broker.WithPriority(queue.PriorityCritical), broker.WithKey("k"))
	if urgent.Key != "k" || urgent.Priority != queue.PriorityCritical || late.ID == low.ID {
		t.Fatalf("stored: %+v", urgent)
	}
	if st := bsub.Stats(); st.Delayed != 1 || st.Visible != 2 {
		t.Fatalf("stats: %+v", st)
	}
	for _, want := range []queue.Message[[]byte]{urgent, low} { // by priority
		m, d := receive(t, ctx, s)
		if d.ID != want.ID || m.LoggableID != want.ID.String() || string(m.Body) != string(want.Payload) {
			t.Fatalf("received %q (%v), want %q (%v)", m.Body, d.ID, want.Payload, want.ID)
		}
		m.Ack()
	}
	mock.Add(time.Minute)
	m, d := receive(t, ctx, s)
	if d.ID != late.ID {
		t.Fatalf("after the delay: %q", m.Body)
	}
	m.Ack()

	// A WithHeaders adds to the headers from Metadata, winning for a key
	// in both.
	err := top.Send(ctx, &pubsub.Message{
		Body:     []byte("headers"),
		Metadata: map[string]string{"a": "1", "b": "2"},
		BeforeSend: func(as func(any) bool) error {
			var p *[]broker.PublishOption
			as(&p)
			*p = append(*p, broker.WithHeaders(map[string]string{"b": "override", "c": "3"}))
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m, _ = receive(t, ctx, s)
	if want := map[string]string{"a": "1", "b": "override", "c": "3"}; !maps.Equal(m.Metadata, want) {
		t.Fatalf("metadata %v, want %v", m.Metadata, want)
	}
	m.Ack()

	err = top.Send(ctx, &pubsub.Message{Body: []byte("x"), BeforeSend: func(as func(any) bool) error {
		var p *[]broker.PublishOption
		as(&p)
		*p = append(*p, broker.WithDelay(-time.Second))
		return nil
	}})
	if gcerrors.Code(err) != gcerrors.InvalidArgument || !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("invalid publish option: %v (%v), want InvalidArgument", err, gcerrors.Code(err))
	}
}

// A message's As gives its subscription: rejecting a poison message there
// dead-letters it at once, and gocloud's Ack that must follow changes
// nothing and is not an error.
func TestRejectThroughMessageAs(t *testing.T) {
	ctx := guard(t)
	b, _ := brokertest.New[[]byte](t)
	bsub := brokertest.Subscribe(t, b, "jobs", "work")
	top, s := open(t, b, nil)
	send(t, ctx, top, "poison", nil)
	send(t, ctx, top, "fine", nil)

	m, d := receive(t, ctx, s)
	var sub *broker.Subscription[[]byte]
	if !m.As(&sub) || sub != bsub {
		t.Fatalf("Message.As(*broker.Subscription) = %v, want the subscription", sub)
	}
	if err := sub.Reject(d.LeaseID, errors.New("cannot parse")); err != nil {
		t.Fatal(err)
	}
	m.Ack()
	m, _ = receive(t, ctx, s) // still working: the moot ack was no error
	if string(m.Body) != "fine" {
		t.Fatalf("got %q", m.Body)
	}
	m.Ack()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if dls := b.DeadLetters(); len(dls) != 1 || dls[0].Reason != queue.ReasonRejected || dls[0].LastError != "cannot parse" {
		t.Fatalf("dead letters: %+v", dls)
	}
	if st := bsub.Stats(); st.Acked != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// Without extension: an ack after the deadline still deletes a message not
// delivered again (a late ack loses nothing); an ack of a message
// delivered again changes nothing, and gocloud sees no error.
func TestAcksAfterTheDeadline(t *testing.T) {
	noExt := &leasebuspubsub.SubscriptionOptions{MaxExtension: poller.NoExtension}
	t.Run("late ack", func(t *testing.T) {
		ctx := guard(t)
		b, mock := brokertest.New[[]byte](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(10*time.Second)))
		bsub := brokertest.Subscribe(t, b, "jobs", "work")
		top, s := open(t, b, noExt)
		send(t, ctx, top, "slow", nil)
		m, _ := receive(t, ctx, s)
		mock.Add(time.Minute)
		m.Ack()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if st := bsub.Stats(); st.Acked != 1 || st.Visible != 0 || st.Redelivered != 0 {
			t.Fatalf("stats: %+v", st)
		}
	})
	t.Run("stale ack", func(t *testing.T) {
		ctx := guard(t)
		b, mock := brokertest.New[[]byte](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(10*time.Second)))
		bsub := brokertest.Subscribe(t, b, "jobs", "work")
		top, s := open(t, b, noExt)
		send(t, ctx, top, "slow", nil)
		m, _ := receive(t, ctx, s)
		mock.Add(10 * time.Second)
		again := bsub.TryPoll(1) // another consumer holds it now
		if len(again) != 1 || again[0].Attempt != 2 {
			t.Fatalf("after the deadline: %+v", again)
		}
		m.Ack()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown after a stale ack: %v", err)
		}
		if st := bsub.Stats(); st.Acked != 0 || st.InFlight != 1 {
			t.Fatalf("stats: %+v, want the new holder's lease untouched", st)
		}
		if err := bsub.Ack(again[0].LeaseID); err != nil {
			t.Fatal(err)
		}
	})
}

// Every error gocloud returns carries the code of the leasebus error
// behind it, and errors.Is reaches that error.
func TestErrorCodes(t *testing.T) {
	ctx := guard(t)
	b, _ := brokertest.New[[]byte](t)
	brokertest.Subscribe(t, b, "jobs", "work", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))

	missing, err := leasebuspubsub.OpenTopic(b, "missing", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = missing.Shutdown(ctx) }()
	err = missing.Send(ctx, &pubsub.Message{Body: []byte("x")})
	check(t, "Send to a missing topic", err, gcerrors.NotFound, broker.ErrTopicNotFound)

	nosub, err := leasebuspubsub.OpenSubscription(b, "jobs", "nobody", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nosub.Shutdown(ctx) }()
	_, err = nosub.Receive(ctx)
	check(t, "Receive from a missing subscription", err, gcerrors.NotFound, broker.ErrSubscriptionNotFound)

	top, s := open(t, b, nil)
	send(t, ctx, top, "fills it", nil)
	err = top.Send(ctx, &pubsub.Message{Body: []byte("one too many")})
	check(t, "Send to a full subscription (reject)", err, gcerrors.ResourceExhausted, queue.ErrQueueFull)
	var full *queue.FullError
	if !top.ErrorAs(err, &full) || full.Subscription != "work" || full.Limit != 1 {
		t.Fatalf("ErrorAs(*queue.FullError): %+v", full)
	}

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Receive(ctx)
	check(t, "Receive after the broker closed", err, gcerrors.FailedPrecondition, queue.ErrClosed)
	top2, err := leasebuspubsub.OpenTopic(b, "jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = top2.Shutdown(ctx) }()
	err = top2.Send(ctx, &pubsub.Message{Body: []byte("x")})
	check(t, "Send after the broker closed", err, gcerrors.FailedPrecondition, queue.ErrClosed)
}

func check(t *testing.T, what string, err error, code gcerrors.ErrorCode, target error) {
	t.Helper()
	if gcerrors.Code(err) != code || !errors.Is(err, target) {
		t.Fatalf("%s: %v (code %v), want %v matching %v", what, err, gcerrors.Code(err), code, target)
	}
}

// Bad arguments are errors matching queue.ErrInvalidArgument, never
// panics.
func TestOpenRefusesBadArguments(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	brokertest.Subscribe(t, b, "jobs", "work")
	for _, tc := range []struct {
		name string
		open func() error
	}{
		{"OpenTopic nil broker", func() error { _, err := leasebuspubsub.OpenTopic(nil, "jobs", nil); return err }},
		{"OpenTopic empty name", func() error { _, err := leasebuspubsub.OpenTopic(b, "", nil); return err }},
		{"OpenTopic wildcard", func() error { _, err := leasebuspubsub.OpenTopic(b, "jobs.*", nil); return err }},
		{"OpenTopic space", func() error { _, err := leasebuspubsub.OpenTopic(b, "a b", nil); return err }},
		{"OpenSubscription nil broker", func() error { _, err := leasebuspubsub.OpenSubscription(nil, "jobs", "work", nil); return err }},
		{"OpenSubscription empty name", func() error { _, err := leasebuspubsub.OpenSubscription(b, "jobs", "", nil); return err }},
		{"OpenSubscription empty topic", func() error { _, err := leasebuspubsub.OpenSubscription(b, "", "work", nil); return err }},
		{"OpenSubscription bad name", func() error { _, err := leasebuspubsub.OpenSubscription(b, "jobs", "a b", nil); return err }},
		{"OpenSubscription MaxExtension", func() error {
			_, err := leasebuspubsub.OpenSubscription(b, "jobs", "work", &leasebuspubsub.SubscriptionOptions{MaxExtension: -2})
			return err
		}},
		{"OpenSubscription ExtensionMargin", func() error {
			_, err := leasebuspubsub.OpenSubscription(b, "jobs", "work", &leasebuspubsub.SubscriptionOptions{ExtensionMargin: -1})
			return err
		}},
	} {
		if err := tc.open(); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error matching queue.ErrInvalidArgument", tc.name, err)
		}
	}
}

// A gocloud Subscription's As gives the subscription once it exists.
func TestSubscriptionAsBindsByName(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	if err := b.CreateTopic("jobs"); err != nil {
		t.Fatal(err)
	}
	s, err := leasebuspubsub.OpenSubscription(b, "jobs", "later", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	var sub *broker.Subscription[[]byte]
	if s.As(&sub) {
		t.Fatal("As succeeded before the subscription exists")
	}
	want := brokertest.Subscribe(t, b, "jobs", "later")
	if !s.As(&sub) || sub != want {
		t.Fatalf("As = %p, want %p", sub, want)
	}
	var bb *broker.Broker[[]byte]
	if !s.As(&bb) || bb != b {
		t.Fatal("As(*broker.Broker) failed")
	}
	if names, _ := b.Subscriptions("jobs"); !slices.Equal(names, []string{"later"}) {
		t.Fatalf("OpenSubscription subscribed: %v", names)
	}
}

// On a durable broker, a message sent through gocloud and not acked is
// there after a restart, headers and all; one the Subscription held
// unacked at Shutdown comes back without an attempt spent.
func TestDurableBrokerAcrossARestart(t *testing.T) {
	ctx := guard(t)
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.BytesCodec())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe("jobs", "work"); err != nil {
		t.Fatal(err)
	}
	top, s := open(t, b, nil)
	send(t, ctx, top, "held at shutdown", map[string]string{"k": "v"})
	send(t, ctx, top, "never received", nil)
	m, d := receive(t, ctx, s)
	if string(m.Body) != "held at shutdown" || d.Attempt != 1 {
		t.Fatalf("got %q at %d", m.Body, d.Attempt)
	}
	if err := s.Shutdown(ctx); err != nil { // releases it: not acked
		t.Fatal(err)
	}
	if err := top.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b, err = broker.Open(dir, queue.BytesCodec())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.Subscribe("jobs", "work"); err != nil { // declared again, as on every start
		t.Fatal(err)
	}
	_, s = open(t, b, nil)
	for _, want := range []string{"held at shutdown", "never received"} {
		m, d := receive(t, ctx, s)
		if string(m.Body) != want || d.Attempt != 1 {
			t.Fatalf("after the restart: %q at attempt %d, want %q at 1", m.Body, d.Attempt, want)
		}
		if want == "held at shutdown" && m.Metadata["k"] != "v" {
			t.Fatalf("metadata after the restart: %v", m.Metadata)
		}
		m.Ack()
	}
}
