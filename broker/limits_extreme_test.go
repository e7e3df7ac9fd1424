package broker_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// TestRateLimitsPastInt64Nanoseconds: a period so long that the bucket's
// arithmetic passes what a time.Duration holds is still a limit: a bucket
// of one token delivers one message, however far the clock is from its
// next token.
func TestRateLimitsPastInt64Nanoseconds(t *testing.T) {
	year := 365 * 24 * time.Hour
	for _, per := range []time.Duration{100 * year, 150 * year, 250 * year, math.MaxInt64 - 1} {
		for _, tc := range []struct {
			name string
			opt  broker.SubscribeOption
			key  string
		}{
			{"WithRateLimit", broker.WithRateLimit(1, per), ""},
			{"WithKeyRateLimit", broker.WithKeyRateLimit(1, per), "k"},
			{"WithRateLimit(2)", broker.WithRateLimit(2, per), ""},
		} {
			t.Run(fmt.Sprintf("%s/%v", tc.name, per), func(t *testing.T) {
				b, mock := brokertest.New[string](t)
				if _, err := b.Subscribe("t", "refused", broker.WithRateLimit(2, math.MaxInt64)); !errors.Is(err, queue.ErrInvalidArgument) {
					t.Fatalf("WithRateLimit(2, math.MaxInt64): %v, want its tokens refused as too long", err)
				}
				s := brokertest.Subscribe(t, b, "t", "s", tc.opt, broker.WithKeyConcurrency(10))
				for range 5 {
					if _, err := b.Publish(t.Context(), "t", "x", broker.WithKey(tc.key)); err != nil {
						t.Fatal(err)
					}
				}
				want := 1
				if tc.name == "WithRateLimit(2)" {
					want = 2
				}
				if got := len(s.TryPoll(10)); got != want {
					t.Fatalf("delivered %d at once, want %d", got, want)
				}
				mock.Add(24 * time.Hour)
				if got := len(s.TryPoll(10)); got != 0 {
					t.Fatalf("delivered %d a day later, want 0", got)
				}
			})
		}
	}
}
