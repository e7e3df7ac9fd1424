package sourcetest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/poller/sourcetest"
	"github.com/leasebus/leasebus/queue"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memHarness runs the suite against the in-memory broker on a mock clock.
type memHarness struct {
	b    *broker.Broker[string]
	mock *clock.Mock
}

// memSub is a broker subscription that closes by unsubscribing.
type memSub struct {
	*broker.Subscription[string]
	b *broker.Broker[string]
}

func (s memSub) Close() error { return s.b.Unsubscribe(s.Topic(), s.Name()) }

var (
	_ poller.Source[string]        = memSub{}
	_ backend.Rejecter             = memSub{}
	_ sourcetest.PriorityPublisher = (*memHarness)(nil)
)

func (h *memHarness) Capabilities() sourcetest.Capabilities {
	return sourcetest.Capabilities{
		Unit:                time.Second,
		FakeClock:           true,
		Priorities:          true,
		StaleAck:            true,
		ArbitraryExtend:     true,
		LateAck:             true,
		ReleaseKeepsAttempt: true,
		ExactParking:        true,
	}
}

func (h *memHarness) CreateTopic(_ context.Context, topic string) error {
	return h.b.CreateTopic(topic)
}

func (h *memHarness) Publish(ctx context.Context, topic, payload string) error {
	_, err := h.b.Publish(ctx, topic, payload)
	return err
}

func (h *memHarness) PublishPriority(ctx context.Context, topic, payload string, p queue.Priority) error {
	_, err := h.b.Publish(ctx, topic, payload, broker.WithPriority(p))
	return err
}

func (h *memHarness) Subscribe(_ context.Context, topic, name string, o sourcetest.SubscribeOptions) (sourcetest.Subscription, error) {
	s, err := h.b.Subscribe(topic, name,
		broker.WithVisibilityTimeout(o.VisibilityTimeout),
		broker.WithMaxAttempts(o.MaxAttempts),
		broker.WithRetry(o.Retry()))
	if err != nil {
		return nil, err
	}
	return memSub{s, h.b}, nil
}

// DeadLetters reads the broker's store: on a mock clock every dead letter
// due is there at once (expiry is settled lazily, on the call).
func (h *memHarness) DeadLetters(_ context.Context, sub sourcetest.Subscription, _ int) ([]sourcetest.DeadLetter, error) {
	s, ok := sub.(memSub)
	if !ok {
		return nil, fmt.Errorf("not a memSub: %T", sub)
	}
	var out []sourcetest.DeadLetter
	for _, dl := range h.b.DeadLetters() {
		if dl.Message.Topic == s.Topic() && dl.Subscription == s.Name() {
			out = append(out, sourcetest.DeadLetter{Payload: dl.Message.Payload, Reason: dl.Reason, Attempts: dl.Attempts, LastError: dl.LastError})
		}
	}
	return out, nil
}

func (h *memHarness) Advance(d time.Duration) error {
	h.mock.Add(d)
	return nil
}

func (h *memHarness) AwaitParked(ctx context.Context, sub sourcetest.Subscription, n int) error {
	s, ok := sub.(memSub)
	if !ok {
		return fmt.Errorf("not a memSub: %T", sub)
	}
	return s.AwaitParked(ctx, n)
}

func (h *memHarness) Close() error { return h.b.Close() }

func TestInMemoryBroker(t *testing.T) {
	b, mock := brokertest.New[string](t)
	sourcetest.Run(t, &memHarness{b: b, mock: mock})
}

// The durable broker passes the same suite: its subscriptions behave as the
// in-memory ones while they run (SyncNone here, to keep the suite fast; the
// mode changes when a call returns, not what it does).
func TestDurableBroker(t *testing.T) {
	mock := clock.NewMock()
	b, err := broker.Open(t.TempDir(), queue.StringCodec(), broker.WithClock(mock), broker.WithSync(broker.SyncNone))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sourcetest.Run(t, &memHarness{b: b, mock: mock})
}

// The optional interfaces, on the broker.
var (
	_ sourcetest.BatchPublisher    = (*memHarness)(nil)
	_ sourcetest.DedupPublisher    = (*memHarness)(nil)
	_ sourcetest.TryPoller         = (*memHarness)(nil)
	_ sourcetest.VisibilityPoller  = (*memHarness)(nil)
	_ sourcetest.Purger            = (*memHarness)(nil)
	_ sourcetest.StatsReader       = (*memHarness)(nil)
	_ sourcetest.Redriver          = (*memHarness)(nil)
	_ sourcetest.PatternSubscriber = (*memHarness)(nil)
	_ sourcetest.Pauser            = (*memHarness)(nil)
	_ sourcetest.Peeker            = (*memHarness)(nil)
)

func (h *memHarness) Pause(_ context.Context, sub sourcetest.Subscription) error {
	return sub.(memSub).Pause()
}

func (h *memHarness) Resume(_ context.Context, sub sourcetest.Subscription) error {
	return sub.(memSub).Resume()
}

func (h *memHarness) Peek(_ context.Context, sub sourcetest.Subscription, limit int) ([]queue.Held[string], error) {
	return sub.(memSub).Peek(queue.PeekQuery{Limit: limit})
}

func (h *memHarness) PublishBatch(ctx context.Context, topic string, payloads []string) error {
	_, err := h.b.PublishBatch(ctx, topic, payloads)
	return err
}

func (h *memHarness) PublishDedup(ctx context.Context, topic, payload, id string) (queue.Message[string], error) {
	return h.b.Publish(ctx, topic, payload, broker.WithDedupID(id))
}

func (h *memHarness) TryPoll(sub sourcetest.Subscription, n int) []queue.Delivery[string] {
	return sub.(memSub).TryPoll(n)
}

func (h *memHarness) PollWithVisibility(ctx context.Context, sub sourcetest.Subscription, n int, vis time.Duration) ([]queue.Delivery[string], error) {
	return sub.(memSub).PollWithVisibility(ctx, n, vis)
}

func (h *memHarness) Purge(_ context.Context, sub sourcetest.Subscription) (int, error) {
	return sub.(memSub).Purge()
}

func (h *memHarness) Stats(_ context.Context, sub sourcetest.Subscription) (queue.Stats, error) {
	return sub.(memSub).Stats(), nil
}

func (h *memHarness) Redrive(_ context.Context, sub sourcetest.Subscription, match func(sourcetest.DeadLetter) bool) (int, error) {
	s := sub.(memSub)
	return h.b.Redrive(func(dl queue.DeadLetter[string]) bool {
		return dl.Message.Topic == s.Topic() && dl.Subscription == s.Name() &&
			match(sourcetest.DeadLetter{Payload: dl.Message.Payload, Reason: dl.Reason, Attempts: dl.Attempts, LastError: dl.LastError})
	})
}

func (h *memHarness) Patterns() bool { return true }

// The publish and subscribe options beyond the basics, on the broker.
var (
	_ sourcetest.TTLPublisher     = (*memHarness)(nil)
	_ sourcetest.FilterSubscriber = (*memHarness)(nil)
	_ sourcetest.KeyPublisher     = (*memHarness)(nil)
	_ sourcetest.DelayPublisher   = (*memHarness)(nil)
)

func (h *memHarness) PublishTTL(ctx context.Context, topic, payload string, ttl time.Duration) error {
	_, err := h.b.Publish(ctx, topic, payload, broker.WithTTL(ttl))
	return err
}

func (h *memHarness) SubscribeFiltered(_ context.Context, topic, name string, o sourcetest.SubscribeOptions, keep func(queue.Message[string]) bool) (sourcetest.Subscription, error) {
	s, err := h.b.Subscribe(topic, name,
		broker.WithVisibilityTimeout(o.VisibilityTimeout),
		broker.WithMaxAttempts(o.MaxAttempts),
		broker.WithRetry(o.Retry()),
		broker.WithFilter(keep))
	if err != nil {
		return nil, err
	}
	return memSub{s, h.b}, nil
}

func (h *memHarness) PublishKey(ctx context.Context, topic, payload, key string) error {
	_, err := h.b.Publish(ctx, topic, payload, broker.WithKey(key))
	return err
}

func (h *memHarness) PublishDelay(ctx context.Context, topic, payload string, delay time.Duration) error {
	_, err := h.b.Publish(ctx, topic, payload, broker.WithDelay(delay))
	return err
}
