package sqstest

import (
	"context"
	"testing"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
)

// AwaitPool waits, before a test moves the server's mock clock, until
// pool, a worker pool (over sqsleasebus) that receives from queueName, is
// at rest with its receive long-polling on the server, and, when w is not
// nil, every handler it runs waits on w (brokertest.AwaitWaiting). The
// pool counts its receive at rest once sent, as it cannot see the server;
// so this waits for the pool, then for the server to hold the receive,
// then for the pool again: a message that an ack has just freed (a FIFO
// group's next) has then reached the pool and its handler, and the next
// move of the clock finds it there. It needs the pool to have room to
// receive (fewer leases held than its WithMaxOutstanding); a pool that is
// full sends no receive, and this fails the test after 10 s of real time.
// A failure fails tb.
func AwaitPool[T any](tb testing.TB, s *Server, queueName string, pool *poller.Poller[T], w *brokertest.WaitClock) {
	tb.Helper()
	rest := func() {
		tb.Helper()
		if w != nil {
			brokertest.AwaitWaiting(tb, pool, w)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		if err := pool.AwaitQuiet(ctx); err != nil {
			tb.Fatalf("sqstest.AwaitPool: the pool did not come to rest within %v of real time: %v", hangGuard, err)
		}
	}
	rest()
	s.AwaitParked(tb, queueName, 1)
	rest()
}
