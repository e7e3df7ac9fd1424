package natsleasebus

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// connWatch tells a settling call that the connection came back. A
// request that was out when the connection dropped may never be answered
// (the server died with it, or its reply was lost with the old
// connection), and waiting for it to time out kept every worker of a pool
// in Ack retries for the whole settle timeout after the server returned.
// Each try runs under the context of the connection it started on, which
// ends when the client reconnects, so the try is made again at once.
type connWatch struct {
	cur atomic.Pointer[connEpoch]
}

// connEpoch is one connection's life: its context ends when the client
// reconnects.
type connEpoch struct {
	ctx    context.Context
	cancel context.CancelFunc

	// tries is the context the tries that begin now share (see until).
	tries atomic.Pointer[sharedTry]
	mu    sync.Mutex // makes a new tries
}

// sharedTry is a context, derived from its epoch's, that ends at end.
type sharedTry struct {
	ctx    context.Context
	end    time.Time
	cancel context.CancelFunc // kept, never called: tries hold ctx till its end
}

// tryGrain is how much longer than asked a try bounded by until may run:
// the tries that begin within it of each other share one context.
const tryGrain = 10 * time.Millisecond

// until returns a context that ends at end or up to tryGrain after it,
// or when the client reconnects. A context of its own for each try, as a
// pool acking tens of thousands of messages a second makes them, costs a
// timer and two turns of the epoch's lock a try (measured: 4% of the
// process's CPU a message in BenchmarkDrain8's hand loop, docs/BENCHMARKS.md);
// the tries of one grain share one instead.
func (e *connEpoch) until(end time.Time) context.Context {
	if t := e.tries.Load(); t.covers(end) {
		return t.ctx
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.tries.Load()
	if !t.covers(end) {
		t = &sharedTry{end: end.Add(tryGrain)}
		t.ctx, t.cancel = context.WithDeadline(e.ctx, t.end)
		e.tries.Store(t)
	}
	return t.ctx
}

// covers reports whether t (nil: none yet) may bound a try that must end
// by end: it ends then or at most tryGrain later.
func (t *sharedTry) covers(end time.Time) bool {
	return t != nil && !t.end.Before(end) && t.end.Sub(end) <= tryGrain
}

func newEpoch() *connEpoch {
	ctx, cancel := context.WithCancel(context.Background())
	return &connEpoch{ctx: ctx, cancel: cancel}
}

// watchConn starts watching nc (nil: a connection the bus cannot see,
// whose tries run to their own timeout). The watcher ends when nc closes.
func watchConn(nc *nats.Conn) *connWatch {
	w := &connWatch{}
	w.cur.Store(newEpoch())
	if nc == nil {
		return w
	}
	ch := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	go func() {
		defer nc.RemoveStatusListener(ch)
		for st := range ch {
			if st == nats.CLOSED || nc.IsClosed() {
				return // a try now fails with the closed connection's error
			}
			w.cur.Swap(newEpoch()).cancel() // reconnected
		}
	}()
	return w
}

// epoch returns the connection as it is now.
func (w *connWatch) epoch() *connEpoch { return w.cur.Load() }
