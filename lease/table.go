package lease

import (
	"iter"
	"time"
)

// Table is the in-flight table: leases by ID, plus a min-heap by deadline
// so the earliest expiry is found in O(1) and removed in O(log n). Each
// lease carries a value of the caller's (package queue keeps its message
// entry there).
//
// The zero Table is empty and ready to use. A Table is not safe for
// concurrent use. Items are recycled, so a steady stream of Add and Remove
// allocates nothing once the table has grown.
type Table[V any] struct {
	byID  map[ID]*item[V]
	heap  []*item[V] // min-heap by (deadline, stamp)
	free  []*item[V] // recycled items
	stamp uint64     // insertion counter: equal deadlines expire in insertion order
}

type item[V any] struct {
	lease Lease
	value V
	stamp uint64
	index int // position in heap
}

// Len returns the number of leases in the table.
func (t *Table[V]) Len() int { return len(t.heap) }

// Add puts a lease in the table. It reports false, and changes nothing, if
// a lease with the same ID is already there.
func (t *Table[V]) Add(l Lease, v V) bool {
	if t.byID == nil {
		t.byID = make(map[ID]*item[V])
	}
	if _, dup := t.byID[l.ID]; dup {
		return false
	}
	var it *item[V]
	if n := len(t.free); n > 0 {
		it = t.free[n-1]
		t.free[n-1] = nil
		t.free = t.free[:n-1]
	} else {
		it = new(item[V])
	}
	t.stamp++
	*it = item[V]{lease: l, value: v, stamp: t.stamp, index: len(t.heap)}
	t.byID[l.ID] = it
	t.heap = append(t.heap, it)
	t.up(it.index)
	return true
}

// Get returns the lease with the given ID and its value.
func (t *Table[V]) Get(id ID) (Lease, V, bool) {
	if it, ok := t.byID[id]; ok {
		return it.lease, it.value, true
	}
	var zero V
	return Lease{}, zero, false
}

// Remove takes the lease with the given ID out of the table and returns it.
func (t *Table[V]) Remove(id ID) (Lease, V, bool) {
	it, ok := t.byID[id]
	if !ok {
		var zero V
		return Lease{}, zero, false
	}
	return t.removeAt(it.index)
}

// SetDeadline moves the deadline of the lease with the given ID and
// reports whether it was found.
func (t *Table[V]) SetDeadline(id ID, deadline time.Time) bool {
	it, ok := t.byID[id]
	if !ok {
		return false
	}
	it.lease.Deadline = deadline
	t.fix(it.index)
	return true
}

// Next returns the lease with the earliest deadline, if any.
func (t *Table[V]) Next() (Lease, bool) {
	if len(t.heap) == 0 {
		return Lease{}, false
	}
	return t.heap[0].lease, true
}

// PopExpired removes and returns the lease with the earliest deadline if
// it has expired at now (now >= Deadline). Call it in a loop to collect
// every expired lease, earliest first.
func (t *Table[V]) PopExpired(now time.Time) (Lease, V, bool) {
	if len(t.heap) == 0 || !t.heap[0].lease.Expired(now) {
		var zero V
		return Lease{}, zero, false
	}
	return t.removeAt(0)
}

// All yields every lease in the table with its value, in no particular
// order. The table must not be changed during the iteration.
func (t *Table[V]) All() iter.Seq2[Lease, V] {
	return func(yield func(Lease, V) bool) {
		for _, it := range t.heap {
			if !yield(it.lease, it.value) {
				return
			}
		}
	}
}

// Clear removes every lease.
func (t *Table[V]) Clear() {
	for _, it := range t.heap {
		*it = item[V]{}
	}
	clear(t.heap)
	t.heap = t.heap[:0]
	clear(t.byID)
	t.free = nil
}

func (t *Table[V]) removeAt(i int) (Lease, V, bool) {
	it := t.heap[i]
	last := len(t.heap) - 1
	if i != last {
		t.swap(i, last)
	}
	t.heap[last] = nil
	t.heap = t.heap[:last]
	if i != last {
		t.fix(i)
	}
	delete(t.byID, it.lease.ID)
	l, v := it.lease, it.value
	*it = item[V]{}
	t.free = append(t.free, it)
	return l, v, true
}

func (t *Table[V]) less(i, j int) bool {
	a, b := t.heap[i], t.heap[j]
	if !a.lease.Deadline.Equal(b.lease.Deadline) {
		return a.lease.Deadline.Before(b.lease.Deadline)
	}
	return a.stamp < b.stamp
}

func (t *Table[V]) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.heap[i].index = i
	t.heap[j].index = j
}

func (t *Table[V]) fix(i int) {
	if !t.down(i) {
		t.up(i)
	}
}

func (t *Table[V]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !t.less(j, i) {
			break
		}
		t.swap(i, j)
		j = i
	}
}

func (t *Table[V]) down(i0 int) bool {
	i, n := i0, len(t.heap)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && t.less(r, j) {
			j = r
		}
		if !t.less(j, i) {
			break
		}
		t.swap(i, j)
		i = j
	}
	return i > i0
}
