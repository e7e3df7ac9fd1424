// Package leaseheap is the in-flight table's heap: leases by deadline,
// each knowing its place, so a settle is O(log n) and allocates nothing.
package leaseheap

import (
	"time"

	"github.com/leasebus/leasebus/internal/minheap"
	"github.com/leasebus/leasebus/lease"
)

// Lease is one delivery's claim on a message: who holds it (ID), which
// attempt it is, and when it expires.
type Lease struct {
	ID       lease.ID
	Attempt  int       // 1 on the first delivery
	Deadline time.Time // the lease expires when now >= Deadline
}

// Expired reports whether the lease has expired at now: a lease is live
// strictly before its deadline.
func (l Lease) Expired(now time.Time) bool { return !now.Before(l.Deadline) }

// Item is one lease in a Heap, with a value of the caller's. A caller that
// indexes its leases itself embeds an Item in its own record and passes
// its address to the Heap, which then needs no map and allocates nothing.
// An Item may be in one Heap at a time.
type Item[V any] struct {
	Lease Lease
	Value V
	stamp uint64 // insertion order: equal deadlines expire first in, first out
	index int    // position in the heap
}

// Heap is a min-heap of leases by deadline (then insertion order). Every
// operation is O(log n) or better; Peek is O(1). The zero Heap is empty and
// ready to use. A Heap is not safe for concurrent use.
type Heap[V any] struct {
	h     minheap.Heap[*Item[V]]
	stamp uint64
}

func (h *Heap[V]) init() {
	if h.h.Less == nil {
		h.h.Less = itemLess[V]
		h.h.SetIndex = func(it *Item[V], i int) { it.index = i }
	}
}

func itemLess[V any](a, b *Item[V]) bool {
	if !a.Lease.Deadline.Equal(b.Lease.Deadline) {
		return a.Lease.Deadline.Before(b.Lease.Deadline)
	}
	return a.stamp < b.stamp
}

// Len returns the number of leases in the heap.
func (h *Heap[V]) Len() int { return h.h.Len() }

// Push adds it, which must not be in a heap.
func (h *Heap[V]) Push(it *Item[V]) {
	h.init()
	h.stamp++
	it.stamp = h.stamp
	h.h.Push(it)
}

// Contains reports whether it is in h.
func (h *Heap[V]) Contains(it *Item[V]) bool {
	return it.index >= 0 && it.index < len(h.h.S) && h.h.S[it.index] == it
}

// Remove takes it out of h and reports whether it was there.
func (h *Heap[V]) Remove(it *Item[V]) bool {
	if !h.Contains(it) {
		return false
	}
	h.h.Remove(it.index)
	return true
}

// SetDeadline moves the deadline of it, which must be in h.
func (h *Heap[V]) SetDeadline(it *Item[V], deadline time.Time) {
	it.Lease.Deadline = deadline
	h.h.Fix(it.index)
}

// Peek returns the lease with the earliest deadline, if any.
func (h *Heap[V]) Peek() (*Item[V], bool) {
	if len(h.h.S) == 0 {
		return nil, false
	}
	return h.h.S[0], true
}

// PopExpired removes and returns the lease with the earliest deadline if
// it has expired at now (now >= Deadline). Call it in a loop to collect
// every expired lease, earliest first.
func (h *Heap[V]) PopExpired(now time.Time) (*Item[V], bool) {
	if len(h.h.S) == 0 || !h.h.S[0].Lease.Expired(now) {
		return nil, false
	}
	return h.h.Remove(0), true
}

// all returns the items in heap order (for the Table and tests).
func (h *Heap[V]) all() []*Item[V] { return h.h.S }

// Clear removes every lease.
func (h *Heap[V]) Clear() {
	h.init()
	h.h.Clear()
}
