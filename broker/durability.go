package broker

import (
	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// durability is the seam between the broker and its durable mode. The
// broker calls it wherever a broker from Open must record something; a
// broker from New has inMemory, which records nothing. The broker's own
// code never asks which one it has: the journal's side is *store, in
// open.go (Open and the store), recorder.go (what each call records),
// format.go (the records' encoding), snapshot.go (compaction), replay.go
// (reading the records back) and restore.go (the broker they build).
type durability[T any] interface {
	// enter and leave bracket a call that may append records outside a
	// queue's lock (publish, redrive, dead-letter routing), so that close
	// waits for its last records. enter is called under the broker's
	// lock, while it is open.
	enter()
	leave()

	createdTopic(name string)
	deletedTopic(name string)
	// newSubID gives a new subscription its journal id (under the
	// broker's lock).
	newSubID() uint32
	// subscribed records s as it is now: its ids, names and spec.
	subscribed(s *Subscription[T])
	// unsubscribed records that s is gone; s's queue is closed already,
	// so no record of it comes after.
	unsubscribed(s *Subscription[T])
	// newQueue makes s's queue, recording its changes if durable.
	newQueue(s *Subscription[T], qc queue.Config, onDead func(core.Letter[T])) (*core.Queue[T], error)

	// prepare readies a publish of m: it returns the encoded envelope
	// that every subscription's offer logs, or nil in memory. (It takes
	// no offer options: a slice passed through an interface escapes, and
	// would cost a publish an allocation.)
	prepare(m *queue.Message[T]) (*envBuf[T], error)
	// release returns prepare's envelope once every offer has logged it.
	release(env *envBuf[T])
	// newGroup starts the records of an operation that changes more than
	// one thing, to append as one (see group); nil in memory. flush
	// appends them and confirms their dedup IDs.
	newGroup() *group[T]
	flush(g *group[T])

	// landed and forget track a dead letter: it reached the store, or it
	// left it (dropped, routed to a topic, redriven elsewhere).
	landed(sub uint32, id uuid.UUID)
	forget(sub uint32, id uuid.UUID)

	// close waits for the calls under way, then closes the journal.
	close() error
}

// inMemory is the durability of a broker from New: nothing to record.
type inMemory[T any] struct{}

func (inMemory[T]) enter()                        {}
func (inMemory[T]) leave()                        {}
func (inMemory[T]) createdTopic(string)           {}
func (inMemory[T]) deletedTopic(string)           {}
func (inMemory[T]) newSubID() uint32              { return 0 }
func (inMemory[T]) subscribed(*Subscription[T])   {}
func (inMemory[T]) unsubscribed(*Subscription[T]) {}
func (inMemory[T]) release(*envBuf[T])            {}
func (inMemory[T]) newGroup() *group[T]           { return nil }
func (inMemory[T]) flush(*group[T])               {}
func (inMemory[T]) landed(uint32, uuid.UUID)      {}
func (inMemory[T]) forget(uint32, uuid.UUID)      {}
func (inMemory[T]) close() error                  { return nil }

func (inMemory[T]) newQueue(_ *Subscription[T], qc queue.Config, onDead func(core.Letter[T])) (*core.Queue[T], error) {
	return core.New(qc, onDead)
}

func (inMemory[T]) prepare(*queue.Message[T]) (*envBuf[T], error) { return nil, nil }

// durable returns the journal's side of a broker from Open; nil for a
// broker from New.
func (b *Broker[T]) durable() *store[T] {
	st, _ := b.dur.(*store[T])
	return st
}
