package leaseheap

import (
	"iter"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// Table is the in-flight table: leases by lease.ID, plus a Heap by deadline so
// the earliest expiry is found in O(1) and removed in O(log n). Each lease
// carries a value of the caller's. (Package queue indexes its leases
// itself and uses a Heap directly.)
//
// The zero Table is empty and ready to use. A Table is not safe for
// concurrent use. Items are recycled, so a steady stream of Add and Remove
// allocates nothing once the table has grown.
type Table[V any] struct {
	byID map[lease.ID]*Item[V]
	heap Heap[V]
	free []*Item[V] // recycled items
}

// Len returns the number of leases in the table.
func (t *Table[V]) Len() int { return t.heap.Len() }

// Add puts a lease in the table. It reports false, and changes nothing, if
// a lease with the same lease.ID is already there.
func (t *Table[V]) Add(l Lease, v V) bool {
	if t.byID == nil {
		t.byID = make(map[lease.ID]*Item[V])
	}
	if _, dup := t.byID[l.ID]; dup {
		return false
	}
	var it *Item[V]
	if n := len(t.free); n > 0 {
		it = t.free[n-1]
		t.free[n-1] = nil
		t.free = t.free[:n-1]
	} else {
		it = new(Item[V])
	}
	*it = Item[V]{Lease: l, Value: v}
	t.byID[l.ID] = it
	t.heap.Push(it)
	return true
}

// Get returns the lease with the given lease.ID and its value.
func (t *Table[V]) Get(id lease.ID) (Lease, V, bool) {
	if it, ok := t.byID[id]; ok {
		return it.Lease, it.Value, true
	}
	var zero V
	return Lease{}, zero, false
}

// Remove takes the lease with the given lease.ID out of the table and returns it.
func (t *Table[V]) Remove(id lease.ID) (Lease, V, bool) {
	it, ok := t.byID[id]
	if !ok {
		var zero V
		return Lease{}, zero, false
	}
	t.heap.Remove(it)
	return t.forget(it)
}

// SetDeadline moves the deadline of the lease with the given lease.ID and
// reports whether it was found.
func (t *Table[V]) SetDeadline(id lease.ID, deadline time.Time) bool {
	it, ok := t.byID[id]
	if ok {
		t.heap.SetDeadline(it, deadline)
	}
	return ok
}

// Next returns the lease with the earliest deadline, if any.
func (t *Table[V]) Next() (Lease, bool) {
	if it, ok := t.heap.Peek(); ok {
		return it.Lease, true
	}
	return Lease{}, false
}

// PopExpired removes and returns the lease with the earliest deadline if
// it has expired at now (now >= Deadline). Call it in a loop to collect
// every expired lease, earliest first.
func (t *Table[V]) PopExpired(now time.Time) (Lease, V, bool) {
	it, ok := t.heap.PopExpired(now)
	if !ok {
		var zero V
		return Lease{}, zero, false
	}
	return t.forget(it)
}

// All yields every lease in the table with its value, in no particular
// order. The table must not be changed during the iteration.
func (t *Table[V]) All() iter.Seq2[Lease, V] {
	return func(yield func(Lease, V) bool) {
		for _, it := range t.heap.all() {
			if !yield(it.Lease, it.Value) {
				return
			}
		}
	}
}

// Clear removes every lease.
func (t *Table[V]) Clear() {
	t.heap.Clear()
	clear(t.byID)
	t.free = nil
}

// forget drops it from the index and recycles it.
func (t *Table[V]) forget(it *Item[V]) (Lease, V, bool) {
	delete(t.byID, it.Lease.ID)
	l, v := it.Lease, it.Value
	*it = Item[V]{}
	t.free = append(t.free, it)
	return l, v, true
}
