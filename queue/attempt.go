package queue

import (
	"fmt"
	"time"
)

// MaxHistory is how many attempts a message's History keeps: the latest
// ones. Each keeps at most MaxHistoryError bytes of its error.
const (
	MaxHistory      = 10
	MaxHistoryError = 1 << 10
)

// Attempt is one delivery of a message that did not end in an ack: when
// and how it ended, with its error, as a dead letter (DeadLetter.History)
// and a held message (Held.History) keep it.
type Attempt struct {
	Attempt int            // its Delivery.Attempt
	Outcome AttemptOutcome // how it ended
	// At is when it ended: the settling call, or its lease's deadline.
	At time.Time
	// Held is how long the lease was held, from the delivery to At: the
	// handler's time, for a pool that settles when its handler returns.
	// 0 when the delivery's time is not known (a lease out before a
	// durable broker's restart).
	Held time.Duration
	// Error is the cause given to Fail or Reject ("failed" for none),
	// cut to MaxHistoryError bytes; "" for the other outcomes.
	Error string
}

// AttemptOutcome says how an attempt ended.
type AttemptOutcome uint8

// The outcomes of an attempt that was not acked.
const (
	_               AttemptOutcome = iota
	AttemptFailed                  // Fail or FailAfter
	AttemptNacked                  // Nack
	AttemptRejected                // Reject: dead-lettered at once
	AttemptExpired                 // its lease's deadline passed unsettled
	AttemptReleased                // Release or ReleaseAfter: its attempt was given back
)

var outcomeNames = [...]string{"", "failed", "nacked", "rejected", "expired", "released"}

// String returns "failed", "nacked", "rejected", "expired" or "released".
func (o AttemptOutcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("AttemptOutcome(%d)", uint8(o))
}
