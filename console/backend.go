package console

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// Backend is what a console shows and acts on when it is not a
// *broker.Broker (New serves one of those): another backend's
// subscriptions and dead letters, served through NewFor. It is
// backend.Inspector, declared there so that a backend offers one without
// importing this package; so are SubscriptionInfo and Setting.
//
// A Backend may do more, and the console offers what it does: a backend
// that also implements Peeker shows the messages a subscription holds;
// Pauser pauses and resumes delivery; Purger purges; Discarder discards
// dead letters; Editor redrives a dead letter with an edited payload;
// MessageActor (with Peeker) deletes, makes visible or edits held messages.
// The pages leave out what the backend cannot do and say so, and its
// actions answer 501 Not Implemented.
type Backend[T any] = backend.Inspector[T]

// SubscriptionInfo is one subscription as a Backend describes it
// (backend.SubscriptionInfo).
type SubscriptionInfo = backend.SubscriptionInfo

// Setting is one option of a subscription, named as its With function
// (backend.Setting).
type Setting = backend.Setting

// Peeker is a Backend that shows what a subscription holds without
// leasing or changing anything (see broker.Subscription.Peek).
type Peeker[T any] interface {
	Peek(ctx context.Context, topic, name string, q queue.PeekQuery) ([]queue.Held[T], error)
}

// Pauser is a Backend that pauses and resumes a subscription's delivery
// (see broker.Subscription.Pause).
type Pauser interface {
	Pause(ctx context.Context, topic, name string) error
	Resume(ctx context.Context, topic, name string) error
}

// Purger is a Backend that drops every message a subscription holds and
// says how many.
type Purger interface {
	Purge(ctx context.Context, topic, name string) (int, error)
}

// Discarder is a Backend that drops the dead letters for which match
// returns true, and says how many.
type Discarder[T any] interface {
	DiscardDeadLetters(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error)
}

// Editor is a Backend that redrives dead letters with a new payload: fix
// returns the payload for a letter, and whether to redrive it.
type Editor[T any] interface {
	RedriveWith(ctx context.Context, fix func(queue.DeadLetter[T]) (payload T, ok bool)) (int, error)
}

// can is what a console's backend does beyond the Backend interface.
type can struct {
	Peek, Pause, Purge, Discard, Edit, Act bool
}

func capabilities[T any](be Backend[T]) can {
	_, peek := be.(Peeker[T])
	_, pause := be.(Pauser)
	_, purge := be.(Purger)
	_, discard := be.(Discarder[T])
	_, edit := be.(Editor[T])
	_, act := be.(MessageActor[T])
	return can{Peek: peek, Pause: pause, Purge: purge, Discard: discard, Edit: edit, Act: act && peek}
}

// unsupported is the error of an action the backend cannot do.
func unsupported(what string) error {
	return &errStatus{http.StatusNotImplemented, fmt.Errorf("this backend cannot %s: %w", what, errors.ErrUnsupported)}
}

// brokerBackend is a *broker.Broker as a Backend, with every capability.
type brokerBackend[T any] struct{ b *broker.Broker[T] }

func (bb brokerBackend[T]) Now() time.Time { return bb.b.Clock().Now() }

func (bb brokerBackend[T]) Subscriptions(context.Context) ([]SubscriptionInfo, error) {
	subs := bb.b.AllSubscriptions()
	out := make([]SubscriptionInfo, 0, len(subs))
	for _, s := range subs {
		out = append(out, brokerInfo(s))
	}
	return out, nil
}

func (bb brokerBackend[T]) Subscription(_ context.Context, topic, name string) (SubscriptionInfo, error) {
	s, err := bb.b.Subscription(topic, name) // patterns too; not found: 404, a bad name: 400
	if err != nil {
		return SubscriptionInfo{}, err
	}
	return brokerInfo(s), nil
}

func brokerInfo[T any](s *broker.Subscription[T]) SubscriptionInfo {
	return SubscriptionInfo{Topic: s.Topic(), Name: s.Name(), Stats: s.Stats(), Options: settings(s.Config())}
}

func (bb brokerBackend[T]) DeadLetters(context.Context) ([]queue.DeadLetter[T], error) {
	return bb.b.DeadLetters(), nil
}

// letterSeq reads the broker's dead letters without copying its store.
func (bb brokerBackend[T]) letterSeq() iter.Seq[queue.DeadLetter[T]] { return bb.b.DeadLettersSeq() }

// letterScanner is a backend whose dead letters can be read, oldest
// first, without copying them all (the broker's can).
type letterScanner[T any] interface {
	letterSeq() iter.Seq[queue.DeadLetter[T]]
}

func (bb brokerBackend[T]) Redrive(_ context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	return bb.b.Redrive(match)
}

func (bb brokerBackend[T]) Peek(_ context.Context, topic, name string, q queue.PeekQuery) ([]queue.Held[T], error) {
	s, err := bb.b.Subscription(topic, name)
	if err != nil {
		return nil, err
	}
	return s.Peek(q)
}

func (bb brokerBackend[T]) Pause(_ context.Context, topic, name string) error {
	s, err := bb.b.Subscription(topic, name)
	if err != nil {
		return err
	}
	return s.Pause()
}

func (bb brokerBackend[T]) Resume(_ context.Context, topic, name string) error {
	s, err := bb.b.Subscription(topic, name)
	if err != nil {
		return err
	}
	return s.Resume()
}

func (bb brokerBackend[T]) Purge(_ context.Context, topic, name string) (int, error) {
	s, err := bb.b.Subscription(topic, name)
	if err != nil {
		return 0, err
	}
	return s.Purge()
}

func (bb brokerBackend[T]) DiscardDeadLetters(_ context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	return bb.b.DiscardDeadLetters(match)
}

func (bb brokerBackend[T]) RedriveWith(_ context.Context, fix func(queue.DeadLetter[T]) (T, bool)) (int, error) {
	return bb.b.RedriveWith(fix)
}

// storeCounts is the dead-letter store's counters, where the backend
// keeps them (the broker does).
func (bb brokerBackend[T]) storeCounts() (dropped, discarded uint64) {
	st := bb.b.DeadLetterStats()
	return st.Dropped, st.Discarded
}

// storeCounter is a backend that keeps the dead-letter store's counters.
type storeCounter interface {
	storeCounts() (dropped, discarded uint64)
}
