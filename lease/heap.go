package lease

import "time"

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
	s     []*Item[V]
	stamp uint64
}

// Len returns the number of leases in the heap.
func (h *Heap[V]) Len() int { return len(h.s) }

// Push adds it, which must not be in a heap.
func (h *Heap[V]) Push(it *Item[V]) {
	h.stamp++
	it.stamp = h.stamp
	it.index = len(h.s)
	h.s = append(h.s, it)
	h.up(it.index)
}

// Contains reports whether it is in h.
func (h *Heap[V]) Contains(it *Item[V]) bool {
	return it.index >= 0 && it.index < len(h.s) && h.s[it.index] == it
}

// Remove takes it out of h and reports whether it was there.
func (h *Heap[V]) Remove(it *Item[V]) bool {
	if !h.Contains(it) {
		return false
	}
	h.removeAt(it.index)
	return true
}

// SetDeadline moves the deadline of it, which must be in h.
func (h *Heap[V]) SetDeadline(it *Item[V], deadline time.Time) {
	it.Lease.Deadline = deadline
	if !h.down(it.index) {
		h.up(it.index)
	}
}

// Peek returns the lease with the earliest deadline, if any.
func (h *Heap[V]) Peek() (*Item[V], bool) {
	if len(h.s) == 0 {
		return nil, false
	}
	return h.s[0], true
}

// PopExpired removes and returns the lease with the earliest deadline if
// it has expired at now (now >= Deadline). Call it in a loop to collect
// every expired lease, earliest first.
func (h *Heap[V]) PopExpired(now time.Time) (*Item[V], bool) {
	if len(h.s) == 0 || !h.s[0].Lease.Expired(now) {
		return nil, false
	}
	return h.removeAt(0), true
}

// Clear removes every lease.
func (h *Heap[V]) Clear() {
	for _, it := range h.s {
		it.index = -1
	}
	clear(h.s)
	h.s = h.s[:0]
}

func (h *Heap[V]) removeAt(i int) *Item[V] {
	it := h.s[i]
	last := len(h.s) - 1
	if i != last {
		h.swap(i, last)
	}
	h.s[last] = nil
	h.s = h.s[:last]
	if i != last && !h.down(i) {
		h.up(i)
	}
	it.index = -1
	return it
}

func (h *Heap[V]) less(i, j int) bool {
	a, b := h.s[i], h.s[j]
	if !a.Lease.Deadline.Equal(b.Lease.Deadline) {
		return a.Lease.Deadline.Before(b.Lease.Deadline)
	}
	return a.stamp < b.stamp
}

func (h *Heap[V]) swap(i, j int) {
	h.s[i], h.s[j] = h.s[j], h.s[i]
	h.s[i].index = i
	h.s[j].index = j
}

func (h *Heap[V]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *Heap[V]) down(i0 int) bool {
	i, n := i0, len(h.s)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.less(r, j) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
