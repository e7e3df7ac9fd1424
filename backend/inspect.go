package backend

import (
	"context"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// Inspector is what an operator's view reads of a backend and does to it:
// its subscriptions and their figures, its dead letters, a redrive. It is
// package console's Backend (console.NewFor serves any Inspector; console.New
// serves a *broker.Broker), declared here so that a backend offers one
// without importing the console. Every method gets the request's context
// and must be safe for concurrent use.
//
// An Inspector may do more, and the console offers what it does: one that
// also implements console.Peeker shows the messages a subscription holds;
// console.Pauser pauses and resumes delivery; console.Purger purges;
// console.Discarder discards dead letters; console.Editor redrives a dead
// letter with an edited payload; console.MessageActor (with Peeker)
// deletes, makes visible or edits held messages. Those interfaces name
// only queue's types, so a backend meets them without importing the
// console either.
type Inspector[T any] interface {
	// Now returns the time on the backend's clock: the overview's time,
	// and what ages are measured from.
	Now() time.Time
	// Subscriptions returns every subscription, wildcard ones included.
	Subscriptions(ctx context.Context) ([]SubscriptionInfo, error)
	// Subscription returns the subscription name of topic (a pattern for
	// a wildcard one), or an error matching queue.ErrSubscriptionNotFound.
	Subscription(ctx context.Context, topic, name string) (SubscriptionInfo, error)
	// DeadLetters returns the dead letters the backend holds.
	DeadLetters(ctx context.Context) ([]queue.DeadLetter[T], error)
	// Redrive puts back on its subscription every dead letter for which
	// match returns true, as a fresh message, and returns how many.
	Redrive(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error)
}

// SubscriptionInfo is one subscription as an Inspector describes it.
type SubscriptionInfo struct {
	Topic   string      // the topic, or the pattern of a wildcard subscription
	Name    string      // the subscription's name
	Stats   queue.Stats // what the backend knows of it now
	Options []Setting   // its settings, each named as its option
	// Note says what the backend does not know or cannot do for it
	// (such as counters it does not keep), shown beside its figures;
	// empty when there is nothing to say.
	Note string
}

// Setting is one option of a subscription, named as its With function.
type Setting struct {
	Option string `json:"option"`
	Value  string `json:"value"`
}
