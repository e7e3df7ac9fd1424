package queue

import (
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
)

// Defaults of Config's zero fields (a subscription's settings).
const (
	DefaultVisibilityTimeout = 30 * time.Second // as SQS
	DefaultMaxAttempts       = 5
	DefaultMaxQueue          = 100_000
)

// UnlimitedAttempts, as Config.MaxAttempts, redelivers a message until it
// is acked. Say so only on purpose: a poison message then never leaves.
const UnlimitedAttempts = -1

// OverflowPolicy says what a full subscription does with a new message.
type OverflowPolicy uint8

// The overflow policies. The zero value is OverflowDeadLetter.
const (
	// OverflowDeadLetter accepts the new message straight into the dead
	// letters, reason ReasonOverflow, without blocking the publisher.
	OverflowDeadLetter OverflowPolicy = iota
	// OverflowReject refuses the new message: Publish returns an error
	// naming the subscription that matches ErrQueueFull.
	OverflowReject
	// OverflowBlock makes the publisher wait until there is room, its
	// context ends (an ErrQueueFull error that also matches ctx.Err()) or
	// the subscription closes (ErrClosed).
	OverflowBlock
	// OverflowDropOldest makes room by dropping the oldest visible message
	// of the lowest priority present, counted in Stats.Dropped. When no
	// message is visible (all are delayed, held back behind their ordering
	// key, or in flight) there is nothing it may drop: the new message is
	// dropped instead, and counted the same way. (Dropping a held-back
	// message would break its key's order; finding the oldest delayed one
	// would cost a scan.)
	OverflowDropOldest
)

// String returns "dead-letter", "reject", "block" or "drop-oldest".
func (p OverflowPolicy) String() string {
	switch p {
	case OverflowDeadLetter:
		return "dead-letter"
	case OverflowReject:
		return "reject"
	case OverflowBlock:
		return "block"
	case OverflowDropOldest:
		return "drop-oldest"
	}
	return fmt.Sprintf("OverflowPolicy(%d)", uint8(p))
}

// Config is a subscription's settings (its queue's), as the broker's
// options set them and Subscription.Config reports them. The zero value of
// every field means its documented default.
type Config struct {
	// Name names the subscription in errors and dead letters.
	Name string
	// Clock is the source of every time read and timer; nil means the real
	// clock (clock.New()), which the queue reads as broker.WithClock says:
	// the monotonic reading alone, the wall reading refreshed every
	// millisecond.
	Clock clock.Clock
	// VisibilityTimeout is the lease a delivery gets; 0 means
	// DefaultVisibilityTimeout (30s).
	VisibilityTimeout time.Duration
	// MaxAttempts is the most deliveries a message gets before it is
	// dead-lettered; 0 means DefaultMaxAttempts (5); UnlimitedAttempts
	// means no limit. Other negatives are invalid.
	MaxAttempts int
	// Retry is the backoff after a reported failure (Fail).
	Retry RetryPolicy
	// MaxQueue bounds the messages held (visible + delayed + in flight); 0
	// means DefaultMaxQueue (100,000).
	MaxQueue int
	// Overflow is what a full queue does with a new message; the zero value
	// is OverflowDeadLetter.
	Overflow OverflowPolicy
	// MaxInFlight caps the leases out at once; 0 means no cap beyond
	// MaxQueue.
	MaxInFlight int
	// TTL is the default time to live of a message, from its publish (or
	// redrive); 0 means none. A message not acked by then is dead-lettered
	// with ReasonExpired instead of being delivered. An Offer's own TTL
	// overrides it.
	TTL time.Duration
	// RateLimit limits the subscription's deliveries, first or not, to a
	// token bucket of this Rate, shared by every consumer; the zero Rate
	// means none. A message waiting for a token stays visible: it is not
	// leased and spends no attempt.
	RateLimit Rate
	// KeyRateLimit is RateLimit per ordering key (Message.Key), a bucket
	// for each key; the zero Rate means none. A message whose key has no
	// token waits, visible, while those of other keys are delivered.
	// Messages without a key are not limited by it.
	KeyRateLimit Rate
	// KeyConcurrency is how many messages of one ordering key may be out
	// at once (leased, or waiting out a retry delay), handed out in publish
	// order; 0 means DefaultKeyConcurrency (1: one at a time, in order).
	KeyConcurrency int
	// FairKeys makes ordering keys take turns: among visible messages of
	// one priority the next delivery is of the key served least recently
	// (messages without a key count as one key), rather than the oldest.
	FairKeys bool
}

// DefaultKeyConcurrency is Config.KeyConcurrency's default: one message of
// a key out at a time, so that a key's messages are handled in order.
const DefaultKeyConcurrency = 1
