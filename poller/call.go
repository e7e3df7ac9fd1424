package poller

import (
	"context"

	"github.com/benbjohnson/clock"
)

// call is the context of one handler call (a batch handler's too):
// cancellable when the pool is WithRegistry (Registry.Cancel) or has a
// handler timeout, and otherwise the run's handlers' own, at no cost.
type call struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc // nil: ctx is r.hctx
	tc      *timeoutCtx             // the handler timeout's; nil: none
	timeout *clock.Timer
}

// newCall returns the context of a handler call about to start. Its
// timeout is armed here, before the handler starts, so before anything
// the handler lets a test do: a mock's Add that reaches the deadline
// finds it armed. (Armed by another goroutine, it could land after an
// Add had looked for due timers and before it moved its time, and then
// fire only at the next move.) Cancelling never blocks, and a second tick
// of a mock timer is harmless.
func (r *run[T]) newCall() call {
	p := r.p
	c := call{ctx: r.hctx}
	if r.handling == nil && p.cfg.handlerTimeout <= 0 {
		return c
	}
	c.ctx, c.cancel = context.WithCancelCause(r.hctx)
	if p.cfg.handlerTimeout > 0 {
		tc := &timeoutCtx{Context: c.ctx, deadline: p.cfg.clock.Now().Add(p.cfg.handlerTimeout)}
		c.ctx, c.tc = tc, tc
		r.rest.mu.Lock()
		r.rest.timeouts[tc] = struct{}{}
		r.rest.mu.Unlock()
		cancel := c.cancel
		c.timeout = p.cfg.clock.AfterFunc(p.cfg.handlerTimeout, func() {
			cancel(context.DeadlineExceeded)
			r.timedOut(tc)
		})
	}
	return c
}

// endCall stops the call's timeout and cancels its context, once its
// handler has returned.
func (r *run[T]) endCall(c call) {
	if c.timeout != nil {
		c.timeout.Stop()
		r.timedOut(c.tc)
	}
	if c.cancel != nil {
		c.cancel(nil)
	}
}
