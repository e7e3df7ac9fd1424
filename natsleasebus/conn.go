package natsleasebus

import (
	"context"
	"sync/atomic"

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
}

func newEpoch() *connEpoch {
	ctx, cancel := context.WithCancel(context.Background())
	return &connEpoch{ctx, cancel}
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

// epoch returns the context of the connection as it is now.
func (w *connWatch) epoch() context.Context { return w.cur.Load().ctx }
