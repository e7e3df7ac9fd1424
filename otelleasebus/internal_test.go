package otelleasebus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/benbjohnson/clock"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func TestErrorType(t *testing.T) {
	plain := errors.New("boom")
	cases := []struct {
		err  error
		want string
	}{
		{plain, "*errors.errorString"},
		{fmt.Errorf("wrapped: %w", plain), "*errors.errorString"},
		{poller.RetryAfter(0, plain), "*errors.errorString"},
		{poller.RetryAfter(0, nil), "retry_after"},
		{poller.GiveUp(nil), "give_up"},
		{fmt.Errorf("x: %w", poller.GiveUp(queue.ErrLeaseExpired)), "lease_expired"},
		{fmt.Errorf("ack: %w", queue.ErrLeaseNotFound), "lease_not_found"},
		{queue.ErrClosed, "closed"},
		{broker.ErrTopicNotFound, "topic_not_found"},
		{&poller.PanicError{Value: "x"}, "panic"},
		{context.DeadlineExceeded, "timeout"},
		{context.Canceled, "canceled"},
		{nil, "_OTHER"},
	}
	for _, c := range cases {
		if got := errorType(c.err); got != c.want {
			t.Errorf("errorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// With an SDK, every delivery is kept from its handler's start to its
// outcome, and no longer: after a run nothing is left.
func TestLiveEmptiesAfterOutcomes(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	b, err := broker.New[string](broker.WithClock(clock.NewMock()), broker.WithSubscriptionDefaults(broker.WithRetry(queue.RetryPolicy{NoBackoff: true}), broker.WithMaxAttempts(2)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe("t", "s")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := NewMiddleware(sub, WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"ok", "fail", "panic"} {
		if _, err := b.Publish(context.Background(), "t", m); err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	p, err := poller.New(sub, mw.Handler(func(_ context.Context, d queue.Delivery[string]) error {
		mw.mu.Lock()
		held = max(held, len(mw.live))
		mw.mu.Unlock()
		switch d.Payload {
		case "fail":
			return errors.New("fail")
		case "panic":
			panic("boom")
		}
		return nil
	}), mw.Observer(), poller.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held < 1 || len(mw.live) != 0 {
		t.Errorf("kept at most %d deliveries, %d after the run; want at least 1, then none", held, len(mw.live))
	}
}

// With no SDK installed (the noop providers) the middleware keeps nothing
// per delivery: the wrapper costs a span that records nothing, and the
// observer a counter that counts nothing.
func TestNoopKeepsNothing(t *testing.T) {
	mock := clock.NewMock()
	b, err := broker.New[string](broker.WithClock(mock))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe("t", "s")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := NewMiddleware(sub, WithMeterProvider(metricnoop.NewMeterProvider()), WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), "t", "x"); err != nil {
		t.Fatal(err)
	}
	held := -1
	p, err := poller.New(sub, mw.Handler(func(context.Context, queue.Delivery[string]) error {
		mw.mu.Lock()
		held = len(mw.live)
		mw.mu.Unlock()
		return nil
	}), mw.Observer())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Errorf("the middleware kept %d deliveries with noop providers, want 0", held)
	}
}
