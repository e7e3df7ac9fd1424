package sqsleasebus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// counts reads the queue's visible and in-flight figures from the server.
func counts(t *testing.T, srv *sqstest.Server, url string) (visible, inFlight string) {
	t.Helper()
	out, err := srv.Client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes["ApproximateNumberOfMessages"], out.Attributes["ApproximateNumberOfMessagesNotVisible"]
}

// runPool runs p until the test ends, and returns the func that stops it
// and returns Run's error.
func runPool[T any](t *testing.T, p *poller.Poller[T]) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func quiet[T any](t *testing.T, p *poller.Poller[T]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a hang guard
	defer cancel()
	if err := p.AwaitQuiet(ctx); err != nil {
		t.Fatalf("AwaitQuiet: %v; pool %+v", err, p.Stats())
	}
}

// advance moves the server's clock by d while p long-polls the queue
// name: by at most step (no more than 20 s, one receive's wait) at a
// time, each from when sqstest.AwaitPool says (a receive that a move ends
// sends the next while the mock is still moving, which could then arm its
// wait from a time the move has passed).
func advance[T any](t *testing.T, srv *sqstest.Server, name string, p *poller.Poller[T], d, step time.Duration) {
	t.Helper()
	for d > 0 {
		step := min(d, step, 20*time.Second)
		sqstest.AwaitPool(t, srv, name, p, nil)
		srv.Clock.Add(step)
		d -= step
	}
	quiet(t, p)
}

// A pool over SQS keeps a slow handler's lease alive however the clock
// moves (no second delivery, the message in flight on the server), acks
// when the handler returns, and drains: a handler running when Run's
// context ends finishes and is acked before Run returns.
func TestPoolKeepsLeaseAndDrains(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "slow", map[string]string{"VisibilityTimeout": "10"})
	sub, err := sqsleasebus.Subscribe[string](context.Background(), srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	started := make(chan queue.Delivery[string], 4)
	release := make(chan struct{})
	p, err := poller.New[string](sub, func(ctx context.Context, d queue.Delivery[string]) error {
		started <- d
		<-release
		return nil
	}, poller.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	stop := runPool(t, p)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the pool's stop, on a failure
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(context.Background(), topicOf(sub.QueueURL()), "slow"); err != nil {
		t.Fatal(err)
	}
	d := <-started
	// Steps that end the pool's long polls on the server, and take the
	// lease past many visibility timeouts, within the pool's extension
	// limit (an hour). The pool extends the lease (its receive asks for
	// the visibility timeout, 10 s) when the clock reaches its deadline
	// less a fifth: the clock moves by a second at a time, so that each
	// extension reaches the server before the deadline it keeps.
	for _, step := range []time.Duration{7 * time.Second, 13 * time.Second, time.Minute, 9 * time.Minute} {
		advance(t, srv, "slow", p, step, time.Second)
		if v, f := counts(t, srv, url); v != "0" || f != "1" {
			t.Fatalf("after %v more: %s visible, %s in flight; want the one message held", step, v, f)
		}
		select {
		case again := <-started:
			t.Fatalf("delivered again (attempt %d) while the first handler runs", again.Attempt)
		default:
		}
	}
	if d.Attempt != 1 {
		t.Fatalf("attempt %d", d.Attempt)
	}
	// Drain: stop while the handler runs; it finishes, and is acked.
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	unblock()
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := p.Stats(); st.Acked != 1 || st.InFlight != 0 {
		t.Fatalf("pool stats after the drain: %+v", st)
	}
	if v, f := counts(t, srv, url); v != "0" || f != "0" {
		t.Fatalf("after the drain: %s visible, %s in flight; want the message deleted", v, f)
	}
}

// A handler that always fails: the pool retries with the subscription's
// backoff on the mock clock, and the last attempt's failure dead-letters
// the message with its error (the suite's RedeliveryAfterVisibilityTimeout
// and MaxAttemptsAfterExpiry check a lease that lapses).
func TestPoolDeadLettersAfterMaxReceiveCount(t *testing.T) {
	srv := sqstest.Start(t)
	sub := withDLQ(t, srv, "failing", 3)
	ctx := context.Background()
	attempts := make(chan int, 8)
	outcomes := make(chan poller.Outcome, 8)
	p, err := poller.New[string](sub, func(ctx context.Context, d queue.Delivery[string]) error {
		attempts <- d.Attempt
		return errors.New("boom")
	}, poller.WithObserver(func(ev poller.Event[string]) { outcomes <- ev.Outcome }))
	if err != nil {
		t.Fatal(err)
	}
	runPool(t, p)
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, topicOf(sub.QueueURL()), "doomed"); err != nil {
		t.Fatal(err)
	}
	// The default retry: 1s after the first failure, 2s after the second.
	for attempt, backoff := range []time.Duration{time.Second, 2 * time.Second, 0} {
		if got := <-attempts; got != attempt+1 {
			t.Fatalf("attempt %d, want %d", got, attempt+1)
		}
		if backoff == 0 {
			break
		}
		if o := <-outcomes; o != poller.OutcomeRetried {
			t.Fatalf("outcome %v, want retried", o)
		}
		quiet(t, p)
		srv.Clock.Add(backoff - time.Second/2)
		quiet(t, p)
		select {
		case got := <-attempts:
			t.Fatalf("attempt %d came before its backoff of %v", got, backoff)
		default:
		}
		srv.Clock.Add(time.Second / 2)
	}
	if o := <-outcomes; o != poller.OutcomeDeadLettered {
		t.Fatalf("last outcome %v, want dead-lettered", o)
	}
	dls := awaitDeadLetters(t, sub, 1)
	if dl := dls[0]; dl.Message.Payload != "doomed" || dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 3 || dl.LastError != "boom" {
		t.Fatalf("dead letter %+v", dl)
	}
}

// awaitDeadLetters waits for the moves in flight and reads n dead letters.
func awaitDeadLetters(t *testing.T, sub *sqsleasebus.Subscription[string], n int) []queue.DeadLetter[string] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sqsleasebus.AwaitMoves(ctx, sub); err != nil {
		t.Fatal(err)
	}
	dls, err := sub.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != n {
		t.Fatalf("%d dead letters, want %d", len(dls), n)
	}
	return dls
}
