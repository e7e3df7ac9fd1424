// Package brokertest builds brokers for tests: on a mock clock (New), or on
// the real clock for a test inside testing/synctest (NewReal), closed when
// the test ends, with helpers that wait on conditions rather than sleep.
//
// For a test of your own handler run by a worker pool, RunPool runs the
// pool until the test ends and stops it within a bound of real time, so
// that a test that forgets a wait fails with a message rather than hangs.
// A Recorder records what the pool did with each message, and the Require
// helpers check it the way a test reads: RequireAcked (waits for the ack;
// says which attempt), RequireHandled (waits until n deliveries are over,
// before the next move of the clock), RequireDeadLettered (with its reason
// and last error), RequireQueued and RequireNothingDelivered.
//
//	rec := brokertest.NewRecorder[string]()
//	pool, _ := poller.New(sub, sendWelcome, rec.Option())
//	brokertest.RunPool(t, pool)                // stopped when the test ends, within DrainLimit
//	m := brokertest.Publish(t, b, "signups", "ada@example.com")[0]
//	brokertest.RequireHandled(t, rec, m.ID, 1) // attempt 1 failed
//	pool.AwaitQuiet(ctx)
//	mock.Add(10 * time.Second)                 // its backoff
//	brokertest.RequireAcked(t, rec, m.ID)
package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// Epoch is the time a mock clock from New starts at: a fixed, readable
// instant, so failures print sensible times.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// New returns a broker on a fresh mock clock set to Epoch, and the clock.
// The broker is closed when the test ends. opts come after WithClock, and a
// failing New fails the test.
func New[T any](tb testing.TB, opts ...broker.Option) (*broker.Broker[T], *clock.Mock) {
	tb.Helper()
	mock := clock.NewMock()
	mock.Set(Epoch)
	b, err := broker.New[T](append([]broker.Option{broker.WithClock(mock)}, opts...)...)
	if err != nil {
		tb.Fatalf("brokertest.New: %v", err)
	}
	tb.Cleanup(func() { b.Close() })
	return b, mock
}

// NewReal returns a broker on the real clock, closed when the test ends,
// for a test that runs inside testing/synctest: in the bubble the real
// clock is virtual, time moves only when every goroutine of the bubble
// waits, and synctest.Wait returns when they all do. That is the exact
// way to test handlers that themselves wait on time (a fake of a slow
// dependency, a sleep between calls) or on each other: the bubble sees
// every goroutine, where a mock clock's test sees only what the pool
// tells it (see poller.Poller.AwaitQuiet). Subscribe, Publish and
// RunPool work in a bubble as they do on a mock clock. The Require
// helpers' bound (DefaultWait, or Recorder.SetWait) is the bubble's time
// there: it passes as the bubble's time moves, so a Require that waits
// for what happens later than its bound fails; let the time pass first
// (time.Sleep, then synctest.Wait), then Require. opts come after
// WithClock(clock.New()); a failing NewReal fails the test.
//
//	synctest.Test(t, func(t *testing.T) {
//		b := brokertest.NewReal[string](t)
//		...
//		time.Sleep(5 * time.Second) // five seconds of the bubble's time, at once
//		synctest.Wait()             // every goroutine waits: the pool is at rest
//	})
func NewReal[T any](tb testing.TB, opts ...broker.Option) *broker.Broker[T] {
	tb.Helper()
	b, err := broker.New[T](append([]broker.Option{broker.WithClock(clock.New())}, opts...)...)
	if err != nil {
		tb.Fatalf("brokertest.NewReal: %v", err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// Subscribe creates topic (if needed) and the subscription name on it,
// failing the test on error.
func Subscribe[T any](tb testing.TB, b *broker.Broker[T], topic, name string, opts ...broker.SubscribeOption) *broker.Subscription[T] {
	tb.Helper()
	if err := b.CreateTopic(topic); err != nil {
		tb.Fatalf("brokertest.Subscribe: %v", err)
	}
	s, err := b.Subscribe(topic, name, opts...)
	if err != nil {
		tb.Fatalf("brokertest.Subscribe: %v", err)
	}
	return s
}

// Publish publishes each payload to topic in order, failing the test on
// error, and returns the messages.
func Publish[T any](tb testing.TB, b *broker.Broker[T], topic string, payloads ...T) []queue.Message[T] {
	tb.Helper()
	ms := make([]queue.Message[T], 0, len(payloads))
	for _, p := range payloads {
		m, err := b.Publish(context.Background(), topic, p)
		if err != nil {
			tb.Fatalf("brokertest.Publish: %v", err)
		}
		ms = append(ms, m)
	}
	return ms
}

// AwaitParked waits (up to DefaultWait of real time, then fails the test)
// until n Polls on s are parked on the clock, so that moving a mock clock
// next is sure to wake them.
func AwaitParked[T any](tb testing.TB, s *broker.Subscription[T], n int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultWait)
	defer cancel()
	if err := s.AwaitParked(ctx, n); err != nil {
		tb.Fatalf("brokertest.AwaitParked(%d): %v", n, err)
	}
}
