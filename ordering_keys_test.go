package leasebus_test

// Ordering keys across packages: the poller, with several workers and
// failures, keeps each key's order over a broker subscription. The
// broker's own ordering-key tests are in broker/ordering_keys_test.go.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// TestPollerKeepsPerKeyOrder runs 8 workers over 100 keys with random
// failures: each key's messages are acked in publish order.
func TestPollerKeepsPerKeyOrder(t *testing.T) {
	const keys, perKey = 100, 20
	b, err := broker.New[int](broker.WithSubscriptionDefaults(broker.WithMaxAttempts(queue.UnlimitedAttempts), broker.WithRetry(queue.RetryPolicy{Initial: time.Millisecond, Max: 5 * time.Millisecond})))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	s, err := b.Subscribe("t", "s")
	require.NoError(t, err)
	for i := range perKey {
		for k := range keys {
			_, err := b.Publish(ctx, "t", i, broker.WithKey(fmt.Sprint(k)))
			require.NoError(t, err)
		}
	}

	var mu sync.Mutex
	acked := make(map[string][]int)
	var failures atomic.Int64
	rng := rand.New(rand.NewPCG(5, 6))
	var rngMu sync.Mutex
	handler := func(_ context.Context, d queue.Delivery[int]) error {
		rngMu.Lock()
		fail := rng.IntN(4) == 0
		rngMu.Unlock()
		if fail {
			failures.Add(1)
			return errors.New("random failure")
		}
		mu.Lock()
		acked[d.Key] = append(acked[d.Key], d.Payload)
		mu.Unlock()
		return nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := poller.New(s, handler, poller.WithWorkers(8), poller.WithBatch(8),
		poller.WithObserver(func(poller.Event[int]) {
			if st := s.Stats(); st.Acked == keys*perKey {
				cancel()
			}
		}))
	require.NoError(t, err)
	require.NoError(t, p.Run(runCtx))

	require.Greater(t, failures.Load(), int64(0))
	require.Len(t, acked, keys)
	for k, got := range acked {
		want := make([]int, perKey)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, got, "key %s", k)
	}
}
