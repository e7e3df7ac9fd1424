package natsleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// The broker's subscription limits are refused by name; their defaults
// are accepted.
func TestFlowControlRefused(t *testing.T) {
	bus, _, _ := twoSubs(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for name, c := range map[string]struct {
		opt  natsleasebus.SubscribeOption
		want error
	}{
		"WithRateLimit":        {natsleasebus.WithRateLimit(10, time.Second), errors.ErrUnsupported},
		"WithKeyRateLimit":     {natsleasebus.WithKeyRateLimit(1, time.Second), errors.ErrUnsupported},
		"WithKeyConcurrency":   {natsleasebus.WithKeyConcurrency(3), errors.ErrUnsupported},
		"WithKeyConcurrency 0": {natsleasebus.WithKeyConcurrency(0), queue.ErrInvalidArgument},
		"WithFairKeys":         {natsleasebus.WithFairKeys(), errors.ErrUnsupported},
	} {
		_, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "limited", c.opt)
		if !errors.Is(err, c.want) {
			t.Errorf("Subscribe with %s: %v, want an error matching %v", name, err, c.want)
		}
		if c.want == errors.ErrUnsupported && !errors.Is(err, natsleasebus.ErrUnsupported) {
			t.Errorf("%s: %v does not match natsleasebus.ErrUnsupported", name, err)
		}
	}
	s, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "one-a-key", natsleasebus.WithKeyConcurrency(1))
	if err != nil {
		t.Fatalf("WithKeyConcurrency(1), the default: %v", err)
	}
	s.Close()
}
