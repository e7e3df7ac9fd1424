package poller

import (
	"log/slog"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Defaults of the options' zero values.
const (
	// defaultDrainTimeout is how long a drain lets running handlers finish
	// before it cancels their contexts (see WithDrainTimeout).
	defaultDrainTimeout = 30 * time.Second
	// defaultMaxExtension is how long after its receipt a lease is kept at
	// most (see WithExtension), as Cloud Pub/Sub's MaxExtension.
	defaultMaxExtension = time.Hour
)

// NoExtension, as WithExtension's limit, turns automatic lease extension off:
// a lease lasts the source's visibility timeout and no longer.
const NoExtension time.Duration = -1

// Option configures a Poller in New: an opaque value, made by the With
// functions. Option types are not generic: a caller never writes a type
// argument. An invalid value (or the zero Option) makes New return an
// error matching queue.ErrInvalidArgument.
type Option struct{ apply func(*config) }

type config struct {
	workers        int
	batch          int
	maxOutstanding int
	handlerTimeout time.Duration
	drainTimeout   time.Duration
	margin         time.Duration // 0: a fifth of the lease, see WithExtension
	maxExtension   time.Duration // NoExtension: off
	clock          clock.Clock
	logger         *slog.Logger
	observers      []any         // each a func(Event[T]), checked against T in New
	rate           queue.Rate    // WithRate; zero: none
	registry       *Registry     // WithRegistry; nil: none
	batchMax       int           // WithBatchMax; 0: DefaultBatchMax (NewBatch only)
	linger         time.Duration // WithBatchMax's
	batchSet       bool          // WithBatchMax was given
	batchByKey     bool          // WithBatchByKey (NewBatch only)
	remote         bool          // the source is a backend.Remote: a Poll is a round trip
	busyLeases     int           // the leases that keep every worker busy: workers, times a batch for NewBatch
	name           string        // WithRegistry's
	err            error
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithWorkers sets how many handlers may run at once (default 1). n must
// be >= 0 and at most 262,144 (1<<18); 0 means the default.
func WithWorkers(n int) Option {
	return Option{func(c *config) {
		if n < 0 {
			c.fail(backend.Invalid("WithWorkers: %d, must be >= 1 (or 0 for the default)", n))
			return
		}
		c.workers = n
	}}
}

// WithBatch sets the most messages one Poll asks for (default: the number
// of workers). A Poll never asks for more than there is room for (see
// WithMaxOutstanding). n must be >= 0; 0 means the default.
func WithBatch(n int) Option {
	return Option{func(c *config) {
		if n < 0 {
			c.fail(backend.Invalid("WithBatch: %d, must be >= 1 (or 0 for the default)", n))
			return
		}
		c.batch = n
	}}
}

// WithMaxOutstanding bounds the leases the poller holds at once, running
// or waiting for a worker. By default it is the number of workers, so that
// nothing is leased before a worker is free to start it. Over a remote
// source (one whose Remote method reports true, see backend.Remote, as a
// JetStream subscription's does) it is the workers plus two batches
// (WithBatch): while one Poll's round trip runs, the batch before it waits
// for the workers, so they do not wait for the round trip. There, while
// the leases held keep every worker busy and a batch more waiting, the
// pool polls only once a batch of room is free, a batch at a time (as a
// nats.go drain Fetches), not for the lease or two each settle frees: a
// pool over a remote source holds between the workers plus one batch and
// this bound. Give the worker count to lease only what a free worker
// starts there too: what a pool holds, other consumers of the
// subscription do not get.
//
// A lease whose handler has returned and whose Ack (or dead-lettering) is
// on its way no longer counts: the next Poll overlaps that call (see the
// package doc). An n above the worker count prefetches: up to n - workers
// messages wait in a local buffer, their leases kept like those of running
// handlers, and a drain releases them unspent. n must be 0 (the default)
// or at least the number of workers, and at most 262,144 (1<<18).
func WithMaxOutstanding(n int) Option {
	return Option{func(c *config) {
		if n < 0 {
			c.fail(backend.Invalid("WithMaxOutstanding: %d, must be >= the number of workers (or 0 for the default)", n))
			return
		}
		c.maxOutstanding = n
	}}
}

// WithHandlerTimeout gives every handler call a context whose deadline is
// d after the call starts, measured on the poller's clock (default 0: no
// deadline). When it passes, the context is cancelled and its Err is
// context.DeadlineExceeded. d must be >= 0.
func WithHandlerTimeout(d time.Duration) Option {
	return Option{func(c *config) {
		if d < 0 {
			c.fail(backend.Invalid("WithHandlerTimeout: %v, must be >= 0", d))
			return
		}
		c.handlerTimeout = d
	}}
}

// WithExtension tunes how long the poller keeps the leases it holds. A
// *broker.Subscription leases for limit at once where that is longer than
// its visibility timeout (see the package doc), and margin does not
// apply. Another source's lease is extended when the
// clock reaches its deadline less margin, each time by the lease's
// original length (its Deadline less the time it was received), but never
// past limit after its receipt. Past the limit a lease is left to lapse,
// so that a stuck handler lets its message go to another consumer.
//
// margin 0 means a fifth of the lease length, but at least the lesser of
// one second and half the lease; a margin not shorter than the lease
// counts as half of it. limit 0 means one hour;
// NoExtension turns extension off. Other negative values are invalid.
func WithExtension(margin, limit time.Duration) Option {
	return Option{func(c *config) {
		if margin < 0 {
			c.fail(backend.Invalid("WithExtension: margin %v, must be >= 0", margin))
			return
		}
		if limit < 0 && limit != NoExtension {
			c.fail(backend.Invalid("WithExtension: limit %v, must be >= 0 or NoExtension", limit))
			return
		}
		c.margin, c.maxExtension = margin, limit
	}}
}

// WithDrainTimeout sets how long a drain, once Run's context is done, lets
// running handlers finish before it cancels their contexts (default
// 30s), measured on the poller's clock. d must be
// >= 0; 0 means the default.
func WithDrainTimeout(d time.Duration) Option {
	return Option{func(c *config) {
		if d < 0 {
			c.fail(backend.Invalid("WithDrainTimeout: %v, must be >= 0", d))
			return
		}
		c.drainTimeout = d
	}}
}

// WithClock sets the clock behind every timer of the poller: lease
// extension, handler timeouts, drain timeout and error backoff. It must be
// the clock of the source, since lease deadlines come from there. The
// default is the source's own clock when the source reports one through a
// Config() queue.Config method (a *broker.Subscription does) or a Clock
// method (backend.Clocked, as an SQS subscription), else the real clock.
// nil is invalid.
func WithClock(clk clock.Clock) Option {
	return Option{func(c *config) {
		if clk == nil {
			c.fail(backend.Invalid("WithClock: nil clock"))
			return
		}
		c.clock = clk
	}}
}

// WithLogger makes the poller log what goes wrong: source errors at Warn,
// handler panics (with their stack) at Error, a drain that times out at
// Warn. nil, the default, logs nothing.
func WithLogger(l *slog.Logger) Option {
	return Option{func(c *config) { c.logger = l }}
}

// WithObserver makes the poller call f with every outcome of every message
// it holds (see Event). f runs on the poller's goroutines, with no lock
// held, possibly concurrently with itself: it must be safe for concurrent
// use, and a slow f slows the poller. T is inferred from f and must be the
// poller's payload type: New reports a mismatch as an invalid argument.
// Several WithObserver add up: each observer sees every event, in the
// order given (so an instrumentation's observer and your own coexist). A
// nil f adds nothing; by default nothing observes.
func WithObserver[T any](f func(Event[T])) Option {
	return Option{func(c *config) {
		if f != nil {
			c.observers = append(c.observers, f)
		}
	}}
}
