package broker

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

// heldIDs returns how many dedup IDs topic's table holds.
func heldIDs(b *Broker[string], topic string) int {
	b.mu.RLock()
	t := b.topics[topic]
	b.mu.RUnlock()
	t.dedup.mu.Lock()
	defer t.dedup.mu.Unlock()
	return t.dedup.ids.len()
}

// An idle broker forgets its expired dedup IDs: no publish has to come.
func TestDedupJanitorForgetsWithoutAPublish(t *testing.T) {
	mock := clock.NewMock()
	b, err := New[string](WithClock(mock), WithDedupWindow(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe("t", "s"); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if _, err := b.Publish(context.Background(), "t", "x", WithDedupID(fmt.Sprint("order-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := heldIDs(b, "t"); n != 1000 {
		t.Fatalf("held %d IDs, want 1000", n)
	}
	mock.Add(30 * time.Second)
	if n := heldIDs(b, "t"); n != 1000 {
		t.Fatalf("inside the window: held %d IDs, want 1000", n)
	}
	mock.Add(30 * time.Second)                   // the window passes, and the janitor runs
	deadline := time.Now().Add(10 * time.Second) // a hang guard, not a timing assertion
	for heldIDs(b, "t") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("an idle broker still holds %d expired IDs", heldIDs(b, "t"))
		}
		runtime.Gosched()
	}

	// Closed, the janitor is disarmed: nothing is left on the clock.
	if _, err := b.Publish(context.Background(), "t", "x", WithDedupID("late")); err != nil {
		t.Fatal(err)
	}
	b.mu.RLock()
	d := &b.topics["t"].dedup
	b.mu.RUnlock()
	b.Close()
	d.mu.Lock()
	armed := d.janitor != nil
	d.mu.Unlock()
	if armed {
		t.Fatal("the janitor is armed after Close")
	}
}

// Closing a broker lets go of its topics' dedup IDs at once: a stopped
// runtime timer may stay in the runtime's timer heap until its time would
// have come (a window later) with its function, which holds the janitor's
// ref alone, and stop empties that. (BenchmarkDedupMemory, which closes a
// broker with a five-minute window and measures the next one's heap,
// read 130.5 B per ID with the dedup in the timer's function, 64.8 B
// without.)
func TestClosedBrokerLetsGoOfItsDedupIDs(t *testing.T) {
	b, err := New[string]() // the real clock: the runtime's timers
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe("t", "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), "t", "x", WithDedupID("order-1")); err != nil {
		t.Fatal(err)
	}
	b.mu.RLock()
	d := &b.topics["t"].dedup
	b.mu.RUnlock()
	d.mu.Lock()
	ref := d.ref
	d.mu.Unlock()
	if ref == nil || ref.d.Load() != d {
		t.Fatal("no janitor armed for a topic that holds an ID")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if ref.d.Load() != nil {
		t.Fatal("the janitor's timer still holds the closed broker's dedup IDs")
	}
}
