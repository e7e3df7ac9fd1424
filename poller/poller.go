package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
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

// Handler processes one delivery. Its result settles the lease: nil acks
// it; an error made by RetryAfter fails it with that delay (FailAfter, or
// Nack on a source without it); one made by
// GiveUp rejects it; any other error fails it (the source's retry policy
// picks the delay, and the error is kept for the dead letter); a panic is
// recovered and fails it with a *PanicError. ctx carries the values of
// Run's context but is not cancelled when Run's context is: only when the
// handler timeout passes, the drain times out (or Shutdown's context
// ends) or the source closes.
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
	// ErrShutdown is returned by a RunUntilIdle that Shutdown stopped
	// before the source was idle.
	ErrShutdown = errors.New("poller: shut down")
)

// Backoff after a failed Poll: doubling from pollBackoffMin, capped.
const (
	pollBackoffMin = 100 * time.Millisecond
	pollBackoffMax = 10 * time.Second
)

// Poller is a pool of workers that pulls deliveries from a Source, runs a
// Handler on each and settles its lease by the result, keeping the leases
// it holds from lapsing (see WithExtension). Create one with New and
// start it with Run. Its methods are safe for concurrent use.
type Poller[T any] struct {
	src          Source[T]
	rejecter     backend.Rejecter      // src as a backend.Rejecter; nil if it is not one
	failer       backend.DelayFailer   // src as a backend.DelayFailer; nil if it is not one
	releaser     backend.DelayReleaser // src as a backend.DelayReleaser; nil if it is not one
	batchAcker   backend.BatchAcker    // a batch pool's src as a backend.BatchAcker; nil if not
	handler      Handler[T]
	batchHandler BatchHandler[T] // NewBatch's; nil for New's
	cfg          config          // immutable after New; defaults filled in
	observe      func(Event[T])  // nil: none
	active       atomic.Bool     // a Run is active

	runMu   sync.Mutex
	cur     *run[T]       // the active run; nil when none
	started chan struct{} // closed when a run starts; nil when none wait

	polled, acked, retried, deadLettered atomic.Uint64
	extended, released, panics, errs     atomic.Uint64
	inFlight, running                    atomic.Int64
	items                                sync.Pool // of *item[T], for reuse (see item)
}

// New returns a Poller that runs h on the deliveries of src. Options set
// the workers, the batch size, flow control, timeouts, lease extension,
// the clock, logging and an observer. A nil src or h, or an invalid
// option, is an error matching queue.ErrInvalidArgument.
func New[T any](src Source[T], h Handler[T], opts ...Option) (*Poller[T], error) {
	if src == nil {
		return nil, backend.Invalid("poller.New: nil source")
	}
	if h == nil {
		return nil, backend.Invalid("poller.New: nil handler")
	}
	return newPoller(src, h, nil, opts)
}

// newPoller is New with h, or NewBatch with bh.
func newPoller[T any](src Source[T], h Handler[T], bh BatchHandler[T], opts []Option) (*Poller[T], error) {
	if src == nil {
		return nil, backend.Invalid("poller: nil source")
	}
	var cfg config
	for i, o := range opts {
		if o.apply == nil {
			return nil, backend.Invalid("poller.New: option %d is the zero Option: make options with the With functions", i)
		}
		o.apply(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if cfg.workers == 0 {
		cfg.workers = 1
	}
	per := 1 // leases a worker takes at once
	switch {
	case bh != nil:
		if cfg.batchMax == 0 {
			cfg.batchMax = DefaultBatchMax
		}
		if cfg.workers > maxPool/cfg.batchMax {
			return nil, backend.Invalid("WithWorkers %d, WithBatchMax %d: at most %d leases in batches at once", cfg.workers, cfg.batchMax, maxPool)
		}
		per = cfg.batchMax
	case cfg.batchSet:
		return nil, backend.Invalid("WithBatchMax: for a batch handler (NewBatch), not New")
	case cfg.batchByKey:
		return nil, backend.Invalid("WithBatchByKey: for a batch handler (NewBatch), not New")
	}
	if cfg.batch == 0 {
		cfg.batch = min(cfg.workers*per, maxPool)
	}
	if r, ok := src.(backend.Remote); ok && r.Remote() {
		cfg.remote = true
	}
	cfg.busyLeases = cfg.workers * per
	if cfg.maxOutstanding == 0 {
		cfg.maxOutstanding = cfg.workers * per
		if cfg.remote && cfg.workers <= maxPool {
			// Two batches ahead (see WithMaxOutstanding), within the bound.
			cfg.maxOutstanding = min(cfg.workers*per+2*min(cfg.batch, maxPool), maxPool)
		}
	}
	if cfg.workers > maxPool || cfg.maxOutstanding > maxPool {
		return nil, backend.Invalid("WithWorkers %d, WithMaxOutstanding %d: must be at most %d", cfg.workers, cfg.maxOutstanding, maxPool)
	}
	if cfg.maxOutstanding < cfg.workers {
		return nil, backend.Invalid("WithMaxOutstanding: %d, must be >= the %d workers", cfg.maxOutstanding, cfg.workers)
	}
	if bh != nil && cfg.maxOutstanding < cfg.batchMax {
		return nil, backend.Invalid("WithMaxOutstanding: %d, must be >= a batch (%d)", cfg.maxOutstanding, cfg.batchMax)
	}
	if cfg.drainTimeout == 0 {
		cfg.drainTimeout = defaultDrainTimeout
	}
	if cfg.maxExtension == 0 {
		cfg.maxExtension = defaultMaxExtension
	}
	if cfg.clock == nil {
		switch s := src.(type) {
		case interface{ Config() queue.Config }:
			cfg.clock = s.Config().Clock
		case backend.Clocked:
			cfg.clock = s.Clock()
		}
		if cfg.clock == nil {
			cfg.clock = clock.New()
		}
	}
	p := &Poller[T]{src: src, handler: h, batchHandler: bh, cfg: cfg}
	p.rejecter, _ = src.(backend.Rejecter)
	p.failer, _ = src.(backend.DelayFailer)
	p.releaser, _ = src.(backend.DelayReleaser)
	if bh != nil {
		p.batchAcker, _ = src.(backend.BatchAcker)
	}
	var fs []func(Event[T])
	for _, o := range cfg.observers {
		f, ok := o.(func(Event[T]))
		if !ok {
			var zero T
			return nil, backend.Invalid("WithObserver: %T does not take the poller's Event[%T]", o, any(zero))
		}
		fs = append(fs, f)
	}
	switch len(fs) {
	case 0:
	case 1:
		p.observe = fs[0]
	default:
		p.observe = func(e Event[T]) {
			for _, f := range fs {
				f(e)
			}
		}
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
// finish and settles their leases, still keeping them. Handler contexts
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
// To choose the drain's deadline when you stop, run with a context that
// does not end and call Shutdown, as with http.Server.
//
// Run may be called again after it returns; while it runs, another call
// returns ErrRunning. A nil ctx is an invalid argument.
func (p *Poller[T]) Run(ctx context.Context) error {
	if ctx == nil {
		return backend.Invalid("Run: nil context")
	}
	return p.run(ctx, nil)
}

// Shutdown stops the active Run or RunUntilIdle and drains it as Run does
// when its context ends, except that running handlers may finish until ctx
// ends, not until the drain timeout: it stops polling, releases what was
// leased but not started, and returns nil once the run has returned. If
// ctx ends first, Shutdown cancels the running handlers' contexts (cause
// ErrDrainTimeout) and returns ctx's error without waiting for them; the
// run returns when they have. A Run stopped by Shutdown returns nil, a
// RunUntilIdle ErrShutdown (unless the source was idle already).
//
// Shutdown of a Poller that is not running returns nil and changes
// nothing: a later Run runs. A nil ctx is an invalid argument.
//
// ctx is the caller's, usually real time: on a mock clock, the drain
// timeout of a Run whose context ended is the way to bound a drain that a
// test drives.
func (p *Poller[T]) Shutdown(ctx context.Context) error {
	if ctx == nil {
		return backend.Invalid("Shutdown: nil context")
	}
	p.runMu.Lock()
	r := p.cur
	p.runMu.Unlock()
	if r == nil {
		return nil
	}
	r.shut.Store(true)
	r.stopPolling()
	select {
	case <-r.ended:
		return nil
	case <-ctx.Done():
		p.logf(slog.LevelWarn, "poller: shutdown deadline passed; cancelling running handlers", "running", p.running.Load())
		r.cancelHandlers(ErrDrainTimeout)
		return ctx.Err()
	}
}

// RunUntilIdle is Run for a batch: it runs the pool until the source is
// idle — nothing visible, delayed, in flight or held back — while the pool
// holds no lease and runs no handler, then drains as Run does when its
// context ends (there is nothing left to release or finish, unless
// something was published meanwhile) and returns nil. Every message has
// then been acked or dead-lettered (or dropped by the source).
//
// The source must implement backend.IdleAwaiter; if it does not, RunUntilIdle
// returns an error matching queue.ErrInvalidArgument at once.
//
// The source is never idle while the pool holds a lease, so a handler may
// publish follow-up work to the same source: the new message is held
// before the handler's own lease is settled, and the run goes on. A
// handler that outlived its lease (its message settled by another
// delivery) keeps the run going too, until it returns, so what it
// publishes meanwhile is handled in this run. Work published by anyone
// else after the idle moment is left for another run. A delayed message
// (a publish delay, a retry's backoff) keeps the source busy: the pool
// waits for it on the source's clock.
//
// If ctx ends first, RunUntilIdle drains as Run does and returns ctx's
// error (not nil, so that a nil error always means the work is done). If
// the source closes it returns an error matching queue.ErrClosed, as Run
// does. Another error from AwaitIdle stops the run (with a drain) and is
// returned. A nil ctx is an invalid argument; while another Run or
// RunUntilIdle is active it returns ErrRunning.
func (p *Poller[T]) RunUntilIdle(ctx context.Context) error {
	if ctx == nil {
		return backend.Invalid("RunUntilIdle: nil context")
	}
	ia, ok := p.src.(backend.IdleAwaiter)
	if !ok {
		return backend.Invalid("RunUntilIdle: source %T does not implement backend.IdleAwaiter", p.src)
	}
	return p.run(ctx, ia)
}

// run is Run, and with a non-nil idle RunUntilIdle: it also stops polling
// (and drains) when idle.AwaitIdle returns.
func (p *Poller[T]) run(ctx context.Context, idle backend.IdleAwaiter) error {
	if !p.active.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer p.active.Store(false)

	// pollCtx is the run's: ctx, or an earlier stop when the source is idle.
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	r := &run[T]{
		p:           p,
		runCtx:      ctx,
		ctx:         pollCtx,
		stopPolling: stopPolling,
		work:        make(chan *item[T], p.cfg.maxOutstanding),
		slots:       make(chan struct{}, p.cfg.maxOutstanding),
		kick:        make(chan struct{}, 1),
		ended:       make(chan struct{}),
	}
	r.hctx, r.cancelHandlers = context.WithCancelCause(context.WithoutCancel(ctx))
	defer r.cancelHandlers(nil)
	if pp, ok := p.src.(backend.PoolPoller[T]); ok { // its Polls say when they park, and can hold
		r.pp = pp
		r.rest.parking = backend.NewParking(r.change)
		r.buf = make([]queue.Delivery[T], 0, p.cfg.batch)
		r.req = backend.PollRequest[T]{Parking: r.rest.parking, Buf: &r.buf}
		if p.cfg.maxExtension != NoExtension { // lease for the whole allowance (see the package doc)
			r.req.Hold = p.cfg.maxExtension
		}
	}
	if _, ok := idle.(backend.PoolIdleAwaiter); ok {
		r.rest.idleParking = backend.NewParking(r.change)
	}
	if p.cfg.handlerTimeout > 0 {
		r.rest.timeouts = make(map[*timeoutCtx]struct{})
	}
	r.motion.w.Store(uint64(p.cfg.workers) + 1) // each worker and the poll loop start busy
	if p.cfg.registry != nil {
		r.began = p.cfg.clock.Now()
		r.handling = map[*item[T]]struct{}{}
		defer p.cfg.registry.join(r.status, r.cancelJob)()
	}
	p.runMu.Lock()
	p.cur = r
	if p.started != nil {
		close(p.started)
		p.started = nil
	}
	p.runMu.Unlock()
	defer func() {
		p.runMu.Lock()
		p.cur = nil
		p.runMu.Unlock()
		close(r.ended)
	}()

	// The idle watcher: once it has an answer it stops the polling, so
	// that the run drains.
	var watcher sync.WaitGroup
	idleErr := make(chan error, 1) // AwaitIdle's result, sent before polling stops
	if idle != nil {
		r.motion.w.Add(busyOne + watchMoving<<watchShift)
		watcher.Go(func() {
			idleErr <- r.watchIdle(idle)
			r.watchTo(watchMoving, watchOff)
			stopPolling()
		})
	}

	stopExt := make(chan struct{})
	var ext sync.WaitGroup
	ext.Go(func() { r.extendLoop(stopExt) })
	worker := r.worker
	if p.batchHandler != nil {
		worker = r.batchWorker
		r.rest.lingering = make(map[*time.Time]struct{})
	}
	for range p.cfg.workers {
		r.workers.Go(worker)
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
	case r.shut.Load():
		return ErrShutdown
	}
	return fmt.Errorf("poller: await idle: %w", werr)
}

// logf logs at level if the poller has a logger.
func (p *Poller[T]) logf(level slog.Level, msg string, args ...any) {
	if p.cfg.logger != nil {
		p.cfg.logger.Log(context.Background(), level, msg, args...)
	}
}
