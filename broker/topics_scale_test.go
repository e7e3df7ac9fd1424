package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/leasebus/leasebus/broker"
)

// Creating n topics costs O(n) in all, not O(n) each: the lock-free copy
// of the topics is not made again for every one (an SQS server creates a
// topic per queue). Doubling the topics must not quadruple the bytes
// allocated. Publishing to the newest topics still works.
func TestCreatingTopicsScalesLinearly(t *testing.T) {
	allocated := func(n int) uint64 {
		b, err := broker.New[int]()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range n {
			if err := b.CreateTopic(fmt.Sprintf("t%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		last := fmt.Sprintf("t%d", n-1)
		sub, err := b.Subscribe(last, "s")
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := b.Publish(context.Background(), last, 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := len(sub.TryPoll(10)); got != 3 {
			t.Fatalf("the newest topic took %d of 3 publishes", got)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	small, large := allocated(4000), allocated(8000)
	t.Logf("4,000 topics: %d bytes; 8,000: %d (×%.2f)", small, large, float64(large)/float64(small))
	if ratio := float64(large) / float64(small); ratio > 3 {
		t.Fatalf("4,000 topics allocated %d bytes, 8,000 allocated %d (×%.1f): the cost per topic grows with the topics", small, large, ratio)
	}
}
