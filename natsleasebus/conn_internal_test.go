package natsleasebus

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The tries that begin within a grain of each other share a context: it
// never ends before a try's own end, at most tryGrain after it, and at
// once when the client reconnects.
func TestTriesShareAContextWithinAGrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEpoch()
		now := time.Now()
		end := now.Add(5 * time.Second)

		a := e.until(end)
		if dl, ok := a.Deadline(); !ok || !dl.Equal(end.Add(tryGrain)) {
			t.Fatalf("deadline %v (%v), want %v", dl, ok, end.Add(tryGrain))
		}
		if b := e.until(end.Add(tryGrain)); b != a {
			t.Error("a try ending a grain later got a context of its own")
		}
		if b := e.until(end.Add(-1)); b == a {
			t.Error("a try ending more than a grain before the shared end shares it")
		}
		c := e.until(end.Add(tryGrain + 1))
		if c == a {
			t.Fatal("a try ending after the shared end shares it")
		}

		time.Sleep(end.Add(tryGrain).Sub(now) - 1)
		if err := a.Err(); err != nil {
			t.Fatalf("ended %v before its deadline", err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait() // the deadline's timer ends it
		if err := a.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("at its deadline: %v, want DeadlineExceeded", err)
		}
		if d := e.until(time.Now().Add(time.Second)); d.Err() != nil {
			t.Fatal("a try after the shared context ended got the ended one")
		}

		e.cancel() // reconnected
		synctest.Wait()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("after a reconnect: %v, want Canceled", err)
		}
	})
}
