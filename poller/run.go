package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// drain ends a run whose poll loop has returned err (nil, or the error of
// a closed source): no handler starts any more, what is leased but not
// started is released, and it returns when every worker has ended. The
// handlers get the drain timeout, or until Shutdown's context ends (which
// Shutdown watches), unless the source is closed: then their contexts are
// cancelled at once, with cause err.
func (r *run[T]) drain(err error) {
	p := r.p
	r.closed.Store(err != nil)
	r.stopping.Store(true)
	var drain backend.Timer
	switch {
	case err != nil: // the source closed: nothing a handler finishes can be settled
		r.cancelHandlers(err)
	case r.shut.Load(): // Shutdown's context bounds the drain
	default:
		at := p.cfg.clock.Now().Add(p.cfg.drainTimeout)
		drain = backend.At(p.cfg.clock, at) // for the time AwaitQuiet reads, however the clock moves meanwhile
		r.rest.drainAt.Store(unixNano(at))
	}
	close(r.work)
	for it := range r.work { // the workers release what they take, too
		r.move(-queuedOne)
		r.release(it)
	}
	done := make(chan struct{})
	go func() {
		r.workers.Wait()
		close(done)
	}()
	r.loopTo(loopMoving, loopDone)
	if drain.C != nil {
		select {
		case <-done:
		case <-drain.C:
			r.loopTo(loopDone, loopMoving)
			p.logf(slog.LevelWarn, "poller: drain timed out; cancelling running handlers", "running", p.running.Load())
			r.cancelHandlers(ErrDrainTimeout)
			r.rest.drainAt.Store(0)
			r.loopTo(loopMoving, loopDone)
			<-done
		}
		drain.Stop()
	} else {
		<-done
	}
}

// run is the state of one Run.
type run[T any] struct {
	p              *Poller[T]
	runCtx         context.Context         // the ctx given to Run
	ctx            context.Context         // Run's, or an earlier stop (idle, Shutdown): when it is done, the drain starts
	stopPolling    context.CancelFunc      // ends ctx
	shut           atomic.Bool             // Shutdown stopped the run: no drain timeout
	pp             backend.PoolPoller[T]   // the source, if it takes a pool's requests; nil otherwise
	buf            []queue.Delivery[T]     // the Polls' buffer (req.Buf): each Poll's deliveries, copied into items before the next
	req            backend.PollRequest[T]  // what the pool asks of each Poll of pp (Max set per Poll)
	hctx           context.Context         // the handlers' base: Run's values, cancelled only by cancelHandlers
	cancelHandlers context.CancelCauseFunc // cancels hctx
	work           chan *item[T]           // leased, waiting for a worker; never holds more than maxOutstanding
	slots          chan struct{}           // one token per lease waiting for or running a handler (or being nacked); capacity maxOutstanding
	workers        sync.WaitGroup
	stopping       atomic.Bool // no new handler starts: the poll loop has ended
	closed         atomic.Bool // the source is closed

	kick chan struct{} // wakes extendLoop to look at the heap again

	pace   pace          // WithRate's bucket and SlowDown's pause
	motion motion        // what the goroutines are doing, for AwaitQuiet
	rest   rest          // what else AwaitQuiet reads
	ended  chan struct{} // closed when the run has ended

	mu       sync.Mutex // guards everything below, and the guarded fields of every item
	due      dueHeap[T]
	began    time.Time             // when the run started (for a Registry)
	handling map[*item[T]]struct{} // the items whose handler runs (a pool WithRegistry); nil otherwise
	armed    time.Time             // the time extendLoop waits for; zero when it waits for no time
}

// poll makes one Poll of up to n, through PollFor where the source takes
// the pool's request; held reports that the deliveries were leased for
// the whole extension allowance.
func (r *run[T]) poll(n int) (ds []queue.Delivery[T], held bool, err error) {
	if r.pp == nil {
		ds, err = r.p.src.Poll(r.ctx, n)
		return ds, false, err
	}
	req := r.req
	req.Max = n
	return r.pp.PollFor(r.ctx, req)
}

// pollLoop polls while there is room, hands the deliveries to the workers,
// and returns nil when r.ctx is done or the error of a closed source.
func (r *run[T]) pollLoop() error {
	p := r.p
	var backoff time.Duration
	for {
		if r.runCtx.Err() != nil { // Run's ctx is done, its child r.ctx perhaps not yet: poll no more
			return nil
		}
		n, ok := r.acquire()
		if !ok {
			return nil
		}
		k, ok := r.gate(n)
		if !ok {
			for range n {
				<-r.slots
			}
			return nil
		}
		for range n - k { // room the pool may not start handlers for yet
			<-r.slots
		}
		n = k
		r.loopTo(loopMoving, loopPolling)
		ds, held, err := r.poll(n)
		r.took(min(len(ds), n))
		// Back in motion, with what it leased queued for the workers (in
		// one move: it sends them below).
		r.move(placeDelta(loopPolling, loopMoving, loopMoving, loopShift) + int64(min(len(ds), n))*queuedOne)
		if len(ds) > n { // a misbehaving source: hand back what there is no room for
			for _, d := range ds[n:] {
				r.releaseID(d)
			}
			ds = ds[:n]
		}
		for range n - len(ds) {
			<-r.slots
		}
		if len(ds) > 0 {
			p.polled.Add(uint64(len(ds)))
			now := p.cfg.clock.Now()
			for _, d := range ds {
				r.work <- r.take(d, now, held) // never blocks: it holds a slot
			}
			// Let the workers just handed these start them before the
			// room for the next Poll is counted: a handler that returns at
			// once frees its room then. Without this, on a fast source each
			// Poll found the room of the one before still held by
			// deliveries no worker had picked up yet, and asked for about
			// half as many as there was room for.
			runtime.Gosched()
		}
		switch {
		case err == nil:
			backoff = 0
		case r.ctx.Err() != nil:
			return nil
		case errors.Is(err, queue.ErrClosed):
			return fmt.Errorf("poller: source closed: %w", err)
		default:
			p.errs.Add(1)
			backoff = min(max(2*backoff, pollBackoffMin), pollBackoffMax)
			p.logf(slog.LevelWarn, "poller: poll failed", "err", err, "retry_in", backoff)
			if !r.wait(backoff) {
				return nil
			}
		}
	}
}

// acquire takes one slot, waiting for it, then up to batch-1 more that are
// free now. It reports false if r.ctx ends first.
func (r *run[T]) acquire() (int, bool) {
	select {
	case r.slots <- struct{}{}:
	default:
		r.loopTo(loopMoving, loopRoom)
		select {
		case r.slots <- struct{}{}:
		case <-r.ctx.Done():
			r.loopTo(loopRoom, loopMoving)
			return 0, false
		}
		r.loopTo(loopRoom, loopMoving)
	}
	n := 1
	for n < r.p.cfg.batch {
		select {
		case r.slots <- struct{}{}:
			n++
			continue
		default:
		}
		break
	}
	return r.awaitBatchRoom(n)
}

// awaitBatchRoom, over a remote source (backend.Remote), holding n slots,
// waits for up to a batch of room while the leases held keep every worker
// busy and a batch more queued: a Poll there is a round trip, and one for
// the slot or two that a settle has just freed would cost a round trip
// each (nats.go's drains Fetch a batch at a time), while what is queued
// hides the wait. It returns the slots it holds, or false, having let
// them go, if r.ctx ends first.
func (r *run[T]) awaitBatchRoom(n int) (int, bool) {
	cfg := &r.p.cfg
	for n < cfg.batch && cfg.remote && int(r.p.inFlight.Load()) >= cfg.busyLeases+cfg.batch {
		r.rest.roomHeld.Store(int64(n)) // for AwaitQuiet: slots taken, not yet leases
		r.loopTo(loopMoving, loopRoom)
		select {
		case r.slots <- struct{}{}:
			n++
		case <-r.ctx.Done():
			r.loopTo(loopRoom, loopMoving)
			r.rest.roomHeld.Store(0)
			for range n {
				<-r.slots
			}
			return 0, false
		}
		r.loopTo(loopRoom, loopMoving)
		r.rest.roomHeld.Store(0)
	}
	return n, true
}

// wait waits d on the clock; it reports false if r.ctx ends first.
func (r *run[T]) wait(d time.Duration) bool {
	at := r.p.cfg.clock.Now().Add(d)
	t := backend.At(r.p.cfg.clock, at) // for the time AwaitQuiet reads, however the clock moves meanwhile
	defer t.Stop()
	r.rest.backoffUntil.Store(unixNano(at))
	r.loopTo(loopMoving, loopBackoff)
	defer r.loopTo(loopBackoff, loopMoving)
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// worker runs handlers on what it takes from the work channel until it is
// closed; once the run is stopping, or while a SlowDown's pause is on, it
// releases what it takes instead.
func (r *run[T]) worker() {
	for {
		r.move(idleOne - busyOne)
		it, ok := <-r.work
		if !ok {
			r.move(-idleOne)
			return
		}
		// Until the handler starts, this worker still counts as idle and
		// it as queued: together they say that the pool is not at rest.
		// runCtx too: a handler that returned because Run's ctx is done
		// may see it done before its child, r.ctx, is cancelled.
		if r.stopping.Load() || r.runCtx.Err() != nil || r.ctx.Err() != nil || r.paused() {
			r.move(busyOne - idleOne - queuedOne)
			r.release(it)
			continue
		}
		r.process(it)
	}
}

// process runs the handler on it and settles its lease.
func (r *run[T]) process(it *item[T]) {
	p := r.p
	it.batch = 1
	c := r.newCall()
	p.running.Add(1)
	if r.handling != nil {
		r.starting(it, c.cancel)
	}
	r.move(-idleOne - queuedOne) // at rest while the handler runs (see AwaitQuiet)
	err, returned := errGoexit, false
	defer func() {
		if r.handling != nil {
			if as, cause := r.stopped(it); as != 0 {
				err = cancelledAs(err, as, cause)
			}
		}
		r.move(busyOne) // and, if the handler ended this goroutine, its replacement's (below)
		p.running.Add(-1)
		r.endCall(c)
		r.finish(it, err)
		if !returned { // runtime.Goexit: this goroutine ends, so put another in its place
			r.workers.Go(r.worker)
		}
	}()
	err = r.invoke(c.ctx, it.d)
	returned = true
}

// invoke calls the handler, turning a panic into a *PanicError.
func (r *run[T]) invoke(ctx context.Context, d queue.Delivery[T]) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			r.p.panics.Add(1)
			r.p.logf(slog.LevelError, "poller: handler panicked", "lease", d.LeaseID, "message", d.ID, "panic", v, "stack", string(pe.Stack))
			err = pe
		}
	}()
	return r.p.handler(ctx, d)
}

// finish settles its lease by the handler's result herr and frees its
// slot.
//
// When the settling call takes the message out of the source for good (an
// Ack, a Reject, a failure on the last attempt, which dead-letters it),
// the slot is freed before the call, so that the poll for the next
// message overlaps it: on a remote source each is a round trip, and
// otherwise every message would cost a worker a Poll and an Ack one after
// the other, the poll loop asking for the one or two slots whose settles
// had just returned. What that poll leases waits at most for one settling
// call, never for a handler. A message that goes back to the source
// (Nack, Fail) is settled first, so that the next poll sees it in its
// place.
func (r *run[T]) finish(it *item[T], herr error) {
	p := r.p
	deadline := r.untrack(it)
	id := it.d.LeaseID
	var (
		out  Outcome
		serr error
	)
	dir := directiveOf(herr)
	isDir := dir != nil
	_, giveUp := dir.(*giveUpError)
	slow, slowed := dir.(*slowDownError)
	if slowed {
		r.slowDown(slow.delay) // before the slot is freed: the poll loop sees the pause
	}
	released := slowed && p.releaser != nil
	leaves := herr == nil || giveUp && p.rejecter != nil || lastAttempt(it.d) && !released
	if leaves {
		<-r.slots
	}
	switch {
	case herr == nil:
		out, serr = OutcomeAcked, p.src.Ack(id)
	case isDir:
		switch dir := dir.(type) {
		case *retryError:
			if p.failer != nil { // the error is kept, for the dead letter the last attempt becomes
				out, serr = OutcomeRetried, p.failer.FailAfter(id, dir.delay, herr)
			} else {
				out, serr = OutcomeRetried, p.src.Nack(id, dir.delay)
			}
		case *giveUpError:
			if p.rejecter != nil {
				out, serr = OutcomeDeadLettered, p.rejecter.Reject(id, herr)
			} else {
				out, serr = OutcomeRetried, p.src.Fail(id, herr)
			}
		case *slowDownError:
			if released {
				out, serr = OutcomeReleased, p.releaser.ReleaseAfter(id, dir.delay)
			} else {
				out, serr = OutcomeRetried, p.src.Nack(id, dir.delay)
			}
		}
	default:
		out, serr = OutcomeRetried, p.src.Fail(id, herr)
	}
	if out == OutcomeRetried && serr == nil && lastAttempt(it.d) {
		out = OutcomeDeadLettered // the source dead-lettered it rather than retry
	}
	if serr != nil {
		p.errs.Add(1)
		p.logf(slog.LevelWarn, "poller: settling lease failed", "outcome", out, "lease", id, "message", it.d.ID, "err", serr, "handler_err", herr)
		out = OutcomeSettleFailed // what happened: nothing, at the source
	} else {
		switch out {
		case OutcomeAcked:
			p.acked.Add(1)
		case OutcomeRetried:
			p.retried.Add(1)
		case OutcomeDeadLettered:
			p.deadLettered.Add(1)
		case OutcomeReleased:
			p.released.Add(1)
		}
	}
	r.emit(out, &it.d, deadline, herr, serr, it.batch)
	if !leaves {
		<-r.slots
	}
	r.recycle(it)
}

// lastAttempt reports whether d is its message's last allowed attempt, so
// that a failure of it dead-letters the message.
func lastAttempt[T any](d queue.Delivery[T]) bool {
	return d.MaxAttempts > 0 && d.Attempt >= d.MaxAttempts
}

// release hands its lease back unstarted and frees its slot. After the
// source closed there is nothing to hand back to.
func (r *run[T]) release(it *item[T]) {
	deadline := r.untrack(it)
	if !r.closed.Load() {
		if serr := r.releaseID(it.d); serr != nil {
			r.emit(OutcomeSettleFailed, &it.d, deadline, nil, serr, 0)
		} else {
			r.emit(OutcomeReleased, &it.d, deadline, nil, nil, 0)
		}
	}
	<-r.slots
	r.recycle(it)
}

// releaseID releases d's lease, counting the result.
func (r *run[T]) releaseID(d queue.Delivery[T]) error {
	err := r.p.src.Release(d.LeaseID)
	if err != nil {
		r.p.errs.Add(1)
		r.p.logf(slog.LevelWarn, "poller: release failed", "lease", d.LeaseID, "message", d.ID, "err", err)
	} else {
		r.p.released.Add(1)
	}
	return err
}

// emit hands an event to the observer, if there is one.
func (r *run[T]) emit(out Outcome, d *queue.Delivery[T], deadline time.Time, err, serr error, batch int) {
	if r.p.observe == nil {
		return
	}
	ev := Event[T]{Outcome: out, Delivery: *d, Err: err, SourceErr: serr, Batch: batch}
	ev.Delivery.Deadline = deadline
	r.p.observe(ev)
}

// timeoutCtx is a handler context with a deadline kept on the poller's
// clock: a timer armed before the handler starts cancels it, with cause
// context.DeadlineExceeded, when the clock reaches deadline. Its Err is then context.DeadlineExceeded, as
// a context.WithDeadline's would be (contexts derived from it see
// context.Canceled, with that cause).
type timeoutCtx struct {
	context.Context // a context.WithCancelCause child of the run's handler context
	deadline        time.Time
}

func (c *timeoutCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *timeoutCtx) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

// directiveOf returns the directive (RetryAfter, GiveUp, SlowDown) err
// carries, or nil. A function of its own: errors.As takes the variable's
// address, which would put it on the heap in every finish, a success's too.
func directiveOf(err error) directive {
	if err == nil {
		return nil
	}
	var dir directive
	if errors.As(err, &dir) {
		return dir
	}
	return nil
}
