package sqsleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// pollAll polls sub until it has n deliveries, and acks them.
func pollAll(t *testing.T, sub *sqsleasebus.Subscription[string], n int) []queue.Delivery[string] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	var got []queue.Delivery[string]
	for len(got) < n {
		ds, err := sub.Poll(ctx, n-len(got))
		if err != nil {
			t.Fatalf("Poll after %d of %d: %v", len(got), n, err)
		}
		for _, d := range ds {
			if err := sub.Ack(d.LeaseID); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, ds...)
	}
	return got
}

// pollsNothing polls sub until its receive is parked on the server with
// nothing to take, then cancels it, and returns how many it delivered: 0,
// or a Poll that did not wait (a message was visible) returns them.
func pollsNothing(t *testing.T, srv *sqstest.Server, sub *sqsleasebus.Subscription[string]) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		ds, _ := sub.Poll(ctx, 1)
		done <- len(ds)
	}()
	parked := make(chan error, 1)
	go func() {
		pctx, stop := context.WithTimeout(ctx, 30*time.Second) // a hang guard
		defer stop()
		parked <- srv.Server.AwaitParked(pctx, sub.Name(), 1)
	}()
	select {
	case n := <-done:
		return n // it did not wait
	case err := <-parked:
		if err != nil {
			t.Fatalf("the Poll neither returned nor parked: %v", err)
		}
	}
	cancel()
	return <-done
}

// A message published to a standard queue reaches a Subscription as sent:
// payload, headers, the ID Publish returned; a delayed one only once its
// delay has passed on the clock.
func TestPublishStandard(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "jobs", nil)
	ctx := context.Background()
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	m, err := pub.Publish(ctx, "now", sqsleasebus.WithHeaders(map[string]string{"trace-id": "t1"}))
	if err != nil {
		t.Fatal(err)
	}
	if m.Payload != "now" || m.Topic != "jobs" || !m.PublishedAt.Equal(sqstest.Epoch) || m.Headers.Get("trace-id") != "t1" {
		t.Fatalf("Publish returned %+v", m)
	}
	d := pollAll(t, sub, 1)[0]
	if d.ID != m.ID || d.Payload != "now" || d.Headers.Get("trace-id") != "t1" || d.Key != "" {
		t.Fatalf("delivered %+v, published %+v", d.Message, m)
	}

	if _, err := pub.Publish(ctx, "later", sqsleasebus.WithDelay(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	srv.Clock.Add(time.Second) // the delay is rounded up to 2s
	if n := pollsNothing(t, srv, sub); n != 0 {
		t.Fatal("a message delayed 2s was delivered after 1s")
	}
	srv.Clock.Add(time.Second)
	if d := pollAll(t, sub, 1)[0]; d.Payload != "later" {
		t.Fatalf("delivered %q", d.Payload)
	}
}

// PublishBatch sends in requests of at most ten entries and 1 MiB, and
// each message arrives once.
func TestPublishBatch(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "batch", nil)
	ctx := context.Background()
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	var payloads []string
	for i := range 25 {
		payloads = append(payloads, fmt.Sprint("m", i))
	}
	// Three of 400 KiB: two requests, as three would pass 1 MiB.
	for i := range 3 {
		payloads = append(payloads, fmt.Sprint(i)+strings.Repeat("x", 400<<10))
	}
	ms, err := pub.PublishBatch(ctx, payloads)
	if err != nil {
		t.Fatal(err)
	}
	got := pollAll(t, sub, len(payloads))
	var want, have []string
	for i, m := range ms {
		if m.Payload != payloads[i] {
			t.Fatalf("message %d: payload %.10q, want %.10q", i, m.Payload, payloads[i])
		}
		want = append(want, m.ID.String()+" "+m.Payload)
	}
	for _, d := range got {
		have = append(have, d.ID.String()+" "+d.Payload)
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		t.Fatalf("delivered %d messages, not the %d published", len(have), len(want))
	}
	if ms, err := pub.PublishBatch(ctx, nil); ms != nil || err != nil {
		t.Fatalf("empty batch: %v, %v", ms, err)
	}
}

// On a FIFO queue the key is the message group, and a dedup ID stores a
// message once, in Publish and in a batch resent.
func TestPublishFIFO(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "orders.fifo", map[string]string{"FifoQueue": "true"})
	ctx := context.Background()
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	first, err := pub.Publish(ctx, "a1", sqsleasebus.WithKey("a"), sqsleasebus.WithDedupID("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := pub.Publish(ctx, "a1 again", sqsleasebus.WithKey("a"), sqsleasebus.WithDedupID("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID {
		t.Fatalf("the duplicate's ID %v, want the first's %v", again.ID, first.ID)
	}
	batch := []string{"a2", "a3", "b1"}
	opts := []sqsleasebus.PublishOption{sqsleasebus.WithKey("a"), sqsleasebus.WithDedupIDs([]string{"order-2", "order-3", "order-4"})}
	for range 2 { // resent: stored once
		if _, err := pub.PublishBatch(ctx, batch, opts...); err != nil {
			t.Fatal(err)
		}
	}
	got := pollAll(t, sub, 4)
	var payloads []string
	for _, d := range got {
		if d.Key != "a" {
			t.Fatalf("%q delivered with key %q, want its group a", d.Payload, d.Key)
		}
		payloads = append(payloads, d.Payload)
	}
	if want := []string{"a1", "a2", "a3", "b1"}; !slices.Equal(payloads, want) {
		t.Fatalf("delivered %q, want %q in order, once each", payloads, want)
	}
	if n := pollsNothing(t, srv, sub); n != 0 {
		t.Fatal("a duplicate was delivered")
	}
}

// Every option SQS has no such thing for is refused by name, and bad
// input is refused before anything is sent.
func TestPublishRefusals(t *testing.T) {
	srv := sqstest.Start(t)
	std := srv.CreateQueue(t, "std", nil)
	fifo := srv.CreateQueue(t, "f.fifo", map[string]string{"FifoQueue": "true"})
	ctx := context.Background()
	ps, err := sqsleasebus.NewPublisher[string](srv.Client, std, nil)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := sqsleasebus.NewPublisher[string](srv.Client, fifo, nil)
	if err != nil {
		t.Fatal(err)
	}
	many := map[string]string{}
	for i := range 11 {
		many[fmt.Sprint("h", i)] = "v"
	}
	for _, c := range []struct {
		name string
		pub  *sqsleasebus.Publisher[string]
		opts []sqsleasebus.PublishOption
		want error
	}{
		{"priority", ps, []sqsleasebus.PublishOption{sqsleasebus.WithPriority(queue.PriorityHigh)}, sqsleasebus.ErrUnsupported},
		{"not a priority", ps, []sqsleasebus.PublishOption{sqsleasebus.WithPriority(99)}, queue.ErrInvalidArgument},
		{"TTL", ps, []sqsleasebus.PublishOption{sqsleasebus.WithTTL(time.Minute)}, sqsleasebus.ErrUnsupported},
		{"key on a standard queue", ps, []sqsleasebus.PublishOption{sqsleasebus.WithKey("k")}, sqsleasebus.ErrUnsupported},
		{"dedup on a standard queue", ps, []sqsleasebus.PublishOption{sqsleasebus.WithDedupID("d")}, sqsleasebus.ErrUnsupported},
		{"delay past 15m", ps, []sqsleasebus.PublishOption{sqsleasebus.WithDelay(16 * time.Minute)}, queue.ErrInvalidArgument},
		{"negative delay", ps, []sqsleasebus.PublishOption{sqsleasebus.WithDelay(-time.Second)}, queue.ErrInvalidArgument},
		{"11 headers", ps, []sqsleasebus.PublishOption{sqsleasebus.WithHeaders(many)}, queue.ErrInvalidArgument},
		{"a header name SQS refuses", ps, []sqsleasebus.PublishOption{sqsleasebus.WithHeaders(map[string]string{"a b": "v"})}, queue.ErrInvalidArgument},
		{"a header name of the package's", ps, []sqsleasebus.PublishOption{sqsleasebus.WithHeaders(map[string]string{"leasebus-dead-letter": "{}"})}, queue.ErrInvalidArgument},
		{"zero option", ps, []sqsleasebus.PublishOption{{}}, queue.ErrInvalidArgument},
		{"FIFO without a key", pf, nil, queue.ErrInvalidArgument},
		{"FIFO with a delay", pf, []sqsleasebus.PublishOption{sqsleasebus.WithKey("k"), sqsleasebus.WithDelay(time.Second)}, sqsleasebus.ErrUnsupported},
		{"dedup IDs in Publish", pf, []sqsleasebus.PublishOption{sqsleasebus.WithKey("k"), sqsleasebus.WithDedupIDs([]string{"x"})}, queue.ErrInvalidArgument},
	} {
		if _, err := c.pub.Publish(ctx, "p", c.opts...); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want one matching %v", c.name, err, c.want)
		}
	}
	if _, err := ps.Publish(ctx, strings.Repeat("x", 1<<20+1)); !errors.Is(err, sqsleasebus.ErrTooLarge) {
		t.Errorf("a body over 1 MiB: %v", err)
	}
	if _, err := ps.PublishBatch(ctx, []string{"a", strings.Repeat("x", 1<<20+1)}); !errors.Is(err, sqsleasebus.ErrTooLarge) {
		t.Errorf("a batch entry over 1 MiB: %v", err)
	}
	if _, err := pf.PublishBatch(ctx, []string{"a", "b"}, sqsleasebus.WithKey("k"), sqsleasebus.WithDedupIDs([]string{"x"})); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("one dedup ID for two payloads: %v", err)
	}
	if _, err := pf.PublishBatch(ctx, []string{"a"}, sqsleasebus.WithKey("k"), sqsleasebus.WithDedupID("x")); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("WithDedupID in a batch: %v", err)
	}
	if _, err := sqsleasebus.NewPublisher[string](srv.Client, std, nil, sqsleasebus.WithVisibilityTimeout(time.Second)); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("NewPublisher with a Subscription's option: %v", err)
	}
	if _, err := sqsleasebus.NewPublisher[string](nil, std, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("NewPublisher(nil client): %v", err)
	}
	if _, err := sqsleasebus.NewPublisher[string](srv.Client, "", nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("NewPublisher(no URL): %v", err)
	}
	// Nothing refused was sent.
	out, err := srv.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(std), AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := out.Attributes["ApproximateNumberOfMessages"]; n != "0" {
		t.Fatalf("%s messages in the queue after refusals", n)
	}
	// A queue that does not exist is the first Publish's error.
	gone, err := sqsleasebus.NewPublisher[string](srv.Client, srv.URL+"/000000000000/nope", nil)
	if err != nil {
		t.Fatal(err)
	}
	var qe *sqsleasebus.QueueError
	if _, err := gone.Publish(ctx, "p"); !errors.Is(err, sqsleasebus.ErrQueueNotFound) || !errors.As(err, &qe) {
		t.Fatalf("Publish to a missing queue: %v", err)
	}
}
