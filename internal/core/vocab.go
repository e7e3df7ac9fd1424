package core

import (
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// numPriorities is how many priorities there are: one lane each.
const numPriorities = int(queue.PriorityCritical-queue.PriorityLow) + 1

// Letter is a dead letter with what a redrive needs to put it back where
// it was: its place (publish sequence) in the queue that dead-lettered it,
// and its time to live, counted again from the redrive. The broker keeps
// Letters in its store and shows users their DeadLetter.
type Letter[T any] struct {
	queue.DeadLetter[T]
	Place  uint64
	TTL    time.Duration
	origin uint64 // the scope of the queue that dead-lettered it
}

// invalid is backend.Invalid, as this package spells it.
var invalid = backend.Invalid

// errNilQueue is what the calls of a nil Queue return: the queue of a
// zero broker.Subscription, which only Broker.Subscribe makes.
var errNilQueue = backend.Invalid("zero Subscription: make one with Broker.Subscribe or Broker.Subscription")
