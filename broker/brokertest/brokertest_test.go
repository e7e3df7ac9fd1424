package brokertest_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHelpers(t *testing.T) {
	b, mock := brokertest.New[string](t, broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Second)))
	if !mock.Now().Equal(brokertest.Epoch) {
		t.Fatalf("mock starts at %v", mock.Now())
	}
	s := brokertest.Subscribe(t, b, "t", "s")
	ms := brokertest.Publish(t, b, "t", "a", "b")
	if len(ms) != 2 || ms[1].Payload != "b" {
		t.Fatalf("Publish returned %v", ms)
	}
	got := make(chan int)
	go func() {
		s.TryPoll(2)
		ds, _ := s.Poll(t.Context(), 2) // blocks until the leases expire
		got <- len(ds)
	}()
	brokertest.AwaitParked(t, s, 1)
	mock.Add(time.Second)
	if n := <-got; n != 2 {
		t.Fatalf("redelivered %d, want 2", n)
	}
}
