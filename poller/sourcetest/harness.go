// Package sourcetest is a conformance suite for backends of poller.Source:
// the in-memory broker, and any other backend (NATS JetStream, a database,
// a cloud queue) that hands out leased deliveries. It is modelled on
// gocloud.dev's pubsub/drivertest.
//
// A backend implements Harness in its own tests and calls Run:
//
//	func TestConformance(t *testing.T) {
//		sourcetest.Run(t, newMyHarness(t))
//	}
//
// Run checks the semantics that a poller relies on, through the
// poller.Source interface only: batch and blocking Poll, Ack (and a second
// Ack), Nack with a delay, Fail with the retry policy's backoff, Extend,
// attempt counts, redelivery after the visibility timeout, dead-lettering
// after the last attempt (failed or expired), the attempt limit each
// delivery carries (Delivery.MaxAttempts), fan-out isolation between two
// subscriptions of one topic, and Close; and, for a harness that
// implements the optional interfaces (BatchPublisher, DedupPublisher,
// TryPoller, VisibilityPoller, Purger, StatsReader, Redriver,
// PatternSubscriber, TTLPublisher, FilterSubscriber, KeyPublisher,
// DelayPublisher, Pauser, Peeker), batch publish, deduplication, TryPoll,
// PollWithVisibility, Purge, Stats, Redrive, wildcard subscriptions,
// message TTL, subscription filters, ordering keys, publish delay, pause
// and peek; and, for a subscription that implements the pool's seam
// (backend.PoolPoller, backend.PoolIdleAwaiter), that it marks the pool's
// backend.Parking exactly, leases for the hold asked, and so makes
// poller's AwaitQuiet exact over it.
//
// # Capabilities
//
// Not every backend can do everything the in-memory broker does. A harness
// declares what it can in Capabilities; a case that needs a capability the
// backend lacks is skipped with t.Skip and the reason, so `go test -v`
// lists every skipped semantic by name. Nothing is skipped silently.
//
// # Time
//
// A harness with a fake clock (Capabilities.FakeClock) moves time with
// Advance, and the suite waits for a blocked Poll to park (AwaitParked)
// before it moves the clock, so the suite runs with no real-time wait at
// all. A backend on real time reports that it cannot advance; the suite
// then waits in real time, every wait bounded by a context, with durations
// scaled by Capabilities.Unit.
package sourcetest

import (
	"context"
	"errors"
	"time"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// ErrCannotAdvance is returned by Harness.Advance of a backend on real
// time.
var ErrCannotAdvance = errors.New("sourcetest: this backend cannot advance time")

// Capabilities declares what a backend can do. The zero value is the
// least a backend must do; every true field enables more cases.
type Capabilities struct {
	// Unit is the base duration the suite builds its timeouts and delays
	// from: visibility timeouts are 4 units, nack and retry delays 2
	// units. With a fake clock any value works (0 means one second); on
	// real time pick the smallest the backend keeps to reliably (for
	// example 150ms).
	Unit time.Duration

	// FakeClock: Advance moves the backend's clock and AwaitParked waits
	// for blocked Polls; the suite never waits in real time.
	FakeClock bool

	// Priorities: the harness implements PriorityPublisher and the
	// backend delivers higher priorities first.
	Priorities bool

	// StaleAck: an Ack with a lease whose message was delivered again
	// returns an error matching queue.ErrLeaseExpired, and changes
	// nothing.
	StaleAck bool

	// ArbitraryExtend: Extend(id, d) sets the deadline to now + d for any
	// d > 0. Without it the suite only extends by the visibility timeout.
	ArbitraryExtend bool

	// LateAck: an Ack after the deadline, before the message is delivered
	// again, succeeds and deletes the message.
	LateAck bool

	// ReleaseKeepsAttempt: Release spends no attempt, so the next delivery
	// has the same Attempt.
	ReleaseKeepsAttempt bool

	// ExactParking: a subscription that implements backend.PoolPoller or
	// backend.PoolIdleAwaiter marks its backend.Parking exactly, parked
	// only while nothing but a change (a publish, a settle, a move of the
	// clock) can end the call, and unparked by that change before it
	// returns. A remote source sees only that its request is out, so it
	// marks that, and AwaitQuiet over it is what it is over a plain
	// Source; without ExactParking the cases that need exactness are
	// skipped, and those of Hold and bad requests still run.
	ExactParking bool

	// Differs names the cases the backend is known to fail, each with
	// how it differs: for a second implementation of a protocol (an
	// emulator with gaps) run against the suite so that a backend's tests
	// do not only agree with its own server. Each is skipped with its
	// reason, the rest of the suite runs, and the differences stay listed
	// by name. A name that is not a case of the suite fails the run.
	Differs map[string]string
}

// SubscribeOptions are the subscription settings the suite asks for.
type SubscribeOptions struct {
	VisibilityTimeout time.Duration // the lease each delivery gets
	MaxAttempts       int           // deliveries before dead-lettering; > 0
	RetryInitial      time.Duration // the retry policy's first delay (Fail on attempt 1), doubling
}

// Retry returns the retry policy the options describe:
// queue.RetryPolicy{Initial: RetryInitial}, doubling, capped at a minute.
func (o SubscribeOptions) Retry() queue.RetryPolicy {
	return queue.RetryPolicy{Initial: o.RetryInitial, Max: max(time.Minute, o.RetryInitial)}
}

// Subscription is a backend's subscription, as the suite drives it.
type Subscription interface {
	poller.Source[string]
	// Close closes this subscription (handle). Afterwards every call
	// returns an error, and a blocked Poll returns one.
	Close() error
}

// DeadLetter is a dead-lettered message as the suite checks it.
type DeadLetter struct {
	Payload   string
	Reason    queue.Reason
	Attempts  int
	LastError string
}

// Harness is what a backend implements to run the suite. Its methods are
// called from the test goroutine, and from one more goroutine at a time
// while a Poll blocks.
type Harness interface {
	// Capabilities declares what the backend can do.
	Capabilities() Capabilities
	// CreateTopic makes a topic. The suite uses a fresh name, made of
	// lower-case letters, digits and dashes, for each case.
	CreateTopic(ctx context.Context, topic string) error
	// Publish publishes payload to topic.
	Publish(ctx context.Context, topic, payload string) error
	// Subscribe opens the subscription name on topic. Only messages
	// published after it returns need be delivered to it.
	Subscribe(ctx context.Context, topic, name string, opts SubscribeOptions) (Subscription, error)
	// DeadLetters returns sub's dead letters, waiting until there are at
	// least n or ctx ends (then it returns what it has and ctx's error).
	DeadLetters(ctx context.Context, sub Subscription, n int) ([]DeadLetter, error)
	// Advance moves the backend's clock by d, or returns ErrCannotAdvance.
	Advance(d time.Duration) error
	// AwaitParked waits until n Polls on sub are blocked, their wake-ups
	// armed on the clock, so that Advance will wake them. Only called with
	// Capabilities.FakeClock.
	AwaitParked(ctx context.Context, sub Subscription, n int) error
	// Close releases the harness. Run calls it when the test ends.
	Close() error
}

// PriorityPublisher is implemented by a harness whose backend has
// priorities (Capabilities.Priorities).
type PriorityPublisher interface {
	PublishPriority(ctx context.Context, topic, payload string, p queue.Priority) error
}
