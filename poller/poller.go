package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/internal/minheap"
	"github.com/leasebus/leasebus/internal/wake"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// Source is what a Poller pulls from: a *broker.Subscription or a
// JetStream subscription, or another backend that hands out leased deliveries.
// Its methods must be safe for concurrent use and mean what they mean on
// a broker.Subscription: Poll blocks until at least one delivery is ready,
// ctx is done (returning an error) or the source closes (an error matching
// queue.ErrClosed), and returns at most n.
type Source[T any] interface {
	Poll(ctx context.Context, n int) ([]queue.Delivery[T], error)
	Ack(id lease.ID) error
	Nack(id lease.ID, delay time.Duration) error
	Fail(id lease.ID, cause error) error
	Extend(id lease.ID, timeout time.Duration) error
	Release(id lease.ID) error
}

// Rejecter is implemented by a Source that can dead-letter a message at
// once (a *broker.Subscription can). The poller uses it for GiveUp.
type Rejecter interface {
	Reject(id lease.ID, cause error) error
}

// Handler processes one delivery. Its result settles the lease: nil acks
// it; an error made by RetryAfter nacks it with that delay; one made by
// GiveUp rejects it; any other error fails it (the source's retry policy
// picks the delay, and the error is kept for the dead letter); a panic is
// recovered and fails it with a *PanicError. ctx carries the values of
// Run's context but is not cancelled when Run's context is: only when the
// handler timeout passes, the drain times out or the source closes.
type Handler[T any] func(ctx context.Context, d queue.Delivery[T]) error

// Errors returned by this package, or seen by handlers and observers.
var (
	// ErrRunning is returned by Run while another Run of the same Poller
	// is active.
	ErrRunning = errors.New("poller: already running")
	// ErrDrainTimeout is the cause (context.Cause) of a handler context
	// cancelled because the drain timed out.
	ErrDrainTimeout = errors.New("poller: drain timed out")
	// ErrExtensionLimit is an OutcomeExtensionStopped event's Err when the
	// lease reached its extension limit.
	ErrExtensionLimit = errors.New("poller: lease extension limit reached")
)

// Backoff after a failed Poll: doubling from pollBackoffMin, capped.
const (
	pollBackoffMin = 100 * time.Millisecond
	pollBackoffMax = 10 * time.Second
)

// Poller is a pool of workers that pulls deliveries from a Source, runs a
// Handler on each and settles its lease by the result, extending the
// leases it holds as they near their deadlines. Create one with New and
// start it with Run. Its methods are safe for concurrent use.
type Poller[T any] struct {
	src      Source[T]
	rejecter Rejecter // src as a Rejecter; nil if it is not one
	handler  Handler[T]
	cfg      config         // immutable after New; defaults filled in
	observe  func(Event[T]) // nil: none
	active   atomic.Bool    // a Run is active

	polled, acked, retried, deadLettered atomic.Uint64
	extended, released, panics, errs     atomic.Uint64
	inFlight, running                    atomic.Int64
}

// New returns a Poller that runs h on the deliveries of src. Options set
// the workers, the batch size, flow control, timeouts, lease extension,
// the clock, logging and an observer. A nil src or h, or an invalid
// option, is an error matching queue.ErrInvalidArgument.
func New[T any](src Source[T], h Handler[T], opts ...Option) (*Poller[T], error) {
	if src == nil {
		return nil, core.Invalid("poller.New: nil source")
	}
	if h == nil {
		return nil, core.Invalid("poller.New: nil handler")
	}
	var cfg config
	for i, o := range opts {
		if o == nil {
			return nil, core.Invalid("poller.New: option %d is nil", i)
		}
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if cfg.workers == 0 {
		cfg.workers = 1
	}
	if cfg.batch == 0 {
		cfg.batch = cfg.workers
	}
	if cfg.maxOutstanding == 0 {
		cfg.maxOutstanding = cfg.workers
	}
	if cfg.maxOutstanding < cfg.workers {
		return nil, core.Invalid("WithMaxOutstanding: %d, must be >= the %d workers", cfg.maxOutstanding, cfg.workers)
	}
	if cfg.drainTimeout == 0 {
		cfg.drainTimeout = DefaultDrainTimeout
	}
	if cfg.maxExtension == 0 {
		cfg.maxExtension = DefaultMaxExtension
	}
	if cfg.clock == nil {
		if s, ok := src.(interface{ Config() queue.Config }); ok {
			cfg.clock = s.Config().Clock
		}
		if cfg.clock == nil {
			cfg.clock = clock.New()
		}
	}
	p := &Poller[T]{src: src, handler: h, cfg: cfg}
	p.rejecter, _ = src.(Rejecter)
	if cfg.observer != nil {
		f, ok := cfg.observer.(func(Event[T]))
		if !ok {
			var zero T
			return nil, core.Invalid("WithObserver: %T does not take the poller's Event[%T]", cfg.observer, any(zero))
		}
		p.observe = f
	}
	return p, nil
}

// Stats returns the poller's counters, over all its runs.
func (p *Poller[T]) Stats() Stats {
	return Stats{
		Polled:       p.polled.Load(),
		Acked:        p.acked.Load(),
		Retried:      p.retried.Load(),
		DeadLettered: p.deadLettered.Load(),
		Extended:     p.extended.Load(),
		Released:     p.released.Load(),
		Panics:       p.panics.Load(),
		Errors:       p.errs.Load(),
		InFlight:     int(p.inFlight.Load()),
		Running:      int(p.running.Load()),
	}
}

// Run pulls from the source and runs the handler on the workers until ctx
// is done or the source closes, and returns when every goroutine it
// started has ended.
//
// When ctx is done Run drains: it stops polling, releases every message
// leased but not started (its attempt not spent), lets running handlers
// finish and settles their leases, still extending them. Handler contexts
// are not cancelled until the drain timeout (WithDrainTimeout) passes;
// then they are, with cause ErrDrainTimeout, and Run waits for the
// handlers to return. Run then returns nil.
//
// When the source closes (a Poll returns an error matching
// queue.ErrClosed; while every worker is busy the poller is not polling,
// so it learns of it when one frees up) the messages held are gone with
// it: Run cancels the running handlers' contexts at once, waits for them,
// and returns an error matching queue.ErrClosed.
//
// Any other Poll error is counted, logged and retried after a backoff
// on the poller's clock (100ms doubling to 10s). Errors of Ack, Nack,
// Fail, Reject, Extend and Release are counted and logged, never fatal.
//
// Run may be called again after it returns; while it runs, another call
// returns ErrRunning. A nil ctx is an invalid argument.
func (p *Poller[T]) Run(ctx context.Context) error {
	if ctx == nil {
		return core.Invalid("Run: nil context")
	}
	return p.run(ctx, nil)
}

// IdleAwaiter is implemented by a Source that can tell when it holds
// nothing: AwaitIdle blocks until no message is visible, delayed, held
// back or in flight, returning nil then, ctx's error if ctx ends first, or
// an error matching queue.ErrClosed if the source closes. A
// *broker.Subscription implements it. RunUntilIdle needs
// it.
type IdleAwaiter interface {
	AwaitIdle(ctx context.Context) error
}

// RunUntilIdle is Run for a batch: it runs the pool until the source is
// idle — nothing visible, delayed, in flight or held back — then drains as
// Run does when its context ends (there is nothing left to release or
// finish, unless something was published meanwhile) and returns nil. Every
// message has then been acked or dead-lettered (or dropped by the source).
//
// The source must implement IdleAwaiter; if it does not, RunUntilIdle
// returns an error matching queue.ErrInvalidArgument at once.
//
// The source is never idle while the pool holds a lease, so a handler may
// publish follow-up work to the same source: the new message is held
// before the handler's own lease is settled, and the run goes on. Work
// published by anyone else after the idle moment is left for another run.
// A delayed message (a publish delay, a retry's backoff) keeps the source
// busy: the pool waits for it on the source's clock.
//
// If ctx ends first, RunUntilIdle drains as Run does and returns ctx's
// error (not nil, so that a nil error always means the work is done). If
// the source closes it returns an error matching queue.ErrClosed, as Run
// does. Another error from AwaitIdle stops the run (with a drain) and is
// returned. A nil ctx is an invalid argument; while another Run or
// RunUntilIdle is active it returns ErrRunning.
func (p *Poller[T]) RunUntilIdle(ctx context.Context) error {
	if ctx == nil {
		return core.Invalid("RunUntilIdle: nil context")
	}
	ia, ok := p.src.(IdleAwaiter)
	if !ok {
		return core.Invalid("RunUntilIdle: source %T does not implement poller.IdleAwaiter", p.src)
	}
	return p.run(ctx, ia)
}

// run is Run, and with a non-nil idle RunUntilIdle: it also stops polling
// (and drains) when idle.AwaitIdle returns.
func (p *Poller[T]) run(ctx context.Context, idle IdleAwaiter) error {
	if !p.active.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer p.active.Store(false)

	// pollCtx is the run's: ctx, or an earlier stop when the source is idle.
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	r := &run[T]{
		p:     p,
		ctx:   pollCtx,
		work:  make(chan *item[T], p.cfg.maxOutstanding),
		slots: make(chan struct{}, p.cfg.maxOutstanding),
		kick:  make(chan struct{}, 1),
		due:   newDue[T](),
	}
	r.hctx, r.cancelHandlers = context.WithCancelCause(context.WithoutCancel(ctx))
	defer r.cancelHandlers(nil)

	// The idle watcher: once it has an answer it stops the polling, so
	// that the run drains.
	var watcher sync.WaitGroup
	idleErr := make(chan error, 1) // AwaitIdle's result, sent before polling stops
	if idle != nil {
		watcher.Go(func() {
			idleErr <- idle.AwaitIdle(pollCtx)
			stopPolling()
		})
	}

	stopExt := make(chan struct{})
	var ext sync.WaitGroup
	ext.Go(func() { r.extendLoop(stopExt) })
	for range p.cfg.workers {
		r.workers.Go(r.worker)
	}

	err := r.pollLoop()
	var (
		werr    error
		watched bool // the watcher answered before the drain
	)
	if idle != nil {
		select {
		case werr = <-idleErr:
			watched = true
		default:
		}
		if watched && err == nil && errors.Is(werr, queue.ErrClosed) {
			// The source closed while every worker was busy: nothing a
			// handler finishes can be settled, as when a Poll says so.
			err = fmt.Errorf("poller: source closed: %w", werr)
		}
	}
	r.drain(err)
	close(stopExt)
	ext.Wait()
	stopPolling()
	watcher.Wait()

	if err != nil || idle == nil {
		return err
	}
	if !watched {
		werr = <-idleErr // it ended with the polling, or saw idle meanwhile
	}
	switch {
	case werr == nil:
		return nil // idle: the work is done
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("poller: await idle: %w", werr)
}

// drain ends a run whose poll loop has returned err (nil, or the error of
// a closed source): no handler starts any more, what is leased but not
// started is released, and it returns when every worker has ended. The
// handlers get the drain timeout, unless the source is closed: then their
// contexts are cancelled at once, with cause err.
func (r *run[T]) drain(err error) {
	p := r.p
	r.closed.Store(err != nil)
	r.stopping.Store(true)
	var drain wake.Timer
	if err != nil { // the source closed: nothing a handler finishes can be settled
		r.cancelHandlers(err)
	} else {
		drain = wake.After(p.cfg.clock, p.cfg.drainTimeout)
	}
	close(r.work)
	for it := range r.work { // the workers release what they take, too
		r.release(it)
	}
	done := make(chan struct{})
	go func() {
		r.workers.Wait()
		close(done)
	}()
	if drain.C != nil {
		select {
		case <-done:
		case <-drain.C:
			p.logf(slog.LevelWarn, "poller: drain timed out; cancelling running handlers", "running", p.running.Load())
			r.cancelHandlers(ErrDrainTimeout)
			<-done
		}
		drain.Stop()
	} else {
		<-done
	}
}

// logf logs at level if the poller has a logger.
func (p *Poller[T]) logf(level slog.Level, msg string, args ...any) {
	if p.cfg.logger != nil {
		p.cfg.logger.Log(context.Background(), level, msg, args...)
	}
}

// run is the state of one Run.
type run[T any] struct {
	p              *Poller[T]
	ctx            context.Context         // Run's: when it is done, the drain starts
	hctx           context.Context         // the handlers' base: Run's values, cancelled only by cancelHandlers
	cancelHandlers context.CancelCauseFunc // cancels hctx
	work           chan *item[T]           // leased, waiting for a worker; never holds more than maxOutstanding
	slots          chan struct{}           // one token per lease held; capacity maxOutstanding
	workers        sync.WaitGroup
	stopping       atomic.Bool // no new handler starts: the poll loop has ended
	closed         atomic.Bool // the source is closed

	kick chan struct{} // wakes extendLoop to look at the heap again

	mu    sync.Mutex // guards everything below, and the guarded fields of every item
	due   minheap.Heap[*item[T]]
	armed time.Time // the time extendLoop waits for; zero when it waits for no time
}

// pollLoop polls while there is room, hands the deliveries to the workers,
// and returns nil when r.ctx is done or the error of a closed source.
func (r *run[T]) pollLoop() error {
	p := r.p
	var backoff time.Duration
	for {
		n, ok := r.acquire()
		if !ok {
			return nil
		}
		ds, err := p.src.Poll(r.ctx, n)
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
				it := r.newItem(d, now)
				r.track(it)
				r.work <- it // never blocks: it holds a slot
			}
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
	case <-r.ctx.Done():
		return 0, false
	}
	n := 1
	for n < r.p.cfg.batch {
		select {
		case r.slots <- struct{}{}:
			n++
		default:
			return n, true
		}
	}
	return n, true
}

// wait waits d on the clock; it reports false if r.ctx ends first.
func (r *run[T]) wait(d time.Duration) bool {
	t := wake.After(r.p.cfg.clock, d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// worker runs handlers on what it takes from the work channel until it is
// closed; once the run is stopping it releases what it takes instead.
func (r *run[T]) worker() {
	for it := range r.work {
		if r.stopping.Load() || r.ctx.Err() != nil {
			r.release(it)
			continue
		}
		r.process(it)
	}
}

// process runs the handler on it and settles its lease.
func (r *run[T]) process(it *item[T]) {
	p := r.p
	ctx, cancel := r.hctx, context.CancelCauseFunc(nil)
	if p.cfg.handlerTimeout > 0 {
		var inner context.Context
		inner, cancel = context.WithCancelCause(r.hctx)
		deadline := p.cfg.clock.Now().Add(p.cfg.handlerTimeout)
		ctx = &timeoutCtx{Context: inner, deadline: deadline}
		r.setTimeout(it, deadline, cancel)
	}
	p.running.Add(1)
	err, returned := errGoexit, false
	defer func() {
		p.running.Add(-1)
		if cancel != nil {
			cancel(nil)
		}
		r.finish(it, err)
		if !returned { // runtime.Goexit: this goroutine ends, so put another in its place
			r.workers.Go(r.worker)
		}
	}()
	err = r.invoke(ctx, it.d)
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
func (r *run[T]) finish(it *item[T], herr error) {
	p := r.p
	deadline := r.untrack(it)
	id := it.d.LeaseID
	var (
		out  Outcome
		serr error
		dir  directive
	)
	switch {
	case herr == nil:
		out, serr = OutcomeAcked, p.src.Ack(id)
	case errors.As(herr, &dir):
		switch dir := dir.(type) {
		case *retryError:
			out, serr = OutcomeRetried, p.src.Nack(id, dir.delay)
		case *giveUpError:
			if p.rejecter != nil {
				out, serr = OutcomeDeadLettered, p.rejecter.Reject(id, herr)
			} else {
				out, serr = OutcomeRetried, p.src.Fail(id, herr)
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
	} else {
		switch out {
		case OutcomeAcked:
			p.acked.Add(1)
		case OutcomeRetried:
			p.retried.Add(1)
		case OutcomeDeadLettered:
			p.deadLettered.Add(1)
		}
	}
	r.emit(out, it, deadline, herr, serr)
	<-r.slots
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
		serr := r.releaseID(it.d)
		r.emit(OutcomeReleased, it, deadline, nil, serr)
	}
	<-r.slots
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
func (r *run[T]) emit(out Outcome, it *item[T], deadline time.Time, err, serr error) {
	if r.p.observe == nil {
		return
	}
	d := it.d
	d.Deadline = deadline
	r.p.observe(Event[T]{Outcome: out, Delivery: d, Err: err, SourceErr: serr})
}

// timeoutCtx is a handler context with a deadline kept on the poller's
// clock: extendLoop cancels it, with cause context.DeadlineExceeded, when
// the clock reaches deadline. Its Err is then context.DeadlineExceeded, as
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
