package sqsleasebus_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// On a mock clock, a FIFO group's next message, freed by the ack of the
// one before, reaches the pool before the test's next move: each of a
// group's three jobs, a second of the partner's time each, starts when
// the one before ended, with the README's recipe before each move of a
// second: sqstest.AwaitPool, the pool at rest, its handlers at their
// waits, the server holding its receive. (Waiting for the pool and then
// for the server, once each, let a2 start a second late in about 1 of
// 200 runs: the delete unparks the receive, which takes a2 to the pool
// after the pool has come to rest.)
func TestFIFOPoolOnMockClock(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30"})
	ctx := context.Background()
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"a1", "a2", "a3"} {
		if _, err := pub.Publish(ctx, topicOf(url), job, queue.WithKey("a")); err != nil {
			t.Fatal(err)
		}
	}
	w := brokertest.NewWaitClock(srv.Clock)
	start := srv.Clock.Now()
	var mu sync.Mutex
	var calls []string
	p, err := poller.New[string](sub, func(ctx context.Context, d queue.Delivery[string]) error {
		mu.Lock()
		calls = append(calls, fmt.Sprintf("%v %s", w.Since(start), d.Payload))
		mu.Unlock()
		select {
		case <-w.After(time.Second):
		case <-ctx.Done():
		}
		return nil
	}, poller.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	stop := runPool(t, p)
	for range 4 {
		sqstest.AwaitPool(t, srv, "jobs.fifo", p, w)
		srv.Clock.Add(time.Second)
	}
	brokertest.AwaitWaiting(t, p, w)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"0s a1", "1s a2", "2s a3"}; !slices.Equal(calls, want) {
		t.Fatalf("calls %q, want %q", calls, want)
	}
}
