package broker_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// TestDurableRateLimitHoldsAcrossRestarts: a restart, clean or not, does
// not refill a rate limit's bucket: a durable subscription's buckets (its
// own and each key's) start empty when it is opened again, so it never
// delivers more than the limit allows in any window, whenever the
// restarts come. The cost: the first delivery after a restart waits for a
// token (Per/N).
func TestDurableRateLimitHoldsAcrossRestarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  broker.SubscribeOption
		key  string
	}{
		{"WithRateLimit", broker.WithRateLimit(1, time.Hour), ""},
		{"WithKeyRateLimit", broker.WithKeyRateLimit(1, time.Hour), "customer-7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mock := clock.NewMock()
			mock.Set(brokertest.Epoch)
			open := func() (*broker.Broker[string], *broker.Subscription[string]) {
				b, err := broker.Open(dir, queue.StringCodec(), broker.WithClock(mock))
				require.NoError(t, err)
				require.NoError(t, b.CreateTopic("t"))
				s, err := b.Subscribe("t", "s", tc.opt, broker.WithKeyConcurrency(10))
				require.NoError(t, err)
				return b, s
			}
			b, s := open()
			for range 5 {
				_, err := b.Publish(t.Context(), "t", "x", broker.WithKey(tc.key))
				require.NoError(t, err)
			}
			delivered := len(s.TryPoll(10))
			for range 2 { // Close and Open at the same instant, twice
				require.NoError(t, b.Close())
				b, s = open()
				delivered += len(s.TryPoll(10))
			}
			mock.Add(time.Second) // and a crash: the copy of an open directory
			crashed, err := broker.OpenCopy(dir, queue.StringCodec(), broker.WithClock(mock))
			require.NoError(t, err)
			cs, err := crashed.Subscribe("t", "s", tc.opt, broker.WithKeyConcurrency(10))
			require.NoError(t, err)
			require.Empty(t, cs.TryPoll(10), "after a crash")
			require.NoError(t, crashed.Close())
			require.Equal(t, 1, delivered, "deliveries at one instant of a limit of 1 an hour, across two restarts")
			mock.Add(time.Hour - time.Second - time.Nanosecond)
			require.Empty(t, s.TryPoll(10), "a token before an hour from the restart")
			mock.Add(time.Nanosecond)
			require.Len(t, s.TryPoll(10), 1, "the token an hour after the restart")
			require.NoError(t, b.Close())
		})
	}
}
