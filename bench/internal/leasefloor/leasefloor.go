// Package leasefloor is the simplest real lease queue, the floor that
// leasebus is measured against: a mutex, a slice FIFO, a container/heap of
// leases by deadline, batch poll, and a channel closed to wake waiting
// pollers. No priorities, attempts, dead letters or bounds. It queues
// values of any type E: the floor itself queues payloads ([]byte), the
// floor with leasebus's contract queues envelopes (see the suite).
package leasefloor

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNotFound is Ack's answer for a lease that is not out (acked, expired).
var ErrNotFound = errors.New("leasefloor: lease not found")

// Delivery is one leased message.
type Delivery[E any] struct {
	ID      uint64
	Payload E
}

type lease[E any] struct {
	id       uint64
	deadline time.Time
	payload  E
	index    int // in the heap
}

type leaseHeap[E any] []*lease[E]

func (h leaseHeap[E]) Len() int           { return len(h) }
func (h leaseHeap[E]) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h leaseHeap[E]) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *leaseHeap[E]) Push(x any)        { l := x.(*lease[E]); l.index = len(*h); *h = append(*h, l) }
func (h *leaseHeap[E]) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return l
}

// Queue is a FIFO of values with leases. Safe for concurrent use.
type Queue[E any] struct {
	now func() time.Time
	vis time.Duration

	mu     sync.Mutex
	fifo   []E // fifo[head:] are visible
	head   int
	leases leaseHeap[E]
	byID   map[uint64]*lease[E]
	free   []*lease[E]
	nextID uint64
	notify chan struct{} // closed on publish or expiry when pollers wait
}

// New returns a queue whose leases last vis, reading the time from now.
func New[E any](now func() time.Time, vis time.Duration) *Queue[E] {
	return &Queue[E]{now: now, vis: vis, byID: make(map[uint64]*lease[E])}
}

// Publish appends payload and wakes waiting pollers.
func (q *Queue[E]) Publish(payload E) {
	q.mu.Lock()
	q.fifo = append(q.fifo, payload)
	q.wakeLocked()
	q.mu.Unlock()
}

func (q *Queue[E]) wakeLocked() {
	if q.notify != nil {
		close(q.notify)
		q.notify = nil
	}
}

// Poll leases up to len(dst) messages into dst, blocking until at least one
// is visible or ctx ends; it returns how many.
func (q *Queue[E]) Poll(ctx context.Context, dst []Delivery[E]) (int, error) {
	for {
		q.mu.Lock()
		now := q.now()
		q.expireLocked(now)
		if n := q.leaseLocked(now, dst); n > 0 {
			q.mu.Unlock()
			return n, nil
		}
		if q.notify == nil {
			q.notify = make(chan struct{})
		}
		wake := q.notify
		var timer *time.Timer // wakes at the next expiry (on the real clock)
		var fire <-chan time.Time
		if len(q.leases) > 0 {
			timer = time.NewTimer(q.leases[0].deadline.Sub(now))
			fire = timer.C
		}
		q.mu.Unlock()
		select {
		case <-wake:
		case <-fire:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// TryPoll is Poll without waiting.
func (q *Queue[E]) TryPoll(dst []Delivery[E]) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	q.expireLocked(now)
	return q.leaseLocked(now, dst)
}

// expireLocked puts every lease due at now back at the tail of the FIFO.
func (q *Queue[E]) expireLocked(now time.Time) {
	for len(q.leases) > 0 && !q.leases[0].deadline.After(now) {
		l := heap.Pop(&q.leases).(*lease[E])
		delete(q.byID, l.id)
		q.fifo = append(q.fifo, l.payload)
		q.recycle(l)
	}
}

func (q *Queue[E]) leaseLocked(now time.Time, dst []Delivery[E]) int {
	n := min(len(dst), len(q.fifo)-q.head)
	deadline := now.Add(q.vis)
	for i := range n {
		var l *lease[E]
		if k := len(q.free); k > 0 {
			l, q.free = q.free[k-1], q.free[:k-1]
		} else {
			l = new(lease[E])
		}
		q.nextID++
		*l = lease[E]{id: q.nextID, deadline: deadline, payload: q.fifo[q.head]}
		var zero E
		q.fifo[q.head] = zero
		q.head++
		heap.Push(&q.leases, l)
		q.byID[l.id] = l
		dst[i] = Delivery[E]{ID: l.id, Payload: l.payload}
	}
	if q.head > 1024 && q.head*2 > len(q.fifo) { // compact the consumed front
		n := copy(q.fifo, q.fifo[q.head:])
		clear(q.fifo[n:])
		q.fifo = q.fifo[:n]
		q.head = 0
	}
	return n
}

// Ack deletes a leased message.
func (q *Queue[E]) Ack(id uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	l, ok := q.byID[id]
	if !ok {
		return ErrNotFound
	}
	heap.Remove(&q.leases, l.index)
	delete(q.byID, id)
	q.recycle(l)
	return nil
}

func (q *Queue[E]) recycle(l *lease[E]) {
	*l = lease[E]{}
	if len(q.free) < 1024 {
		q.free = append(q.free, l)
	}
}

// Len returns the visible and the leased messages.
func (q *Queue[E]) Len() (visible, leased int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.fifo) - q.head, len(q.leases)
}
