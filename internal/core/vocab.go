package core

import (
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// The words of package queue, as this package's code spells them.
type (
	Message[T any]  = queue.Message[T]
	Delivery[T any] = queue.Delivery[T]
	Stats           = queue.Stats
	Priority        = queue.Priority
	Reason          = queue.Reason
	RetryPolicy     = queue.RetryPolicy
	OverflowPolicy  = queue.OverflowPolicy
	FullError       = queue.FullError
	Config          = queue.Config
)

const (
	PriorityLow      = queue.PriorityLow
	PriorityCritical = queue.PriorityCritical
	numPriorities    = int(PriorityCritical-PriorityLow) + 1

	ReasonMaxAttempts = queue.ReasonMaxAttempts
	ReasonOverflow    = queue.ReasonOverflow
	ReasonExpired     = queue.ReasonExpired
	ReasonRejected    = queue.ReasonRejected

	OverflowDeadLetter = queue.OverflowDeadLetter
	OverflowReject     = queue.OverflowReject
	OverflowBlock      = queue.OverflowBlock
	OverflowDropOldest = queue.OverflowDropOldest

	UnlimitedAttempts        = queue.UnlimitedAttempts
	DefaultVisibilityTimeout = queue.DefaultVisibilityTimeout
	DefaultMaxAttempts       = queue.DefaultMaxAttempts
	DefaultMaxQueue          = queue.DefaultMaxQueue
)

// The errors of package queue (the same values: errors.Is matches them).
var (
	ErrLeaseExpired    = queue.ErrLeaseExpired
	ErrLeaseNotFound   = queue.ErrLeaseNotFound
	ErrClosed          = queue.ErrClosed
	ErrQueueFull       = queue.ErrQueueFull
	ErrInvalidArgument = queue.ErrInvalidArgument
)

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
