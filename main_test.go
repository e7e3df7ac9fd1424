package leasebus_test

// TestMain and the helpers that the root tests share.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/queue"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// canceled returns a context that is already done.
func canceled() context.Context {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	return c
}

var ctx = context.Background()

// payloads returns the payloads of ds, in order.
func payloads[T any](ds []queue.Delivery[T]) []T {
	out := make([]T, len(ds))
	for i, d := range ds {
		out[i] = d.Payload
	}
	return out
}

// balanced checks the conservation invariant of a subscription's stats.
func balanced(t *testing.T, st queue.Stats) {
	t.Helper()
	in := st.Published + st.Redriven
	out := st.Acked + st.DeadLettered + st.Dropped + uint64(st.Visible+st.Delayed+st.InFlight+st.HeldBack)
	assert.Equal(t, in, out, "published+redriven must equal acked+dead+dropped+held: %+v", st)
}
