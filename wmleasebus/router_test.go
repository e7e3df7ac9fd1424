package wmleasebus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/wmleasebus"
)

// watermill's Router runs on the Pub/Sub unchanged: a handler's error
// nacks (the attempt spent, retried after the backoff), its output is
// published, and the router's Close closes the Subscriber.
func TestRouter(t *testing.T) {
	b, err := broker.New[[]byte]()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	logger := watermill.NopLogger{}
	pub, _ := wmleasebus.NewPublisher(b, wmleasebus.PublisherConfig{}, logger)
	sub, _ := wmleasebus.NewSubscriber(b, wmleasebus.SubscriberConfig{ConsumerGroup: "billing",
		SubscribeOptions: []broker.SubscribeOption{broker.WithRetry(queue.RetryPolicy{Initial: time.Millisecond})}}, logger)
	out, _ := wmleasebus.NewSubscriber(b, wmleasebus.SubscriberConfig{ConsumerGroup: "audit"}, logger)
	defer out.Close()
	for _, s := range []struct {
		sub   *wmleasebus.Subscriber
		topic string
	}{{sub, "orders"}, {out, "charged"}} {
		if err := s.sub.SubscribeInitialize(s.topic); err != nil {
			t.Fatal(err)
		}
	}

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	attempts := map[string][]int{}
	router.AddHandler("charge", "orders", sub, "charged", pub, func(msg *message.Message) ([]*message.Message, error) {
		d, _ := wmleasebus.DeliveryFromContext(msg.Context())
		mu.Lock()
		attempts[msg.UUID] = append(attempts[msg.UUID], d.Attempt)
		mu.Unlock()
		if d.Attempt == 1 {
			return nil, errors.New("card declined, try again")
		}
		return []*message.Message{message.NewMessage("charged-"+msg.UUID, msg.Payload)}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- router.Run(ctx) }()
	<-router.Running()

	for _, id := range []string{"o1", "o2", "o3"} {
		if err := pub.Publish("orders", message.NewMessage(id, []byte(id))); err != nil {
			t.Fatal(err)
		}
	}
	charged := subscribe(t, out, "charged")
	seen := map[string]bool{}
	for range 3 {
		m := receive(t, charged)
		seen[m.UUID] = true
		m.Ack()
	}
	for _, id := range []string{"o1", "o2", "o3"} {
		if !seen["charged-"+id] {
			t.Errorf("no charged-%s among %v", id, seen)
		}
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, a := range attempts {
		if len(a) != 2 || a[0] != 1 || a[1] != 2 {
			t.Errorf("%s: attempts %v, want [1 2]", id, a)
		}
	}
	if _, err := sub.Subscribe(context.Background(), "orders"); !errors.Is(err, wmleasebus.ErrSubscriberClosed) {
		t.Errorf("the router's Close did not close the Subscriber: %v", err)
	}
	st := subscription(t, b, "orders", "billing").Stats()
	if st.Acked != 3 || st.Redelivered != 3 || st.Visible+st.InFlight+st.Delayed != 0 {
		t.Errorf("stats %+v", st)
	}
}
