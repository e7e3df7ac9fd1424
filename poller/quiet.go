package poller

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasebus/leasebus/backend"
)

// maxPool bounds WithWorkers and WithMaxOutstanding, so that the counts of
// a run's motion fit their fields of one word (see motion).
const maxPool = 1 << 18

// motion is what a run's goroutines are doing, packed in one word so that
// AwaitQuiet reads all of it at one instant and every change is a single
// atomic add. The fields, low bits first:
//
//	busy    19 bits  goroutines in motion: between one wait and the next
//	idle    19 bits  workers waiting for work
//	queued  19 bits  leases sent to the work channel, not yet taken
//	loop     3 bits  where the poll loop is (loopMoving, loopRoom, ...)
//	watch    2 bits  where RunUntilIdle's watcher is (watchOff, ...)
//
// A goroutine counts as busy from the moment it stops waiting until it
// waits again, and a wait that another goroutine ends is seen from the
// word before the waiter runs: a lease sent to an idle worker is queued;
// a slot freed for the poll loop is one fewer running handler (see
// quiet). So no reader sees the run at rest while something of its own is
// on its way.
type motion struct{ w atomic.Uint64 }

const (
	busyOne    = 1
	idleOne    = 1 << 19
	queuedOne  = 1 << 38
	loopShift  = 57
	watchShift = 60
	fieldMask  = 1<<19 - 1
)

// The poll loop's places. Every place but loopMoving is a wait.
const (
	loopMoving  = iota // busy (counted in busy)
	loopRoom           // waiting for a slot
	loopPolling        // in the source's Poll
	loopBackoff        // waiting out the backoff after a failed Poll
	loopDone           // ended: the run drains, or waits for its workers
)

// The idle watcher's places (RunUntilIdle). Every place but watchMoving
// is a wait, or the end.
const (
	watchOff    = iota // none, or it has ended
	watchMoving        // busy (counted in busy)
	watchSource        // in the source's AwaitIdle
	watchPool          // the source is idle; waiting for the pool's leases to end
)

// move adds delta (a sum of the fields' ones, each signed) to the motion,
// and wakes AwaitQuiet to look again.
func (r *run[T]) move(delta int64) {
	r.motion.w.Add(uint64(delta))
	r.change()
}

// loopTo moves the poll loop from place from to place to: a wait counts
// one busy goroutine fewer, a return from one one more.
func (r *run[T]) loopTo(from, to int64) { r.move(placeDelta(from, to, loopMoving, loopShift)) }

// watchTo moves the idle watcher from place from to place to.
func (r *run[T]) watchTo(from, to int64) { r.move(placeDelta(from, to, watchMoving, watchShift)) }

func placeDelta(from, to, moving int64, shift uint) int64 {
	d := (to - from) << shift
	switch {
	case from == moving && to != moving:
		d -= busyOne
	case from != moving && to == moving:
		d += busyOne
	}
	return d
}

// rest is what of a run AwaitQuiet reads beside its motion, and the
// channel it waits on.
type rest struct {
	backoffUntil atomic.Int64 // the poll loop's backoff ends (Unix nanoseconds), in loopBackoff
	roomHeld     atomic.Int64 // slots the poll loop holds while it waits for a batch of room (awaitBatchRoom)
	drainAt      atomic.Int64 // the drain timeout (Unix nanoseconds); 0: none

	parking     *backend.Parking // the Polls' parking, for a backend.PoolPoller; nil otherwise
	idleParking *backend.Parking // the idle watcher's, for a backend.PoolIdleAwaiter; nil otherwise

	gathered atomic.Int64 // a batch pool's deliveries taken by workers, not yet in a handler

	mu        sync.Mutex
	timeouts  map[*timeoutCtx]struct{} // running handlers' timeouts that have not fired
	lingering map[*time.Time]struct{}  // a batch pool's batches waiting to fill, by linger deadline
	changed   chan struct{}            // closed and dropped at a change; nil when none wait
	waiters   atomic.Int32
}

// change wakes whoever waits in AwaitQuiet to look again.
func (r *run[T]) change() {
	if r.rest.waiters.Load() == 0 {
		return
	}
	r.rest.mu.Lock()
	if r.rest.changed != nil {
		close(r.rest.changed)
		r.rest.changed = nil
	}
	r.rest.mu.Unlock()
}

// changedChan returns the channel the next change closes.
func (r *run[T]) changedChan() chan struct{} {
	r.rest.mu.Lock()
	defer r.rest.mu.Unlock()
	if r.rest.changed == nil {
		r.rest.changed = make(chan struct{})
	}
	return r.rest.changed
}

// quiet reports whether the run is at rest at the clock's now: every
// goroutine waits for something only the test (or the source, or a
// handler) can bring, and no timer of its own is due and not yet fired.
func (r *run[T]) quiet() bool {
	w := r.motion.w.Load()
	running := r.p.running.Load() // after w: a handler that returned since is busy in w, or one fewer here
	busy, idle, queued := w&fieldMask, w>>19&fieldMask, w>>38&fieldMask
	if busy > 0 || idle > 0 && queued > 0 {
		return false
	}
	now := r.p.cfg.clock.Now()
	switch w >> watchShift & 3 {
	case watchSource:
		if r.rest.idleParking != nil && !r.rest.idleParking.Parked(now) {
			return false // the source is idle, or due to be: the watcher is on its way
		}
	case watchPool:
		if r.p.inFlight.Load() == 0 {
			return false // the pool's last lease ended: the watcher is on its way
		}
	}
	loop := w >> loopShift & 7
	if loop != loopDone && r.ctx.Err() != nil {
		return false // the poll loop is on its way to the drain
	}
	switch loop {
	case loopRoom:
		// Every slot is a running handler or a lease queued for one;
		// otherwise one was freed for the loop, which has yet to run.
		if running+int64(queued)+r.rest.gathered.Load()+r.rest.roomHeld.Load() < int64(r.p.cfg.maxOutstanding) {
			return false
		}
	case loopPolling:
		if r.rest.parking != nil && !r.rest.parking.Parked(now) {
			return false
		}
	case loopBackoff:
		if !now.Before(time.Unix(0, r.rest.backoffUntil.Load())) {
			return false
		}
	case loopDone:
		if at := r.rest.drainAt.Load(); at != 0 && !now.Before(time.Unix(0, at)) {
			return false
		}
	default:
		return false
	}
	r.rest.mu.Lock()
	for tc := range r.rest.timeouts {
		if !now.Before(tc.deadline) {
			r.rest.mu.Unlock()
			return false // its cancel is on its way
		}
	}
	for at := range r.rest.lingering {
		if !now.Before(*at) {
			r.rest.mu.Unlock()
			return false // the batch is on its way to its handler
		}
	}
	r.rest.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	var next time.Time
	if r.due.Len() > 0 {
		next = r.due[0].next()
	}
	// extendLoop's timer: not due, and not later than the earliest lease
	// due (then a kick is on its way). A timer set for a lease settled
	// since is harmless until it comes due: it then finds nothing to do.
	armed := r.armed
	return (next.IsZero() || !armed.IsZero() && !next.Before(armed)) && (armed.IsZero() || now.Before(armed))
}

// AwaitQuiet blocks until the pool is running and at rest: every worker
// either waits for work or runs a handler, the poll loop waits in the
// source's Poll (parked there, on a backend.PoolPoller such as a
// *broker.Subscription: nothing it could lease), for room or out a
// backoff, and none of the pool's own timers (a handler timeout, a lease
// extension, the backoff, the drain timeout) has come due without its
// work being done. A test on a mock clock calls it before Add, so that
// what the Add does depends only on what the test did before: the pool
// is not still on its way to a Poll or a handler, nor settling a lease.
//
// Where Subscription.AwaitParked counts Polls (a pool polls from one
// goroutine, however many workers wait), AwaitQuiet is about the pool:
// after it, a message published or made visible by an Add goes to a
// worker, and a handler whose timeout the Add reaches has its context
// cancelled.
//
// A handler is the test's own code: one the test lets return, or whose
// context is cancelled, still counts as running until it has returned,
// so to see a handler's result settled wait for its outcome (WithObserver,
// or the source's state), then for quiet. On a source that is not a
// backend.PoolPoller (a remote one, or a wrapper that does not pass the
// request on), a Poll counts as parked as soon as it is called, and on an
// IdleAwaiter that is not a backend.PoolIdleAwaiter RunUntilIdle's wait
// for idle as soon as it begins.
//
// What AwaitQuiet cannot see is what a handler waits on: a running
// handler counts as at rest, so a handler that itself waits on the mock
// clock (a fake of a slow call, clk.After, clk.Sleep) may not have armed
// its timer yet when AwaitQuiet returns, and the test's next Add can
// pass it by. For such a test, wait with brokertest.AwaitWaiting, whose
// WaitClock the handler's fakes wait on, or run it inside
// testing/synctest, on the real clock, which the bubble makes virtual:
// synctest.Wait sees every goroutine, the handler's included
// (brokertest.NewReal).
//
// Quiet is a moment: anything that can wake the pool (a publish, an Add,
// a handler's return) ends it. AwaitQuiet returns nil when the pool is
// quiet or when the run it waited on has ended (RunUntilIdle ends its run
// at idle), and ctx's error if ctx ends first. Called while no Run or
// RunUntilIdle is active, it waits for one to start. A nil ctx is an
// invalid argument.
func (p *Poller[T]) AwaitQuiet(ctx context.Context) error {
	if ctx == nil {
		return backend.Invalid("AwaitQuiet: nil context")
	}
	for {
		p.runMu.Lock()
		r := p.cur
		started := p.started
		if started == nil {
			started = make(chan struct{})
			p.started = started
		}
		p.runMu.Unlock()
		if r == nil {
			select {
			case <-started:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ch := r.changedChan()
		r.rest.waiters.Add(1)
		quiet := r.quiet()
		if quiet {
			r.rest.waiters.Add(-1)
			return nil
		}
		var ended bool
		select {
		case <-ch:
		case <-r.ended:
			ended = true
		case <-ctx.Done():
		}
		r.rest.waiters.Add(-1)
		if err := ctx.Err(); err != nil {
			return err
		}
		if ended {
			return nil // nothing of that run moves any more
		}
	}
}

// timedOut forgets a handler's timeout: it fired (its context is
// cancelled), or the handler returned first.
func (r *run[T]) timedOut(tc *timeoutCtx) {
	r.rest.mu.Lock()
	delete(r.rest.timeouts, tc)
	r.rest.mu.Unlock()
	r.change()
}

// watchIdle is RunUntilIdle's watcher: it returns nil once the source is
// idle and the pool holds no lease, both at once, so that no handler is
// running when the run stops; or the error of the source's AwaitIdle.
// The source alone can be idle while a handler runs: one whose lease
// lapsed and whose message was settled by another delivery. What that
// handler does before it returns (a follow-up publish) keeps the run
// going.
func (r *run[T]) watchIdle(idle backend.IdleAwaiter) error {
	await := idle.AwaitIdle
	if pia, ok := idle.(backend.PoolIdleAwaiter); ok {
		await = func(ctx context.Context) error { return pia.AwaitIdleFor(ctx, r.rest.idleParking) }
	}
	for {
		r.watchTo(watchMoving, watchSource)
		err := await(r.ctx)
		r.watchTo(watchSource, watchMoving)
		if err != nil {
			return err
		}
		if r.p.inFlight.Load() == 0 {
			return nil
		}
		if err := r.awaitPool(); err != nil {
			return err
		}
	}
}

// awaitPool waits until the pool holds no lease, or r.ctx ends.
func (r *run[T]) awaitPool() error {
	r.rest.waiters.Add(1)
	defer r.rest.waiters.Add(-1)
	for {
		r.watchTo(watchMoving, watchPool) // before the channel: the move closes the one there is
		ch := r.changedChan()
		if r.p.inFlight.Load() == 0 {
			r.watchTo(watchPool, watchMoving)
			return nil
		}
		select {
		case <-ch:
		case <-r.ctx.Done():
		}
		r.watchTo(watchPool, watchMoving)
		if err := r.ctx.Err(); err != nil {
			return err
		}
	}
}
