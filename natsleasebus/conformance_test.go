package natsleasebus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/poller/sourcetest"
	"github.com/leasebus/leasebus/queue"
)

// jsHarness runs the conformance suite on an embedded server, in real
// time.
type jsHarness struct {
	bus  *natsleasebus.Bus
	unit time.Duration
}

func (h *jsHarness) Capabilities() sourcetest.Capabilities {
	return sourcetest.Capabilities{
		Unit: h.unit,
		// StaleAck holds within one handle: it remembers the latest
		// delivery of each message it holds.
		StaleAck: true,
		// Emulated by the handle: InProgress before each AckWait runs
		// out, or a Nak at a deadline shorter than AckWait.
		ArbitraryExtend: true,
		// Emulated: a released message is republished with the attempts
		// it had spent.
		ReleaseKeepsAttempt: true,
		// A late ack is a double ack of the delivery the server still
		// has pending: it succeeds and deletes the message unless the
		// server has delivered it again (to this handle: the Ack says
		// ErrLeaseExpired; to another: that handle's lease is then void).
		LateAck: true,
		// Not: FakeClock (the server keeps time), Priorities (refused:
		// natsleasebus.Publisher). The harness does not
		// implement sourcetest.KeyPublisher: ordering keys are refused
		// (queue.WithKey, refused by Publisher); nor sourcetest.Peeker: JetStream
		// cannot show a consumer's pending messages without delivering
		// them.
	}
}

// CreateTopic has nothing to create: a topic is a subject of the bus's
// stream. The suite's names are valid ones, which Publish and Subscribe
// check.
func (h *jsHarness) CreateTopic(context.Context, string) error { return nil }

func (h *jsHarness) Publish(ctx context.Context, topic, payload string) error {
	_, err := natsleasebus.Publish(ctx, h.bus, topic, payload)
	return err
}

func (h *jsHarness) Subscribe(ctx context.Context, topic, name string, o sourcetest.SubscribeOptions) (sourcetest.Subscription, error) {
	return natsleasebus.Subscribe[string](ctx, h.bus, topic, name,
		natsleasebus.WithVisibilityTimeout(o.VisibilityTimeout),
		natsleasebus.WithMaxAttempts(o.MaxAttempts),
		natsleasebus.WithRetry(o.Retry()),
		natsleasebus.WithPollSlice(50*time.Millisecond))
}

func (h *jsHarness) DeadLetters(ctx context.Context, sub sourcetest.Subscription, n int) ([]sourcetest.DeadLetter, error) {
	s, ok := sub.(*natsleasebus.Subscription[string])
	if !ok {
		return nil, fmt.Errorf("not a natsleasebus subscription: %T", sub)
	}
	dls, err := natsleasebus.FetchDeadLetters[string](ctx, h.bus, s.Topic(), s.Name(), n)
	out := make([]sourcetest.DeadLetter, 0, len(dls))
	for _, dl := range dls {
		out = append(out, sourcetest.DeadLetter{Payload: dl.Message.Payload, Reason: dl.Reason, Attempts: dl.Attempts, LastError: dl.LastError})
	}
	return out, err
}

func (h *jsHarness) Advance(time.Duration) error { return sourcetest.ErrCannotAdvance }

func (h *jsHarness) AwaitParked(context.Context, sourcetest.Subscription, int) error {
	return sourcetest.ErrCannotAdvance
}

func (h *jsHarness) Close() error { return nil }

func TestConformance(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	bus := open(t, nc, natsleasebus.WithMemoryStorage(), natsleasebus.WithDelays())
	sourcetest.Run(t, &jsHarness{bus: bus, unit: 150 * time.Millisecond})
}

// The optional interfaces of the suite.
var (
	_ sourcetest.BatchPublisher    = (*jsHarness)(nil)
	_ sourcetest.DedupPublisher    = (*jsHarness)(nil)
	_ sourcetest.TryPoller         = (*jsHarness)(nil)
	_ sourcetest.VisibilityPoller  = (*jsHarness)(nil)
	_ sourcetest.Purger            = (*jsHarness)(nil)
	_ sourcetest.StatsReader       = (*jsHarness)(nil)
	_ sourcetest.Redriver          = (*jsHarness)(nil)
	_ sourcetest.PatternSubscriber = (*jsHarness)(nil)
	_ sourcetest.Pauser            = (*jsHarness)(nil)
)

func jsSub(sub sourcetest.Subscription) *natsleasebus.Subscription[string] {
	return sub.(*natsleasebus.Subscription[string])
}

func (h *jsHarness) PublishBatch(ctx context.Context, topic string, payloads []string) error {
	_, err := natsleasebus.PublishBatch(ctx, h.bus, topic, payloads)
	return err
}

func (h *jsHarness) PublishDedup(ctx context.Context, topic, payload, id string) (queue.Message[string], error) {
	return natsleasebus.Publish(ctx, h.bus, topic, payload, queue.WithDedupID(id))
}

func (h *jsHarness) TryPoll(sub sourcetest.Subscription, n int) []queue.Delivery[string] {
	return jsSub(sub).TryPoll(n)
}

func (h *jsHarness) PollWithVisibility(ctx context.Context, sub sourcetest.Subscription, n int, vis time.Duration) ([]queue.Delivery[string], error) {
	return jsSub(sub).PollWithVisibility(ctx, n, vis)
}

func (h *jsHarness) Purge(ctx context.Context, sub sourcetest.Subscription) (int, error) {
	return jsSub(sub).Purge(ctx)
}

func (h *jsHarness) Stats(ctx context.Context, sub sourcetest.Subscription) (queue.Stats, error) {
	return jsSub(sub).Stats(ctx)
}

func (h *jsHarness) Redrive(ctx context.Context, sub sourcetest.Subscription, match func(sourcetest.DeadLetter) bool) (int, error) {
	s := jsSub(sub)
	return natsleasebus.Redrive(ctx, h.bus, s.Topic(), s.Name(), func(dl queue.DeadLetter[string]) bool {
		return match(sourcetest.DeadLetter{Payload: dl.Message.Payload, Reason: dl.Reason, Attempts: dl.Attempts, LastError: dl.LastError})
	})
}

func (h *jsHarness) Patterns() bool { return true }

// Pause pauses the subscription's consumer, as the console does (the
// server holds its pulls; nats-server 2.11 or newer).
func (h *jsHarness) Pause(ctx context.Context, sub sourcetest.Subscription) error {
	return h.pause(ctx, sub, console.Pauser.Pause)
}

// Resume ends a Pause.
func (h *jsHarness) Resume(ctx context.Context, sub sourcetest.Subscription) error {
	return h.pause(ctx, sub, console.Pauser.Resume)
}

func (h *jsHarness) pause(ctx context.Context, sub sourcetest.Subscription, op func(console.Pauser, context.Context, string, string) error) error {
	be, err := natsleasebus.ConsoleBackend[string](h.bus)
	if err != nil {
		return err
	}
	pz, ok := be.(console.Pauser)
	if !ok {
		return fmt.Errorf("the console backend %T is not a console.Pauser", be)
	}
	s := jsSub(sub)
	return op(pz, ctx, s.Topic(), s.Name())
}

// The publish and subscribe options beyond the basics. Not
// sourcetest.KeyPublisher: ordering keys are refused on JetStream.
var (
	_ sourcetest.TTLPublisher     = (*jsHarness)(nil)
	_ sourcetest.FilterSubscriber = (*jsHarness)(nil)
	_ sourcetest.DelayPublisher   = (*jsHarness)(nil)
)

func (h *jsHarness) PublishTTL(ctx context.Context, topic, payload string, ttl time.Duration) error {
	_, err := natsleasebus.Publish(ctx, h.bus, topic, payload, queue.WithTTL(ttl))
	return err
}

func (h *jsHarness) SubscribeFiltered(ctx context.Context, topic, name string, o sourcetest.SubscribeOptions, keep func(queue.Message[string]) bool) (sourcetest.Subscription, error) {
	return natsleasebus.Subscribe[string](ctx, h.bus, topic, name,
		natsleasebus.WithVisibilityTimeout(o.VisibilityTimeout),
		natsleasebus.WithMaxAttempts(o.MaxAttempts),
		natsleasebus.WithRetry(o.Retry()),
		natsleasebus.WithPollSlice(50*time.Millisecond),
		natsleasebus.WithFilter(keep))
}

func (h *jsHarness) PublishDelay(ctx context.Context, topic, payload string, delay time.Duration) error {
	_, err := natsleasebus.Publish(ctx, h.bus, topic, payload, queue.WithDelay(delay))
	return err
}
