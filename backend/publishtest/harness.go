// Package publishtest is a conformance suite for the publishing seam,
// backend.Publisher: the in-memory and durable broker, and any other
// backend (NATS JetStream, Amazon SQS, a database) that publishes. It is
// the publishing side's counterpart of poller/sourcetest, and is modelled,
// as that is, on gocloud.dev's pubsub/drivertest.
//
// A backend implements Harness in its own tests and calls Run:
//
//	func TestPublisherConformance(t *testing.T) {
//		publishtest.Run(t, newMyHarness(t))
//	}
//
// Run checks what everything built on publishing relies on (a schedule's
// once-per-slot, an outbox relay's exactly-once into the queue): a publish
// arrives whole (payload, headers, the ID and time it was returned with);
// a dedup ID stores a message once inside the backend's window, even once
// it is settled, and again past it; a delay holds a message back for its
// time and no less; a key keeps its messages' order; priorities order
// delivery; a TTL expires a message; a backend refuses what it cannot
// carry by name (errors.ErrUnsupported), and CheckPublish says so before
// anything is sent; invalid arguments, a message too large and a done
// context publish nothing; and two schedulers firing one schedule through
// the publisher store each slot once.
//
// # Capabilities
//
// A harness declares what its backend can carry in Capabilities; a case
// for what it cannot checks the refusal instead, and a case that needs
// what the harness cannot do (move the backend's clock) is skipped with
// t.Skip and the reason, so `go test -v` lists every skip by name.
package publishtest

import (
	"context"
	"errors"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// ErrCannotAdvance is returned by Harness.Advance of a backend on real
// time.
var ErrCannotAdvance = errors.New("publishtest: this backend cannot advance time")

// Capabilities declares what a backend's publisher carries. The zero
// value is a backend that carries payloads and headers and nothing else:
// every option it is given it refuses by name.
type Capabilities struct {
	// Unit is the base duration the suite builds delays, TTLs and waits
	// from. With a fake clock any value works (0 means one second); on
	// real time pick the smallest the backend keeps to reliably.
	Unit time.Duration
	// FakeClock: Advance moves the backend's clock, and a Receive whose
	// context is done returns what is visible at once, so the suite never
	// waits in real time.
	FakeClock bool
	// DedupWindow is how long after a publish its dedup ID stops another
	// publish of it (queue.WithDedupID); 0: the backend does not
	// deduplicate, and refuses a dedup ID by name.
	DedupWindow time.Duration
	// MaxDelay is the longest queue.WithDelay the backend takes (a longer
	// one is an invalid argument); 0: it takes no delay, and refuses one
	// by name.
	MaxDelay time.Duration
	// Priorities: the backend delivers higher priorities first; without,
	// any priority but normal is refused by name.
	Priorities bool
	// Keys: the backend keeps a key's messages in publish order; without,
	// a key is refused by name.
	Keys bool
	// TTL: the backend expires a message its TTL after the publish;
	// without, a TTL is refused by name.
	TTL bool
	// MaxSize is the size, in bytes, of the largest message the backend
	// takes: a payload one byte over it is an invalid argument, and one a
	// KiB under it (room for what the backend adds) is taken. 0: no limit
	// the suite tests.
	MaxSize int
	// Differs names the cases the backend is known to fail, each with how
	// it differs: skipped with the reason, and kept listed. A name that is
	// no case of the suite fails the run.
	Differs map[string]string
}

// Harness is what a backend implements to run the suite. Its methods are
// called from the test goroutine, and from the schedulers' goroutines
// (Publisher's methods only).
type Harness interface {
	// Capabilities declares what the backend's publisher carries.
	Capabilities() Capabilities
	// Publisher returns the publisher under test, of string payloads.
	Publisher() backend.Publisher[string]
	// NewTopic makes a fresh topic, of a name of the harness's choosing,
	// with a subscription Receive reads, and returns its name. Only what
	// is published after it returns need be received.
	NewTopic(ctx context.Context) (string, error)
	// Receive returns, in the order the backend delivers them, up to n
	// messages published to topic, settling each (so that a key's next
	// message comes): as soon as it has n, or when ctx ends, with what it
	// has then (ctx's end is no error). With ctx done on entry it returns
	// what is visible at once, without waiting.
	Receive(ctx context.Context, topic string, n int) ([]queue.Message[string], error)
	// Advance moves the backend's clock by d, or returns ErrCannotAdvance.
	Advance(d time.Duration) error
	// Close releases the harness. Run calls it when the test ends.
	Close() error
}
