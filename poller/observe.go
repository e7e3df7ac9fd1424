package poller

import (
	"fmt"

	"github.com/leasebus/leasebus/queue"
)

// Outcome is what became of a message held by the poller, or of its lease,
// as an observer sees it (see WithObserver).
type Outcome uint8

// The outcomes. Each message the poller receives ends with exactly one of
// OutcomeAcked, OutcomeRetried, OutcomeDeadLettered, OutcomeReleased and
// OutcomeSettleFailed; OutcomeExtended and OutcomeExtensionStopped may come
// before. Each of the first four says what happened at the source: the
// call that made it succeeded.
const (
	_ Outcome = iota
	// OutcomeAcked: the handler returned nil; the poller acked the lease.
	OutcomeAcked
	// OutcomeRetried: the handler failed (an error, RetryAfter, a panic,
	// or GiveUp on a source without Reject) on an attempt that was not
	// the last; the poller nacked or failed the lease, and the source
	// will deliver the message again.
	OutcomeRetried
	// OutcomeDeadLettered: the message is dead: the handler gave up
	// (GiveUp) and the poller rejected the lease, or the handler failed
	// on the message's last attempt (Delivery.Attempt ==
	// Delivery.MaxAttempts) and the poller's Nack or Fail made the source
	// dead-letter it.
	OutcomeDeadLettered
	// OutcomeReleased: the message was leased but never started (a
	// drain); the poller released the lease, so no attempt was spent.
	OutcomeReleased
	// OutcomeExtended: the poller extended the lease; the event's
	// Delivery.Deadline is the new deadline. (A subscription's leases are
	// held for the whole limit, never extended.)
	OutcomeExtended
	// OutcomeExtensionStopped: the poller will not extend the lease again
	// (the extension limit was reached, or Extend failed); it lapses at
	// Delivery.Deadline unless settled before. A subscription's lease,
	// held to the limit, reports it when the limit comes and the lease
	// lapses.
	OutcomeExtensionStopped
	// OutcomeSettleFailed: the call that was to settle the delivery (the
	// Ack of a handler that returned nil, the Nack, Fail or Reject of one
	// that failed, a drain's Release) returned an error, SourceErr; Err is
	// the handler's error (nil: it succeeded, and its Ack failed). An
	// in-process subscription's refusal changed nothing (for
	// queue.ErrLeaseExpired: the lease lapsed and the message was
	// delivered again, and the new delivery owns it). A remote source's
	// error can also mean that the answer was lost and the call took
	// effect (an Ack to a server that died before it answered): the
	// message may be settled, or come back.
	OutcomeSettleFailed
)

// String returns "acked", "retried", "dead-lettered", "released",
// "extended", "extension-stopped" or "settle-failed".
func (o Outcome) String() string {
	switch o {
	case OutcomeAcked:
		return "acked"
	case OutcomeRetried:
		return "retried"
	case OutcomeDeadLettered:
		return "dead-lettered"
	case OutcomeReleased:
		return "released"
	case OutcomeExtended:
		return "extended"
	case OutcomeExtensionStopped:
		return "extension-stopped"
	case OutcomeSettleFailed:
		return "settle-failed"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Event is one outcome of one delivery, as an observer receives it.
type Event[T any] struct {
	Outcome Outcome
	// Delivery is the delivery as polled, except that Deadline is the
	// lease's deadline as the poller last set it (after any extension).
	Delivery queue.Delivery[T]
	// Err is the handler's error (OutcomeRetried, OutcomeDeadLettered; a
	// *PanicError after a panic) or why extension stopped
	// (ErrExtensionLimit); nil otherwise.
	Err error
	// SourceErr is the error of the source call that failed
	// (OutcomeSettleFailed: Ack, Nack, Fail, Reject or Release;
	// OutcomeExtensionStopped: Extend), nil for every other outcome: for
	// example queue.ErrLeaseExpired when the lease had lapsed and the
	// message was delivered again (see OutcomeSettleFailed for what a
	// failed call did).
	SourceErr error
	// Batch is how many deliveries the handler call that settled this one
	// had: 1 for a Handler's, the call's size for a BatchHandler's
	// (NewBatch); 0 for an outcome no call settled (OutcomeReleased,
	// OutcomeExtended, OutcomeExtensionStopped, and a failed Release).
	Batch int
}

// Stats counts what a Poller did, over all its runs. The counters only
// grow; InFlight and Running describe now.
type Stats struct {
	Polled       uint64 // deliveries received from the source
	Acked        uint64 // handlers that returned nil, their Ack accepted
	Retried      uint64 // handler failures, not on the last attempt, whose Nack or Fail was accepted
	DeadLettered uint64 // GiveUps whose Reject was accepted, and last-attempt failures whose Nack or Fail was accepted
	Extended     uint64 // lease extensions accepted
	Released     uint64 // leases handed back unstarted, the Release accepted
	Panics       uint64 // handler panics recovered (each also settled as a failure)
	Errors       uint64 // source calls that failed: Poll (not for ctx or close), Ack, Nack, Fail, Reject, Extend, Release

	InFlight int // leases held now: running or waiting for a worker
	Running  int // handlers running now
}

// String formats the stats on one line for a log, each count named:
// "polled=9 acked=7 retried=1 dead-lettered=1 extended=0 released=0
// panics=0 errors=0 in-flight=0 running=0".
func (s Stats) String() string {
	return fmt.Sprintf("polled=%d acked=%d retried=%d dead-lettered=%d extended=%d released=%d panics=%d errors=%d in-flight=%d running=%d",
		s.Polled, s.Acked, s.Retried, s.DeadLettered, s.Extended, s.Released, s.Panics, s.Errors, s.InFlight, s.Running)
}
