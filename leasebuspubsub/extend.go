package leasebuspubsub

import (
	"container/heap"
	"time"

	"github.com/leasebus/leasebus/backend"
)

// The extension loop keeps alive the leases of the messages gocloud holds:
// those waiting in its prefetch queue and those the program is working on,
// which the driver cannot tell apart. It runs only while there is a lease
// to extend, with one timer (on the broker's clock) for the earliest, and
// Close stops it and waits for it.

// scheduleLocked starts the extension loop if a lease is due and none
// runs, or wakes it if its timer is now too late.
func (s *subscription) scheduleLocked() {
	if s.due.Len() == 0 || s.closed {
		return
	}
	if !s.looping {
		s.looping = true
		s.loop.Add(1)
		go s.extendLoop()
		return
	}
	if next := s.due[0].extendAt; s.armed.IsZero() || next.Before(s.armed) {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// extendLoop extends the leases as they come due, until none is left to
// extend or Close.
func (s *subscription) extendLoop() {
	defer s.loop.Done()
	defer s.tell(time.Time{})
	for {
		s.mu.Lock()
		if s.closed || s.due.Len() == 0 {
			s.looping, s.armed = false, time.Time{}
			s.mu.Unlock()
			return
		}
		next := s.due[0].extendAt
		s.armed = next
		s.mu.Unlock()

		// Armed outside the lock, for the absolute time: a mock clock moved
		// meanwhile cannot make it late.
		t := backend.At(s.clk, next)
		s.tell(next)
		select {
		case <-t.C:
		case <-s.kick:
		case <-s.stop:
		}
		t.Stop()
		select {
		case <-s.stop:
			s.mu.Lock()
			s.looping, s.armed = false, time.Time{}
			s.mu.Unlock()
			return
		default:
		}
		s.extendDue()
	}
}

// tell tells a test's hook that the loop armed its timer for at (zero: the
// loop exits).
func (s *subscription) tell(at time.Time) {
	if s.testArmed != nil {
		s.testArmed(at)
	}
}

// extendDue extends every lease due now by the visibility timeout, up to
// its limit. A lease at its limit is no longer extended (it lapses at its
// deadline unless settled first); so is one whose Extend fails: it lapsed
// already, or its message was settled through the *broker.Subscription,
// or the subscription closed.
func (s *subscription) extendDue() {
	now := s.clk.Now()
	type job struct {
		r        *receipt
		deadline time.Time
	}
	var jobs []job
	s.mu.Lock()
	for s.due.Len() > 0 && !s.due[0].extendAt.After(now) {
		r := heap.Pop(&s.due).(*receipt)
		jobs = append(jobs, job{r, r.deadline})
	}
	s.mu.Unlock()
	for _, j := range jobs {
		r := j.r
		to := now.Add(r.length)
		if to.After(r.limit) {
			to = r.limit
		}
		if !to.After(j.deadline) || !to.After(now) {
			continue // at its limit
		}
		err := r.sub.Extend(r.id, to.Sub(now))
		s.mu.Lock()
		if err == nil && !r.settled {
			r.deadline, r.extendAt = to, to.Add(-r.margin)
			heap.Push(&s.due, r)
		}
		s.mu.Unlock()
	}
}

// receiptHeap orders the receipts being extended by extendAt, earliest
// first (a container/heap.Interface); each receipt knows its index, so a
// settled one leaves from wherever it is.
type receiptHeap []*receipt

func (h receiptHeap) Len() int           { return len(h) }
func (h receiptHeap) Less(i, j int) bool { return h[i].extendAt.Before(h[j].extendAt) }

func (h receiptHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

// Push and Pop are for container/heap; call heap.Push and heap.Pop.
func (h *receiptHeap) Push(x any) {
	r := x.(*receipt)
	r.index = len(*h)
	*h = append(*h, r)
}

func (h *receiptHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.index = -1
	return r
}
