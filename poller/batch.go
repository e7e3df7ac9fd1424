package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// BatchHandler processes a batch of deliveries in one call (a bulk
// insert, one API call for many items) and says what happened to each.
//
// It returns either one error for all (err: every delivery settles as a
// Handler's error would settle it, a directive such as RetryAfter or
// GiveUp included), or an outcome per delivery (outcomes, len(ds) long,
// outcomes[i] for ds[i]: nil acks, an error fails with the retry policy,
// RetryAfter nacks with a delay, GiveUp dead-letters, SlowDown pauses the
// pool and hands the message back unspent). nil and nil acks every
// delivery. outcomes of another length than ds fail every delivery with
// an error matching ErrBatchOutcomes. A panic fails every delivery with a
// *PanicError, as a Handler's does.
//
// The call owns ds until it returns, and the pool reuses it then: copy
// what you keep. A delivery's lease is kept, and extended, while the call
// runs, as a single handler's is.
type BatchHandler[T any] func(ctx context.Context, ds []queue.Delivery[T]) (outcomes []error, err error)

// ErrBatchOutcomes is the failure of every delivery of a batch whose
// handler returned outcomes of another length than the batch.
var ErrBatchOutcomes = errors.New("poller: batch handler returned outcomes of the wrong length")

// Defaults of a batch pool (NewBatch).
const (
	// DefaultBatchMax is the most deliveries a BatchHandler call gets by
	// default (see WithBatchMax).
	DefaultBatchMax = 100
	// maxBatchMax bounds WithBatchMax: a batch's leases fit the pool.
	maxBatchMax = 1 << 14
)

// WithBatchMax sets a batch pool's batches (NewBatch; New refuses it): at
// most n deliveries a call (default DefaultBatchMax), and how long, on the
// pool's clock, a batch waits to fill once it has its first delivery
// (default 0: a call takes what the pool holds when a worker is free,
// without waiting). A batch is handed to the handler when it is full,
// when linger has passed since its first delivery, or never, if the pool
// drains first (its deliveries are then released unspent). On a mock
// clock, with one worker (the default), the batches are exact: the test
// decides which messages share a call by when it publishes and moves the
// clock past linger, waiting for AwaitQuiet before each move (AwaitQuiet
// counts a batch waiting to fill as at rest only while its linger has not
// passed). With more workers, which worker takes which delivery is the
// goroutines' order. n must be in [1, 16384] and linger >= 0.
func WithBatchMax(n int, linger time.Duration) Option {
	return Option{func(c *config) {
		if n < 1 || n > maxBatchMax || linger < 0 {
			c.fail(backend.Invalid("WithBatchMax(%d, %v): n must be in [1, %d] and linger >= 0", n, linger, maxBatchMax))
			return
		}
		c.batchMax, c.linger, c.batchSet = n, linger, true
	}}
}

// NewBatch returns a Poller that runs h on batches of src's deliveries
// (see BatchHandler and WithBatchMax). It takes every option of New:
// WithWorkers is how many batches run at once (default 1); WithBatch, how
// many one Poll asks for (default: a batch); WithMaxOutstanding, the
// leases held at once (default: a batch per worker, and over a remote
// source two Polls more); WithRate and a SlowDown count messages, not
// calls; WithHandlerTimeout bounds a call; Events, Stats and a Registry
// report each message of a batch as a single handler's, with the call's
// size (Event.Batch, Handling.Batch). The deliveries a
// call acks are acked in one AckBatch when src is a backend.BatchAcker
// (every leasebus backend is), the rest one by one. A nil src or h,
// or an invalid option, is an error matching queue.ErrInvalidArgument.
func NewBatch[T any](src Source[T], h BatchHandler[T], opts ...Option) (*Poller[T], error) {
	if h == nil {
		return nil, backend.Invalid("poller.NewBatch: nil handler")
	}
	return newPoller(src, nil, h, opts)
}

// batchWorker is worker for a batch pool: it takes a first delivery, then
// what more the pool holds, waiting up to the linger for a full batch,
// and runs the batch handler on them.
func (r *run[T]) batchWorker() {
	p := r.p
	items := make([]*item[T], 0, p.cfg.batchMax)
	buf := newBatchBuf[T](p.cfg.batchMax)
	for {
		r.move(idleOne - busyOne)
		it, ok := <-r.work
		if !ok {
			r.move(-idleOne)
			return
		}
		r.move(busyOne - idleOne - queuedOne)
		r.rest.gathered.Add(1)
		items = append(items[:0], it)
		items, ok = r.gather(items)
		if !ok || r.stopping.Load() || r.runCtx.Err() != nil || r.ctx.Err() != nil || r.paused() {
			r.abandon(items)
			if !ok {
				r.move(-busyOne)
				return // the work channel closed: the drain releases the rest
			}
			continue
		}
		r.processGroups(items, buf)
	}
}

// gather adds to items what the work channel holds now, up to a batch,
// and then waits up to the linger, from now, for the rest. It reports
// false if the work channel closed meanwhile. The worker is busy when it
// is called and when it returns.
func (r *run[T]) gather(items []*item[T]) ([]*item[T], bool) {
	p := r.p
	take := func(it *item[T]) {
		r.rest.gathered.Add(1)
		r.move(-queuedOne)
		items = append(items, it)
	}
	for len(items) < p.cfg.batchMax {
		select {
		case it, ok := <-r.work:
			if !ok {
				return items, false
			}
			take(it)
			continue
		default:
		}
		break
	}
	if len(items) == p.cfg.batchMax || p.cfg.linger <= 0 {
		return items, true
	}
	at := p.cfg.clock.Now().Add(p.cfg.linger)
	t := backend.At(p.cfg.clock, at) // armed before the worker counts as waiting: AwaitQuiet reads it
	defer t.Stop()
	key := &at
	r.rest.mu.Lock()
	r.rest.lingering[key] = struct{}{}
	r.rest.mu.Unlock()
	defer func() {
		r.rest.mu.Lock()
		delete(r.rest.lingering, key)
		r.rest.mu.Unlock()
		r.change()
	}()
	for len(items) < p.cfg.batchMax {
		r.move(idleOne - busyOne) // waiting, as an idle worker: what is queued is its to take
		select {
		case it, ok := <-r.work:
			if !ok {
				r.move(busyOne - idleOne)
				return items, false
			}
			r.move(busyOne - idleOne)
			take(it)
		case <-t.C:
			r.move(busyOne - idleOne)
			return items, true
		case <-r.ctx.Done():
			r.move(busyOne - idleOne)
			return items, true
		}
	}
	return items, true
}

// processBatch runs the batch handler on items and settles each lease by
// its outcome: those acked in one call when the source is a
// backend.BatchAcker, first, and then the rest one by one.
func (r *run[T]) processBatch(items []*item[T], buf *batchBuf[T]) {
	p := r.p
	n := int64(len(items))
	ds := buf.ds[:0]
	for _, it := range items {
		ds = append(ds, it.d)
		it.batch = len(items)
	}
	defer clear(ds) // the payloads go with the call
	c := r.newCall()
	p.running.Add(n)
	if r.handling != nil {
		for _, it := range items {
			r.starting(it, c.cancel)
		}
	}
	r.rest.gathered.Add(-n)
	r.move(-busyOne) // at rest while the handler runs (see AwaitQuiet)
	outs, err, returned := []error(nil), error(errGoexit), false
	type cancelled struct {
		as    CancelAs
		cause error
	}
	var cancels []cancelled // per item, what Cancel chose (a pool WithRegistry)
	defer func() {
		if r.handling != nil {
			cancels = make([]cancelled, len(items))
			for i, it := range items {
				cancels[i].as, cancels[i].cause = r.stopped(it)
			}
		}
		r.move(busyOne)
		p.running.Add(-n)
		r.endCall(c)
		if err == nil && outs != nil && len(outs) != len(items) {
			err = fmt.Errorf("%w: %d outcomes for %d deliveries", ErrBatchOutcomes, len(outs), len(items))
		}
		outcome := func(i int) error {
			herr := err
			if herr == nil && outs != nil {
				herr = outs[i]
			}
			if cancels != nil && cancels[i].as != 0 {
				herr = cancelledAs(herr, cancels[i].as, cancels[i].cause)
			}
			return herr
		}
		if p.batchAcker != nil {
			acks := buf.acks[:0] // taken out of items
			for i, it := range items {
				if outcome(i) == nil {
					acks = append(acks, it)
					items[i] = nil
				}
			}
			if len(acks) > 0 {
				r.ackAll(acks, buf)
			}
		}
		for i, it := range items {
			if it != nil {
				r.finish(it, outcome(i))
			}
		}
		if !returned {
			r.workers.Go(r.batchWorker)
		}
	}()
	outs, err = r.invokeBatch(c.ctx, ds)
	returned = true
}

// invokeBatch calls the batch handler, turning a panic into a
// *PanicError for every delivery.
func (r *run[T]) invokeBatch(ctx context.Context, ds []queue.Delivery[T]) (outs []error, err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			r.p.panics.Add(1)
			r.p.logf(slog.LevelError, "poller: batch handler panicked", "batch", len(ds), "panic", v, "stack", string(pe.Stack))
			outs, err = nil, pe
		}
	}()
	return r.p.batchHandler(ctx, ds)
}
