package core

import (
	"container/heap"
	"slices"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// peekChunk is how many arena slots Peek reads under one hold of the lock:
// a look at a queue of a million messages holds it for short stretches,
// not for the whole scan.
const peekChunk = 16 * chunk

// Peek returns up to pq.Limit of the messages the queue holds, in Seq
// order, after settling what is due; it leases and changes nothing. It
// reads the arena in chunks, letting go of the lock between them, so a
// message that moves during the scan shows as it was when its chunk was
// read, and one that arrives during it may be missing. Its cost is one
// pass over the queue's slots, whatever the page.
func (q *Queue[T]) Peek(pq queue.PeekQuery) ([]queue.Held[T], error) {
	if err := pq.Validate(); err != nil {
		return nil, err
	}
	now, err := q.lock()
	if err != nil {
		return nil, err
	}
	best := heldHeap[T]{} // the Limit lowest Seqs seen, highest on top
	for slot := uint32(0); ; {
		end := min(q.slots, slot+peekChunk)
		for ; slot < end; slot++ {
			e := q.entryAt(slot)
			if e.msg == nil || e.state == stateFree || e.place <= pq.After {
				continue
			}
			st := heldState(e.state)
			if pq.State != 0 && st != pq.State || pq.ID != (uuid.UUID{}) && e.msg.ID != pq.ID || pq.Key != "" && e.msg.Key != pq.Key {
				continue
			}
			if len(best) == pq.Limit && e.place >= best[0].Seq {
				continue
			}
			h := q.heldLocked(e, st)
			if len(best) == pq.Limit {
				best[0] = h
				heap.Fix(&best, 0)
			} else {
				heap.Push(&best, h)
			}
		}
		if slot >= q.slots {
			break
		}
		if err := q.unlock(); err != nil {
			return nil, err
		}
		if now, err = q.lockUnsettled(now); err != nil {
			return nil, err
		}
	}
	if err := q.unlock(); err != nil {
		return nil, err
	}
	out := []queue.Held[T](best)
	slices.SortFunc(out, func(a, b queue.Held[T]) int { return compareSeq(a.Seq, b.Seq) })
	return out, nil
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func heldState(s entryState) queue.State {
	switch s {
	case stateReady, stateLimited: // a key-limited one only waits for its key's token
		return queue.StateVisible
	case stateDelayed:
		return queue.StateDelayed
	case stateLeased:
		return queue.StateInFlight
	default:
		return queue.StateHeldBack
	}
}

// heldLocked copies e out as Peek shows it.
func (q *Queue[T]) heldLocked(e *entry[T], st queue.State) queue.Held[T] {
	h := queue.Held[T]{
		Message:   *e.msg,
		Seq:       e.place,
		State:     st,
		Attempts:  int(e.attempt),
		LastError: q.lastErrLocked(e),
	}
	if e.is(hasHistory) {
		h.History = q.histOf(e)
	}
	if st != queue.StateVisible && e.at != noTick && e.at != farTick {
		h.At = q.timeOf(e.at)
	}
	return h
}

// heldHeap is a max-heap of held messages by Seq.
type heldHeap[T any] []queue.Held[T]

func (h heldHeap[T]) Len() int           { return len(h) }
func (h heldHeap[T]) Less(i, j int) bool { return h[i].Seq > h[j].Seq }
func (h heldHeap[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap[T]) Push(x any)        { *h = append(*h, x.(queue.Held[T])) }
func (h *heldHeap[T]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Pause stops deliveries: Polls wait (TryPoll finds nothing) until Resume,
// while the queue goes on taking messages, expiring leases and settling
// the ones in flight. Stats says Paused. Pausing a paused queue changes
// nothing. A queue with a Recorder records the change, and returns the
// Commit's error. After Close, ErrClosed.
func (q *Queue[T]) Pause() error {
	if _, err := q.lock(); err != nil {
		return err
	}
	q.setPausedLocked(true)
	return q.unlock()
}

// Resume lets a paused queue deliver again and wakes its waiting Polls.
// Resuming a running queue changes nothing. After Close, ErrClosed.
func (q *Queue[T]) Resume() error {
	if _, err := q.lock(); err != nil {
		return err
	}
	if q.paused {
		q.setPausedLocked(false)
		q.wakeLocked()
	}
	return q.unlock()
}

// setPausedLocked pauses or resumes the queue, recording a change.
func (q *Queue[T]) setPausedLocked(paused bool) {
	if q.paused == paused {
		return
	}
	q.paused = paused
	if q.rec != nil {
		q.dirty = true
		q.rec.Paused(paused)
	}
}
