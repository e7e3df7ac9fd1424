package queue

import (
	"fmt"
	"time"

	"github.com/google/uuid"
)

// State says where a message a subscription holds is waiting.
type State uint8

// The states of a held message. The zero State means "any" in a PeekQuery.
const (
	StateVisible  State = iota + 1 // ready for the next Poll
	StateDelayed                   // waiting out a publish delay or a retry's backoff
	StateInFlight                  // leased to a consumer
	StateHeldBack                  // waiting behind an earlier message of its ordering key
)

var stateNames = [...]string{"", "visible", "delayed", "in-flight", "held-back"}

// String returns "visible", "delayed", "in-flight" or "held-back" (the
// words Stats.String uses), "any" for the zero State.
func (s State) String() string {
	if s == 0 {
		return "any"
	}
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// ParseState returns the State whose String is s; "" and "any" are the
// zero State. ok is false for any other word.
func ParseState(s string) (st State, ok bool) {
	if s == "" || s == "any" {
		return 0, true
	}
	for i, n := range stateNames {
		if i > 0 && n == s {
			return State(i), true
		}
	}
	return 0, false
}

// MaxPeek is the most messages one Peek returns.
const MaxPeek = 1000

// PeekQuery says which held messages a Peek returns: those in State (0:
// in any), with Seq above After (0: from the first), at most Limit of
// them (1 to MaxPeek), in Seq order. To page through a queue, pass the
// last Seq of one page as the next page's After. ID and Key narrow it to
// one message, or to the messages of one ordering key: the way to find a
// message a support ticket names.
type PeekQuery struct {
	State State
	After uint64
	Limit int
	ID    uuid.UUID // only the message with this ID; the zero UUID: any
	Key   string    // only messages with this ordering key; "": any
}

// Validate reports a Limit out of 1..MaxPeek or an unknown State, as an
// error matching ErrInvalidArgument.
func (q PeekQuery) Validate() error {
	if q.Limit < 1 || q.Limit > MaxPeek {
		return fmt.Errorf("%w: peek limit %d is outside 1..%d", ErrInvalidArgument, q.Limit, MaxPeek)
	}
	if int(q.State) >= len(stateNames) {
		return fmt.Errorf("%w: peek state %d is unknown", ErrInvalidArgument, q.State)
	}
	return nil
}

// Held is one message a subscription holds, as Peek shows it: a copy of
// its envelope and where it waits. Looking leases nothing and changes
// nothing.
type Held[T any] struct {
	Message[T]
	// Seq is the message's place in the subscription's arrival order
	// (priority aside), unique within it: Peek's cursor. A redriven
	// message keeps its place.
	Seq   uint64
	State State
	// Attempts is the attempts spent: deliveries so far, less those
	// handed back by Release.
	Attempts int
	// At is when the message turns visible (StateDelayed) or when its
	// lease expires (StateInFlight); zero otherwise.
	At time.Time
	// LastError is the error its last failed attempt reported ("" for
	// none), as a dead letter of it would keep.
	LastError string
	// History is its latest attempts that did not end in an ack (see
	// DeadLetter.History).
	History []Attempt
}
