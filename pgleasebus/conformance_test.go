package pgleasebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/poller/sourcetest"
	"github.com/leasebus/leasebus/queue"
)

// pgHarness runs the conformance suite over a real PostgreSQL on the
// bus's mock clock.
type pgHarness struct {
	*env
	pub *pgleasebus.Publisher[string]
}

func TestConformance(t *testing.T) {
	e := newEnv(t)
	pub, err := pgleasebus.NewPublisher[string](e.bus, nil)
	if err != nil {
		t.Fatal(err)
	}
	sourcetest.Run(t, &pgHarness{env: e, pub: pub})
}

func (h *pgHarness) Capabilities() sourcetest.Capabilities {
	return sourcetest.Capabilities{
		Unit:      time.Second,
		FakeClock: true,
		// ORDER BY priority DESC, seq.
		Priorities: true,
		// A receipt names its delivery: (subscription, seq, delivery).
		StaleAck:        true,
		ArbitraryExtend: true,
		// The row stays leased by its delivery until a Poll leases it
		// again.
		LateAck:             true,
		ReleaseKeepsAttempt: true,
		// A publish, a settle or Pause in this process unparks its Polls
		// before it returns; the clock's move wakes their timers.
		ExactParking: true,
	}
}

func (h *pgHarness) CreateTopic(ctx context.Context, topic string) error {
	return h.bus.CreateTopic(ctx, topic)
}

func (h *pgHarness) Publish(ctx context.Context, topic, payload string) error {
	_, err := h.pub.Publish(ctx, topic, payload)
	return err
}

func (h *pgHarness) PublishPriority(ctx context.Context, topic, payload string, p queue.Priority) error {
	_, err := h.pub.Publish(ctx, topic, payload, queue.WithPriority(p))
	return err
}

func (h *pgHarness) Subscribe(ctx context.Context, topic, name string, o sourcetest.SubscribeOptions) (sourcetest.Subscription, error) {
	return pgleasebus.Subscribe[string](ctx, h.bus, topic, name, nil,
		pgleasebus.WithVisibilityTimeout(o.VisibilityTimeout),
		pgleasebus.WithMaxAttempts(o.MaxAttempts),
		pgleasebus.WithRetry(o.Retry()))
}

func pgSub(sub sourcetest.Subscription) *pgleasebus.Subscription[string] {
	return sub.(*pgleasebus.Subscription[string])
}

// DeadLetters reads sub's dead letters, and while there are fewer than n
// waits for a change this process sees (a settle, a Poll's sweep).
func (h *pgHarness) DeadLetters(ctx context.Context, sub sourcetest.Subscription, n int) ([]sourcetest.DeadLetter, error) {
	s := pgSub(sub)
	for {
		changed := s.Changed()
		dls, err := pgleasebus.DeadLetters[string](ctx, h.bus, nil)
		if err != nil {
			return nil, err
		}
		var out []sourcetest.DeadLetter
		for _, dl := range dls {
			if dl.Topic == s.Topic() && dl.Subscription == s.Name() {
				out = append(out, sourcetest.DeadLetter{Payload: dl.Message.Payload, Reason: dl.Reason, Attempts: dl.Attempts, LastError: dl.LastError})
			}
		}
		if len(out) >= n {
			return out, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

func (h *pgHarness) Advance(d time.Duration) error { h.clk.Add(d); return nil }

func (h *pgHarness) AwaitParked(ctx context.Context, sub sourcetest.Subscription, n int) error {
	return pgSub(sub).AwaitParked(ctx, n)
}

func (h *pgHarness) Close() error { return nil }

// The optional interfaces of the suite: all but PatternSubscriber and
// FilterSubscriber (a subscription is of one topic, and takes all of it).
var (
	_ sourcetest.PriorityPublisher = (*pgHarness)(nil)
	_ sourcetest.BatchPublisher    = (*pgHarness)(nil)
	_ sourcetest.DedupPublisher    = (*pgHarness)(nil)
	_ sourcetest.TryPoller         = (*pgHarness)(nil)
	_ sourcetest.VisibilityPoller  = (*pgHarness)(nil)
	_ sourcetest.Purger            = (*pgHarness)(nil)
	_ sourcetest.StatsReader       = (*pgHarness)(nil)
	_ sourcetest.Redriver          = (*pgHarness)(nil)
	_ sourcetest.TTLPublisher      = (*pgHarness)(nil)
	_ sourcetest.KeyPublisher      = (*pgHarness)(nil)
	_ sourcetest.DelayPublisher    = (*pgHarness)(nil)
	_ sourcetest.Pauser            = (*pgHarness)(nil)
	_ sourcetest.Peeker            = (*pgHarness)(nil)
)

func (h *pgHarness) PublishBatch(ctx context.Context, topic string, payloads []string) error {
	_, err := h.pub.PublishBatch(ctx, topic, payloads)
	return err
}

func (h *pgHarness) PublishDedup(ctx context.Context, topic, payload, id string) (queue.Message[string], error) {
	return h.pub.Publish(ctx, topic, payload, queue.WithDedupID(id))
}

func (h *pgHarness) PublishTTL(ctx context.Context, topic, payload string, ttl time.Duration) error {
	_, err := h.pub.Publish(ctx, topic, payload, queue.WithTTL(ttl))
	return err
}

func (h *pgHarness) PublishKey(ctx context.Context, topic, payload, key string) error {
	_, err := h.pub.Publish(ctx, topic, payload, queue.WithKey(key))
	return err
}

func (h *pgHarness) PublishDelay(ctx context.Context, topic, payload string, delay time.Duration) error {
	_, err := h.pub.Publish(ctx, topic, payload, queue.WithDelay(delay))
	return err
}

func (h *pgHarness) TryPoll(sub sourcetest.Subscription, n int) []queue.Delivery[string] {
	return pgSub(sub).TryPoll(n)
}

func (h *pgHarness) PollWithVisibility(ctx context.Context, sub sourcetest.Subscription, n int, vis time.Duration) ([]queue.Delivery[string], error) {
	return pgSub(sub).PollWithVisibility(ctx, n, vis)
}

func (h *pgHarness) Purge(ctx context.Context, sub sourcetest.Subscription) (int, error) {
	return pgSub(sub).Purge(ctx)
}

func (h *pgHarness) Stats(ctx context.Context, sub sourcetest.Subscription) (queue.Stats, error) {
	return pgSub(sub).Stats(ctx)
}

func (h *pgHarness) Redrive(ctx context.Context, sub sourcetest.Subscription, match func(sourcetest.DeadLetter) bool) (int, error) {
	s := pgSub(sub)
	return pgleasebus.Redrive(ctx, h.bus, nil, func(dl queue.DeadLetter[string]) bool {
		return dl.Topic == s.Topic() && dl.Subscription == s.Name() &&
			match(sourcetest.DeadLetter{Payload: dl.Message.Payload, Reason: dl.Reason, Attempts: dl.Attempts, LastError: dl.LastError})
	})
}

func (h *pgHarness) Pause(ctx context.Context, sub sourcetest.Subscription) error {
	return pgSub(sub).Pause(ctx)
}

func (h *pgHarness) Resume(ctx context.Context, sub sourcetest.Subscription) error {
	return pgSub(sub).Resume(ctx)
}

func (h *pgHarness) Peek(ctx context.Context, sub sourcetest.Subscription, limit int) ([]queue.Held[string], error) {
	return pgSub(sub).Peek(ctx, queue.PeekQuery{Limit: limit})
}
