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
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	m, err := pub.Publish(ctx, topicOf(url), "now", queue.WithHeaders(map[string]string{"trace-id": "t1"}))
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

	if _, err := pub.Publish(ctx, topicOf(url), "later", queue.WithDelay(1500*time.Millisecond)); err != nil {
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
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
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
	ms, err := pub.PublishBatch(ctx, topicOf(url), payloads)
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
	if ms, err := pub.PublishBatch(ctx, topicOf(url), nil); ms != nil || err != nil {
		t.Fatalf("empty batch: %v, %v", ms, err)
	}
}

// On a FIFO queue the key is the message group, and a dedup ID stores a
// message once, in Publish and in a batch resent.
func TestPublishFIFO(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "orders.fifo", map[string]string{"FifoQueue": "true"})
	ctx := context.Background()
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	first, err := pub.Publish(ctx, topicOf(url), "a1", queue.WithKey("a"), queue.WithDedupID("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := pub.Publish(ctx, topicOf(url), "a1 again", queue.WithKey("a"), queue.WithDedupID("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID {
		t.Fatalf("the duplicate's ID %v, want the first's %v", again.ID, first.ID)
	}
	batch := []string{"a2", "a3", "b1"}
	opts := []queue.PublishOption{queue.WithKey("a"), queue.WithDedupIDs([]string{"order-2", "order-3", "order-4"})}
	for range 2 { // resent: stored once
		if _, err := pub.PublishBatch(ctx, topicOf(url), batch, opts...); err != nil {
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
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	many := map[string]string{}
	for i := range 11 {
		many[fmt.Sprint("h", i)] = "v"
	}
	ps, pf := topicOf(std), topicOf(fifo)
	for _, c := range []struct {
		name  string
		topic string
		opts  []queue.PublishOption
		want  error
	}{
		{"priority", ps, []queue.PublishOption{queue.WithPriority(queue.PriorityHigh)}, sqsleasebus.ErrUnsupported},
		{"not a priority", ps, []queue.PublishOption{queue.WithPriority(99)}, queue.ErrInvalidArgument},
		{"TTL", ps, []queue.PublishOption{queue.WithTTL(time.Minute)}, sqsleasebus.ErrUnsupported},
		{"key on a standard queue", ps, []queue.PublishOption{queue.WithKey("k")}, sqsleasebus.ErrUnsupported},
		{"dedup on a standard queue", ps, []queue.PublishOption{queue.WithDedupID("d")}, sqsleasebus.ErrUnsupported},
		{"delay past 15m", ps, []queue.PublishOption{queue.WithDelay(16 * time.Minute)}, queue.ErrInvalidArgument},
		{"negative delay", ps, []queue.PublishOption{queue.WithDelay(-time.Second)}, queue.ErrInvalidArgument},
		{"11 headers", ps, []queue.PublishOption{queue.WithHeaders(many)}, queue.ErrInvalidArgument},
		{"a header name SQS refuses", ps, []queue.PublishOption{queue.WithHeaders(map[string]string{"a b": "v"})}, queue.ErrInvalidArgument},
		{"a header name of the package's", ps, []queue.PublishOption{queue.WithHeaders(map[string]string{"leasebus-dead-letter": "{}"})}, queue.ErrInvalidArgument},
		{"zero option", ps, []queue.PublishOption{{}}, queue.ErrInvalidArgument},
		{"a topic no queue can be named", "no queue!", nil, queue.ErrInvalidArgument},
		{"a dedup ID SQS does not take", pf, []queue.PublishOption{queue.WithDedupID("with space")}, queue.ErrInvalidArgument},
		{"a key of the package's", pf, []queue.PublishOption{queue.WithKey("leasebus-unkeyed-x")}, queue.ErrInvalidArgument},
		{"FIFO with a delay", pf, []queue.PublishOption{queue.WithKey("k"), queue.WithDelay(time.Second)}, sqsleasebus.ErrUnsupported},
		{"dedup IDs in Publish", pf, []queue.PublishOption{queue.WithKey("k"), queue.WithDedupIDs([]string{"x"})}, queue.ErrInvalidArgument},
	} {
		if _, err := pub.Publish(ctx, c.topic, "p", c.opts...); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want one matching %v", c.name, err, c.want)
		}
		var o queue.PublishOptions
		if o.Apply(c.opts...) == nil && o.DedupIDs == nil { // a batch's IDs are Publish's own refusal
			if err := pub.CheckPublish(c.topic, o); !errors.Is(err, c.want) {
				t.Errorf("%s: CheckPublish = %v, want one matching %v", c.name, err, c.want)
			}
		}
	}
	if _, err := pub.Publish(ctx, ps, strings.Repeat("x", 1<<20+1)); !errors.Is(err, sqsleasebus.ErrTooLarge) {
		t.Errorf("a body over 1 MiB: %v", err)
	}
	if _, err := pub.PublishBatch(ctx, ps, []string{"a", strings.Repeat("x", 1<<20+1)}); !errors.Is(err, sqsleasebus.ErrTooLarge) {
		t.Errorf("a batch entry over 1 MiB: %v", err)
	}
	if _, err := pub.PublishBatch(ctx, pf, []string{"a", "b"}, queue.WithKey("k"), queue.WithDedupIDs([]string{"x"})); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("one dedup ID for two payloads: %v", err)
	}
	if _, err := pub.PublishBatch(ctx, pf, []string{"a"}, queue.WithKey("k"), queue.WithDedupID("x")); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("WithDedupID in a batch: %v", err)
	}
	if _, err := sqsleasebus.NewPublisher[string](srv.Client, nil, sqsleasebus.WithVisibilityTimeout(time.Second)); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("NewPublisher with a Subscription's option: %v", err)
	}
	if _, err := sqsleasebus.NewPublisher[string](nil, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("NewPublisher(nil client): %v", err)
	}
	// Nothing refused was sent.
	out, err := srv.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(std), AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := out.Attributes["ApproximateNumberOfMessages"]; n != "0" {
		t.Fatalf("%s messages in the queue after refusals", n)
	}
	// A queue that does not exist is the first Publish's error: not found,
	// not refused for good (it may be made).
	var qe *sqsleasebus.QueueError
	if _, err := pub.Publish(ctx, "nope", "p"); !errors.Is(err, sqsleasebus.ErrQueueNotFound) || !errors.Is(err, queue.ErrTopicNotFound) || !errors.As(err, &qe) {
		t.Fatalf("Publish to a missing queue: %v", err)
	}
}

// topicOf is the topic of the queue at url, to a Publisher: its name.
func topicOf(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }
