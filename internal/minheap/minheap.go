// Package minheap is the binary min-heap behind leasebus's lease and queue
// heaps: it tells every element its position as it moves, so any element
// can be removed or fixed in O(log n).
package minheap

// Heap is a min-heap of E ordered by Less. SetIndex is told each element's
// new position whenever it moves; Remove tells it -1. The zero Heap is not
// usable: set Less and SetIndex first.
type Heap[E any] struct {
	S        []E
	Less     func(a, b E) bool
	SetIndex func(e E, i int)
}

// Len returns the number of elements.
func (h *Heap[E]) Len() int { return len(h.S) }

// Push adds e.
func (h *Heap[E]) Push(e E) {
	h.S = append(h.S, e)
	h.SetIndex(e, len(h.S)-1)
	h.up(len(h.S) - 1)
}

// Remove takes out and returns the element at position i.
func (h *Heap[E]) Remove(i int) E {
	e := h.S[i]
	last := len(h.S) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero E
	h.S[last] = zero
	h.S = h.S[:last]
	if i != last {
		h.Fix(i)
	}
	h.SetIndex(e, -1)
	return e
}

// Fix restores the order after the element at position i changed.
func (h *Heap[E]) Fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// Clear removes every element, telling each -1.
func (h *Heap[E]) Clear() {
	for _, e := range h.S {
		h.SetIndex(e, -1)
	}
	clear(h.S)
	h.S = h.S[:0]
}

func (h *Heap[E]) swap(i, j int) {
	h.S[i], h.S[j] = h.S[j], h.S[i]
	h.SetIndex(h.S[i], i)
	h.SetIndex(h.S[j], j)
}

func (h *Heap[E]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.Less(h.S[j], h.S[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *Heap[E]) down(i0 int) bool {
	i, n := i0, len(h.S)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.Less(h.S[r], h.S[j]) {
			j = r
		}
		if !h.Less(h.S[j], h.S[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
