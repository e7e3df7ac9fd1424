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
