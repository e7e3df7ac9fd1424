// Package leasefloor is the simplest real lease queue, the floor that
// leasebus is measured against: a mutex, a slice FIFO, a container/heap of
// leases by deadline, batch poll, and a channel closed to wake waiting
// pollers. No priorities, attempts, dead letters or bounds.
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
type Delivery struct {
	ID      uint64
	Payload []byte
}

type lease struct {
	id       uint64
	deadline time.Time
	payload  []byte
	index    int // in the heap
}

type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h leaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *leaseHeap) Push(x any)        { l := x.(*lease); l.index = len(*h); *h = append(*h, l) }
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return l
}

// Queue is a FIFO of payloads with leases. Safe for concurrent use.
type Queue struct {
	now func() time.Time
	vis time.Duration

	mu     sync.Mutex
	fifo   [][]byte // fifo[head:] are visible
	head   int
	leases leaseHeap
	byID   map[uint64]*lease
	free   []*lease
	nextID uint64
	notify chan struct{} // closed on publish or expiry when pollers wait
}

// New returns a queue whose leases last vis, reading the time from now.
func New(now func() time.Time, vis time.Duration) *Queue {
	return &Queue{now: now, vis: vis, byID: make(map[uint64]*lease)}
}

// Publish appends payload and wakes waiting pollers.
func (q *Queue) Publish(payload []byte) {
	q.mu.Lock()
	q.fifo = append(q.fifo, payload)
	q.wakeLocked()
	q.mu.Unlock()
}

func (q *Queue) wakeLocked() {
	if q.notify != nil {
		close(q.notify)
		q.notify = nil
	}
}

// Poll leases up to len(dst) messages into dst, blocking until at least one
// is visible or ctx ends; it returns how many.
func (q *Queue) Poll(ctx context.Context, dst []Delivery) (int, error) {
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
func (q *Queue) TryPoll(dst []Delivery) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	q.expireLocked(now)
	return q.leaseLocked(now, dst)
}

// expireLocked puts every lease due at now back at the tail of the FIFO.
func (q *Queue) expireLocked(now time.Time) {
	for len(q.leases) > 0 && !q.leases[0].deadline.After(now) {
		l := heap.Pop(&q.leases).(*lease)
		delete(q.byID, l.id)
		q.fifo = append(q.fifo, l.payload)
		q.recycle(l)
	}
}

func (q *Queue) leaseLocked(now time.Time, dst []Delivery) int {
	n := min(len(dst), len(q.fifo)-q.head)
	deadline := now.Add(q.vis)
	for i := range n {
		var l *lease
		if k := len(q.free); k > 0 {
			l, q.free = q.free[k-1], q.free[:k-1]
		} else {
			l = new(lease)
		}
		q.nextID++
		*l = lease{id: q.nextID, deadline: deadline, payload: q.fifo[q.head]}
		q.fifo[q.head] = nil
		q.head++
		heap.Push(&q.leases, l)
		q.byID[l.id] = l
		dst[i] = Delivery{ID: l.id, Payload: l.payload}
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
func (q *Queue) Ack(id uint64) error {
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

func (q *Queue) recycle(l *lease) {
	*l = lease{}
	if len(q.free) < 1024 {
		q.free = append(q.free, l)
	}
}

// Len returns the visible and the leased messages.
func (q *Queue) Len() (visible, leased int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.fifo) - q.head, len(q.leases)
}
