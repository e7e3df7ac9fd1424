package poller

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// CancelAs says what becomes of the message of a job that Cancel stops.
type CancelAs int

const (
	// CancelRetry fails the message as a handler's error would: it is
	// delivered again after the source's backoff, its attempt spent (on
	// its last attempt the source dead-letters it).
	CancelRetry CancelAs = iota + 1
	// CancelDeadLetter dead-letters the message at once, as GiveUp does,
	// with reason queue.ReasonCancelled and the cancellation as its last
	// error (Reject, whose cause says so: see queue.RejectReason). A
	// source that cannot reject fails it instead, as CancelRetry.
	CancelDeadLetter
	// CancelDelete acks the message: it is gone, whatever the handler
	// returns.
	CancelDelete
)

func (a CancelAs) String() string {
	switch a {
	case CancelRetry:
		return "retry"
	case CancelDeadLetter:
		return "dead-letter"
	case CancelDelete:
		return "delete"
	}
	return fmt.Sprintf("CancelAs(%d)", int(a))
}

// ErrCancelled is what context.Cause of a cancelled job's context
// matches (errors.Is), and what the message's settlement carries as its
// error: a cancelled handler can tell a cancellation from a drain or a
// timeout.
var ErrCancelled = errors.New("poller: job cancelled")

// ErrNotRunning is Cancel's error when no pool of the registry runs a
// handler on the message.
var ErrNotRunning = errors.New("poller: no handler of the message is running")

// Cancel stops the running job of the message id in any pool of the
// registry: it cancels the handler's context with a cause matching
// ErrCancelled, and once the handler returns, whatever it returns, the
// pool settles the message as chosen (see CancelAs). A handler that
// ignores its context keeps running, and keeps its lease, extended as
// ever, until it returns: Cancel does not wait for it. In a batch pool
// (NewBatch) the call's context is cancelled, and the message is settled
// as chosen; the batch's other messages are settled by the call's
// outcomes.
//
// A job already cancelled keeps the first choice (Cancel returns nil).
// No running handler of id is ErrNotRunning; an as that is no CancelAs
// is an error matching queue.ErrInvalidArgument.
func (g *Registry) Cancel(id uuid.UUID, as CancelAs) error {
	if as < CancelRetry || as > CancelDelete {
		return backend.Invalid("Cancel: %v is no CancelAs", as)
	}
	g.mu.Lock()
	cancels := make([]func(uuid.UUID, CancelAs) bool, 0, len(g.pools))
	for _, p := range g.pools {
		cancels = append(cancels, p.cancel)
	}
	g.mu.Unlock()
	for _, c := range cancels { // outside the lock: a cancel takes the pool's
		if c(id, as) {
			return nil
		}
	}
	return ErrNotRunning
}

// cancelJob cancels the handler of the message id if one runs, and
// reports whether one did.
func (r *run[T]) cancelJob(id uuid.UUID, as CancelAs) bool {
	cause := &cancelCause{as: as}
	r.mu.Lock()
	var cancel context.CancelCauseFunc
	found := false
	for it := range r.handling {
		if it.d.ID != id {
			continue
		}
		found = true
		if it.cancelAs == 0 { // what the settlement reads, even if the handler returns before the cancel below
			it.cancelAs, it.cancelBy, cancel = as, cause, it.cancel
		}
		break
	}
	r.mu.Unlock()
	if cancel != nil {
		cancel(cause) // outside the lock: the context's AfterFuncs are the handler's code
	}
	return found
}

// cancelledAs turns a handler's result herr into the settlement Cancel
// chose for its message (as, zero for none), with Cancel's cause.
func cancelledAs(herr error, as CancelAs, cause error) error {
	switch as {
	case CancelRetry:
		return cause
	case CancelDeadLetter:
		return GiveUp(cause)
	case CancelDelete:
		return nil
	}
	return herr
}

// cancelCause is the cause of a job's context that Cancel ends: it
// matches ErrCancelled, and names the choice.
type cancelCause struct{ as CancelAs }

func (c *cancelCause) Error() string { return fmt.Sprintf("%v (%s)", ErrCancelled, c.as) }

func (c *cancelCause) Unwrap() error { return ErrCancelled }

// DeadLetterReason is ReasonCancelled: a Reject of the message (for
// CancelDeadLetter) records it (queue.RejectReason).
func (c *cancelCause) DeadLetterReason() queue.Reason { return queue.ReasonCancelled }
