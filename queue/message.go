package queue

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/lease"
)

// Message is a published message: the envelope every subscription of its
// topic shares. Consumers receive it by value inside a Delivery, so no
// consumer can change what another subscription sees. Headers is read-only;
// a Payload that holds pointers (slices, maps, pointers) is shared, and
// publishers promise not to mutate it after Publish.
type Message[T any] struct {
	ID          uuid.UUID // unique per publish
	Topic       string    // the topic it was published to
	Key         string    // ordering key; "" for none
	Payload     T
	Priority    Priority // higher is delivered first; the zero value is PriorityNormal
	Headers     Headers  // read-only
	PublishedAt time.Time
}

// Delivery is one delivery of a message to a consumer: the message (by
// value, embedded so d.Payload works), its lease and how many attempts it
// has had, out of how many.
//
// When MaxAttempts > 0 and Attempt == MaxAttempts this is the last
// attempt: a failure of this delivery (Fail, Nack, or its lease expiring)
// dead-letters the message (ReasonMaxAttempts) rather than retrying it.
type Delivery[T any] struct {
	Message[T]
	LeaseID  lease.ID  // the receipt: pass it to Ack, Nack, Fail, Extend or Release
	Attempt  int       // 1 on the first delivery; Release does not count one
	Deadline time.Time // the lease expires at Deadline unless settled or extended
	// MaxAttempts is the subscription's limit on attempts when this
	// delivery was made; 0 means unlimited (the subscription has
	// UnlimitedAttempts, or its backend does not say).
	MaxAttempts int
}

// DeadLetterStats describes a dead-letter store: what it holds, and what
// left it other than by a redrive. Like every counter, Dropped and
// Discarded start from zero when a durable broker opens.
type DeadLetterStats struct {
	Held      int    // dead letters held now
	Dropped   uint64 // dropped, oldest first, because the store was full
	Discarded uint64 // removed for good by a discard
}

// DeadLetter is a message a subscription gave up on, with why.
type DeadLetter[T any] struct {
	Subscription string // the subscription that dead-lettered it
	// Topic is that subscription's topic (its pattern, for a pattern
	// subscription): with Subscription it names the subscription, where a
	// name alone may be used on several topics. Message.Topic is where the
	// message was published. "" when the backend does not say.
	Topic     string
	Message   Message[T]
	Reason    Reason
	Attempts  int    // deliveries that spent an attempt
	LastError string // the cause given to Fail or Reject, "nacked", "lease expired", or "" (overflow, TTL before any delivery)
	At        time.Time
	// KeyContinued is true for a message with an ordering key when later
	// messages of that key were waiting behind it: they went on without it.
	KeyContinued bool
	// History is its latest attempts that did not end in an ack, oldest
	// first, at most MaxHistory of them; nil for a letter that had none
	// (overflow, a TTL before any delivery) or whose backend keeps none.
	// It is read-only: copies of a letter share it.
	History []Attempt
}

// Stats is a snapshot of one subscription's queue. Visible, Delayed and
// InFlight describe now; the counters only grow.
//
// Every accepted message ends in exactly one place, so at any moment
//
//	Published + Redriven == Acked + DeadLettered + Dropped +
//	                        Visible + Delayed + InFlight + HeldBack
//
// (a purge counts its messages as Dropped).
type Stats struct {
	Visible  int // ready to be delivered now
	Delayed  int // waiting out a publish delay or a retry delay
	InFlight int // leased and not yet settled or expired
	HeldBack int // waiting behind an earlier message of their ordering key
	// Limited is how many of the Visible ones a rate limit (RateLimit,
	// KeyRateLimit) keeps from being delivered now: they wait for a
	// token, unleased, spending no attempt.
	Limited int

	Published    uint64 // messages this subscription accepted
	Delivered    uint64 // every delivery, first or not
	Acked        uint64
	Redelivered  uint64 // deliveries with Attempt > 1
	DeadLettered uint64
	Dropped      uint64 // removed by a policy the user chose (drop-oldest overflow, purge)
	Redriven     uint64 // dead letters put back by Redrive
	Rejected     uint64 // publishes refused by OverflowReject or an OverflowBlock that gave up

	// DeadLetteredBy splits DeadLettered by reason.
	DeadLetteredBy DeadLetterCounts
	// OldestVisibleAge is how long ago the oldest visible message was
	// published (SQS's ApproximateAgeOfOldestMessage, counted over the
	// visible ones): the clock's now minus its PublishedAt, 0 when
	// nothing is visible. A redriven message keeps its PublishedAt.
	OldestVisibleAge time.Duration
	// Paused is true while the subscription is paused: it accepts
	// messages but delivers none (see broker.Subscription.Pause).
	Paused bool
}

// String formats the stats on one line for a log, each count named:
// "visible=3 delayed=0 in-flight=1 held-back=0 published=9 delivered=7
// acked=5 redelivered=1 dead-lettered=1 (max-attempts=1) dropped=0
// redriven=0 publishes-refused=0 oldest-visible=2s" (publishes-refused
// is Rejected: publishes refused for overflow, not dead letters of
// ReasonRejected, which the parenthesis counts). The dead letters by reason
// appear only when there are some, " limited=N" (after held-back) only
// while a rate limit holds messages back, and " paused" only while paused.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "visible=%d delayed=%d in-flight=%d held-back=%d", s.Visible, s.Delayed, s.InFlight, s.HeldBack)
	if s.Limited > 0 {
		fmt.Fprintf(&b, " limited=%d", s.Limited)
	}
	fmt.Fprintf(&b, " published=%d delivered=%d acked=%d redelivered=%d dead-lettered=%d",
		s.Published, s.Delivered, s.Acked, s.Redelivered, s.DeadLettered)
	if s.DeadLettered > 0 {
		sep := " ("
		for r, n := range s.DeadLetteredBy.All() {
			if n > 0 {
				fmt.Fprintf(&b, "%s%s=%d", sep, r, n)
				sep = " "
			}
		}
		if sep == " " {
			b.WriteString(")")
		}
	}
	fmt.Fprintf(&b, " dropped=%d redriven=%d publishes-refused=%d oldest-visible=%v", s.Dropped, s.Redriven, s.Rejected, s.OldestVisibleAge)
	if s.Paused {
		b.WriteString(" paused")
	}
	return b.String()
}

// DeadLetterCounts counts a subscription's dead letters by reason; the
// fields sum to Stats.DeadLettered.
type DeadLetterCounts struct {
	MaxAttempts uint64 // ReasonMaxAttempts
	Overflow    uint64 // ReasonOverflow
	Expired     uint64 // ReasonExpired
	Rejected    uint64 // ReasonRejected
	Cancelled   uint64 // ReasonCancelled
}

// All yields every reason, in Reason order, with its count (zero too).
func (c DeadLetterCounts) All() iter.Seq2[Reason, uint64] {
	return func(yield func(Reason, uint64) bool) {
		for r, n := range [...]uint64{c.MaxAttempts, c.Overflow, c.Expired, c.Rejected, c.Cancelled} {
			if !yield(ReasonMaxAttempts+Reason(r), n) {
				return
			}
		}
	}
}

// Priority orders delivery within a subscription: higher first, publish
// order within one priority.
type Priority int8

// The four priorities. The zero value is PriorityNormal.
const (
	PriorityLow      Priority = -1
	PriorityNormal   Priority = 0
	PriorityHigh     Priority = 1
	PriorityCritical Priority = 2
)

// String returns "low", "normal", "high" or "critical".
func (p Priority) String() string {
	switch p {
	case PriorityLow:
		return "low"
	case PriorityNormal:
		return "normal"
	case PriorityHigh:
		return "high"
	case PriorityCritical:
		return "critical"
	}
	return fmt.Sprintf("Priority(%d)", int8(p))
}

// Reason says why a message was dead-lettered.
type Reason uint8

// The reasons a message is dead-lettered.
const (
	_                 Reason = iota
	ReasonMaxAttempts        // its last allowed attempt failed or its lease expired
	ReasonOverflow           // the subscription was full when it arrived (OverflowDeadLetter)
	ReasonExpired            // its TTL passed before it was acked
	ReasonRejected           // a consumer gave up on it (Reject)
	ReasonCancelled          // its running job was cancelled, to the dead letters (a Reject of a cancellation: see RejectReason)
)

// String returns "max-attempts", "overflow", "expired", "rejected" or
// "cancelled".
func (r Reason) String() string {
	switch r {
	case ReasonMaxAttempts:
		return "max-attempts"
	case ReasonOverflow:
		return "overflow"
	case ReasonExpired:
		return "expired"
	case ReasonRejected:
		return "rejected"
	case ReasonCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// ParseReason reverses Reason.String: it reads a reason written in a
// dead-letter header or a log. ok is false for a word it does not know.
func ParseReason(s string) (r Reason, ok bool) {
	for r := ReasonMaxAttempts; r <= ReasonCancelled; r++ {
		if r.String() == s {
			return r, true
		}
	}
	return 0, false
}

// RejectReason is the reason a Reject of a message with cause records:
// ReasonCancelled when an error in cause's chain has a method
// DeadLetterReason() Reason that returns it (the cancellation a worker
// pool's Registry.Cancel settles with CancelDeadLetter has), else
// ReasonRejected. Every backend's Reject records it.
func RejectReason(cause error) Reason {
	var r interface{ DeadLetterReason() Reason }
	if errors.As(cause, &r) && r.DeadLetterReason() == ReasonCancelled {
		return ReasonCancelled
	}
	return ReasonRejected
}

// Headers are a message's read-only string headers. The zero value has
// none. Build one with NewHeaders.
type Headers struct {
	// p points at the pairs, sorted by key and never changed after
	// NewHeaders; nil for none. A pointer, not the slice, keeps every
	// Message a word smaller (an envelope of a []byte payload is 112
	// bytes, not 128: a queued message costs less).
	p *[]header
}

type header struct{ key, value string }

// NewHeaders copies m into a Headers. Later changes to m do not show.
func NewHeaders(m map[string]string) Headers {
	if len(m) == 0 {
		return Headers{}
	}
	p := newPairs(len(m))
	for k, v := range m {
		*p = append(*p, header{k, v})
	}
	slices.SortFunc(*p, func(a, b header) int { return strings.Compare(a.key, b.key) })
	return Headers{p: p}
}

// newPairs returns an empty slice with room for n pairs. Up to 8 pairs,
// the slice and its array are one allocation.
func newPairs(n int) *[]header {
	switch {
	case n <= 1:
		b := new(struct {
			s []header
			a [1]header
		})
		b.s = b.a[:0]
		return &b.s
	case n <= 2:
		b := new(struct {
			s []header
			a [2]header
		})
		b.s = b.a[:0]
		return &b.s
	case n <= 4:
		b := new(struct {
			s []header
			a [4]header
		})
		b.s = b.a[:0]
		return &b.s
	case n <= 8:
		b := new(struct {
			s []header
			a [8]header
		})
		b.s = b.a[:0]
		return &b.s
	}
	s := make([]header, 0, n)
	return &s
}

// pairs returns the pairs, sorted by key.
func (h Headers) pairs() []header {
	if h.p == nil {
		return nil
	}
	return *h.p
}

// Get returns the value of key, or "" if there is none.
func (h Headers) Get(key string) string {
	v, _ := h.Lookup(key)
	return v
}

// Lookup returns the value of key and whether it is present.
func (h Headers) Lookup(key string) (string, bool) {
	kv := h.pairs()
	i, ok := slices.BinarySearchFunc(kv, key, func(e header, k string) int { return strings.Compare(e.key, k) })
	if !ok {
		return "", false
	}
	return kv[i].value, true
}

// Len returns the number of headers.
func (h Headers) Len() int { return len(h.pairs()) }

// All yields every header, sorted by key.
func (h Headers) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, e := range h.pairs() {
			if !yield(e.key, e.value) {
				return
			}
		}
	}
}

// String formats the headers as "map[k:v ...]", sorted by key.
func (h Headers) String() string { return fmt.Sprint(maps.Collect(h.All())) }
