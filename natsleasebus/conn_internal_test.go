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
		if b := e.until(end.Add(tryGrain + 1)); b == a {
			t.Error("a try ending after the shared context shares it")
		}
		c := e.until(end.Add(tryGrain + 1)) // the shared one now ends at end + 2 grains + 1
		if d := e.until(end); d == c {
			t.Error("a try ending more than a grain before the shared context shares it")
		}

		time.Sleep(end.Add(tryGrain).Sub(now) - time.Nanosecond)
		synctest.Wait()
		if err := a.Err(); err != nil {
			t.Fatalf("ended (%v) before its deadline", err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait() // the deadline's timer ends it
		if err := a.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("at its deadline: %v, want DeadlineExceeded", err)
		}

		e.cancel() // reconnected
		synctest.Wait()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("after a reconnect: %v, want Canceled", err)
		}
	})
}
