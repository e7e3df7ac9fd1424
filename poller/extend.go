package poller

import (
	"container/heap"
	"context"
	"log/slog"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// item is one lease the poller holds, from Poll until it is settled or
// released. Items are reused (Poller.items): every field is written under
// run.mu when an item is taken (take), and gen tells a use from the next,
// so that a goroutine that kept a pointer from an earlier use (extendLoop)
// reads it under run.mu and checks gen before it acts. The goroutine an
// item was handed to (a worker, or the poll loop's release) owns it until
// it recycles it, and reads d without the lock meanwhile.
type item[T any] struct {
	d      queue.Delivery[T]
	length time.Duration // the lease's original length: each extension's
	margin time.Duration // how long before the deadline to extend
	limit  time.Time     // no extension past it
	held   bool          // leased for the whole allowance (see the package doc): never extended; extendAt is its deadline
	gen    uint64        // which use of the item

	tracked    bool      // held: not yet settled or released
	deadline   time.Time // the lease's deadline as last set
	extendAt   time.Time // when to extend next; zero: never again
	index      int       // in run.due; -1 when not there
	started    time.Time // when its handler started (a pool WithRegistry)
	batch      int       // the deliveries of the handler call it is in (1: a Handler's); 0 until the call starts
	extensions int       // leases extended

	cancel   context.CancelCauseFunc // cancels its handler's context (a pool WithRegistry)
	cancelAs CancelAs                // what Cancel chose; zero: not cancelled
	cancelBy error                   // Cancel's cause, matching ErrCancelled
}

// take returns the item of d, received at now, with its extension
// schedule, tracked: in the due heap if it is to be extended.
func (r *run[T]) take(d queue.Delivery[T], now time.Time, held bool) *item[T] {
	it, _ := r.p.items.Get().(*item[T])
	if it == nil {
		it = new(item[T])
	}
	fresh := item[T]{d: d, deadline: d.Deadline, index: -1, tracked: true}
	cfg := &r.p.cfg
	length := d.Deadline.Sub(now)
	switch {
	case cfg.maxExtension == NoExtension || length <= 0:
		// no extension: off, or a deadline unknown or past
	case held:
		// Held to the limit by the Poll: the one thing left to do is to
		// say so when the limit comes.
		fresh.held, fresh.extendAt = true, d.Deadline
	default:
		margin := cfg.margin
		if margin == 0 {
			margin = max(length/5, min(length/2, time.Second))
		}
		if margin >= length {
			margin = length / 2
		}
		fresh.length, fresh.margin, fresh.limit = length, margin, now.Add(cfg.maxExtension)
		fresh.extendAt = d.Deadline.Add(-margin)
	}
	r.p.inFlight.Add(1)
	r.mu.Lock()
	fresh.gen = it.gen + 1
	*it = fresh
	r.scheduleLocked(it)
	r.mu.Unlock()
	return it
}

// recycle puts it back for a later take, once its last use is over.
func (r *run[T]) recycle(it *item[T]) { r.p.items.Put(it) }

// next is when its next extension is due (for a held lease, its deadline,
// when the observer hears that it lapses); zero: none.
func (it *item[T]) next() time.Time { return it.extendAt }

// untrack stops holding it: no more extensions. It returns the lease's
// deadline as last set.
func (r *run[T]) untrack(it *item[T]) time.Time {
	r.mu.Lock()
	it.tracked = false
	it.extendAt = time.Time{}
	r.scheduleLocked(it)
	deadline := it.deadline
	r.mu.Unlock()
	r.p.inFlight.Add(-1)
	return deadline
}

// scheduleLocked puts it in, moves it within or takes it out of the due
// heap after its times changed, and wakes extendLoop if it now has to
// wake earlier.
func (r *run[T]) scheduleLocked(it *item[T]) {
	next := it.next()
	switch {
	case next.IsZero():
		if it.index >= 0 {
			heap.Remove(&r.due, it.index)
		}
		return
	case it.index >= 0:
		heap.Fix(&r.due, it.index)
	default:
		heap.Push(&r.due, it)
	}
	if r.armed.IsZero() || next.Before(r.armed) {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// extendLoop extends leases as they come due, with one timer for the
// earliest, until stop is closed. (A handler's timeout has its own timer,
// armed before the handler starts: see process.)
//
// armed says what the timer is set for only once it is set: AwaitQuiet
// reads armed, and a test's Add must find the timer registered with the
// clock. A mock's Add looks for due timers before it moves its time, so a
// timer registered during an Add, for a time within it, would fire only at
// the next Add. While the loop is on its way to a timer (armed zero, the
// heap not empty) the pool is not at rest, nor while it extends: it counts
// as busy in the run's motion from each wake-up until it waits again.
func (r *run[T]) extendLoop(stop <-chan struct{}) {
	clk := r.p.cfg.clock
	moving := false // counted busy in the motion: between a wake-up and the next wait
	defer func() {
		if moving {
			r.move(-busyOne)
		}
	}()
	for {
		r.mu.Lock()
		var next time.Time
		if r.due.Len() > 0 {
			next = r.due[0].next()
		}
		r.mu.Unlock()

		var t backend.Timer
		if !next.IsZero() {
			// Armed outside the lock (arming takes the clock's lock), for
			// the absolute time: a mock moved meanwhile cannot make it late.
			// A lease pushed meanwhile kicks: armed is zero.
			t = backend.At(clk, next)
		}
		r.mu.Lock()
		r.armed = next
		r.mu.Unlock()
		if moving { // it waits again: AwaitQuiet reads armed
			moving = false
			r.move(-busyOne)
		} else {
			r.change()
		}
		select {
		case <-t.C: // nil, so never, when nothing is due
		case <-r.kick:
		case <-stop:
		}
		// In motion until it waits again: the Extend calls of runDue are
		// under way after the leases left the due list, with no timer
		// armed, and the pool is not at rest meanwhile.
		moving = true
		r.move(busyOne)
		r.mu.Lock()
		r.armed = time.Time{} // on its way: not at rest until armed again
		r.mu.Unlock()
		t.Stop()
		select {
		case <-stop:
			return
		default:
		}
		r.runDue()
	}
}

// runDue extends the leases due for it.
func (r *run[T]) runDue() {
	now := r.p.cfg.clock.Now()
	type due struct {
		it  *item[T]
		gen uint64
	}
	var extend []due
	r.mu.Lock()
	for r.due.Len() > 0 && !r.due[0].next().After(now) {
		it := r.due[0]
		extend = append(extend, due{it, it.gen})
		it.extendAt = time.Time{}
		r.scheduleLocked(it)
	}
	r.mu.Unlock()
	for _, e := range extend {
		r.extend(e.it, e.gen)
	}
}

// extend extends its lease (use gen of it) by its length, up to its limit,
// or stops extending it if the limit is reached. It reads it under the
// lock: once settled, the item may be in use for another lease.
func (r *run[T]) extend(it *item[T], gen uint64) {
	p := r.p
	now := p.cfg.clock.Now()
	r.mu.Lock()
	if it.gen != gen || !it.tracked {
		r.mu.Unlock()
		return
	}
	d, deadline, held, length, limit, margin := it.d, it.deadline, it.held, it.length, it.limit, it.margin
	r.mu.Unlock()
	if held {
		r.emit(OutcomeExtensionStopped, &d, deadline, ErrExtensionLimit, nil, 0)
		return
	}
	to := now.Add(length)
	if to.After(limit) {
		to = limit
	}
	if !to.After(deadline) || !to.After(now) {
		r.emit(OutcomeExtensionStopped, &d, deadline, ErrExtensionLimit, nil, 0)
		return
	}
	err := p.src.Extend(d.LeaseID, to.Sub(now))
	r.mu.Lock()
	tracked := it.gen == gen && it.tracked
	if err == nil && tracked {
		it.deadline = to
		it.extensions++
		it.extendAt = to.Add(-margin)
		r.scheduleLocked(it)
	}
	r.mu.Unlock()
	switch {
	case err == nil:
		p.extended.Add(1)
		r.emit(OutcomeExtended, &d, to, nil, nil, 0)
	case tracked:
		p.errs.Add(1)
		p.logf(slog.LevelWarn, "poller: extending lease failed", "lease", d.LeaseID, "message", d.ID, "err", err)
		r.emit(OutcomeExtensionStopped, &d, deadline, nil, err, 0)
	}
	// An Extend that failed because the lease was settled meanwhile
	// changed nothing, and nobody needs to hear of it.
}

// dueHeap is the run's leases by when each is next due (next), each
// item knowing its index (a heap.Interface, guarded by run.mu).
type dueHeap[T any] []*item[T]

func (h dueHeap[T]) Len() int           { return len(h) }
func (h dueHeap[T]) Less(i, j int) bool { return h[i].next().Before(h[j].next()) }

func (h dueHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *dueHeap[T]) Push(x any) {
	it := x.(*item[T])
	it.index = len(*h)
	*h = append(*h, it)
}

func (h *dueHeap[T]) Pop() any {
	s := *h
	it := s[len(s)-1]
	s[len(s)-1] = nil
	it.index = -1
	*h = s[:len(s)-1]
	return it
}
