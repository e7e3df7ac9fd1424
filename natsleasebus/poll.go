package natsleasebus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Poll leases up to n messages, waiting until at least one arrives, ctx
// is done (its error is returned) or the handle is closed (an error
// matching queue.ErrClosed). It takes what is there at once (a no-wait
// pull of n); when there is nothing it waits for the first message with
// pulls that wait at most the poll slice on the server, checking ctx and
// Close between them, so a pull is never abandoned with messages on their
// way. A message whose payload cannot be decoded is dead-lettered
// (ReasonRejected) and not returned.
func (s *Subscription[T]) Poll(ctx context.Context, n int) ([]queue.Delivery[T], error) {
	return s.poll(ctx, n, s.cfg.vis)
}

// PollWithVisibility is Poll with this call's own visibility timeout in
// place of the subscription's (SQS ReceiveMessage's VisibilityTimeout),
// emulated as Extend is: the handle keeps a longer lease alive past the
// consumer's AckWait, and hands a shorter one back at its deadline.
func (s *Subscription[T]) PollWithVisibility(ctx context.Context, n int, visibility time.Duration) ([]queue.Delivery[T], error) {
	if visibility <= 0 {
		return nil, backend.Invalid("PollWithVisibility: visibility %v, must be > 0", visibility)
	}
	return s.poll(ctx, n, visibility)
}

// TryPoll is Poll that does not wait for messages: what the server has for
// the subscription now, up to n (one no-wait pull, bounded by the settle
// timeout), or nothing — also for n < 1, after Close, or on an error.
func (s *Subscription[T]) TryPoll(n int) []queue.Delivery[T] {
	if n < 1 || s.isClosed() {
		return nil
	}
	ds, _ := s.fetch(n, s.cfg.vis, func() (js.MessageBatch, error) { return s.cons.FetchNoWait(n) })
	return ds
}

func (s *Subscription[T]) poll(ctx context.Context, n int, vis time.Duration) ([]queue.Delivery[T], error) {
	if n < 1 {
		return nil, backend.Invalid("Poll: n = %d, must be >= 1", n)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, s.errClosed("poll")
	}
	// What is there now, in one round trip.
	out, err := s.fetch(n, vis, func() (js.MessageBatch, error) { return s.cons.FetchNoWait(n) })
	if len(out) > 0 || err != nil {
		return out, err
	}
	for {
		if s.isClosed() {
			return nil, s.errClosed("poll")
		}
		wait, err := slice(ctx, s.cfg.pollSlice)
		if err != nil {
			return nil, err
		}
		// Wait for the first; a request for n would wait for n.
		out, err := s.fetch(1, vis, func() (js.MessageBatch, error) { return s.cons.Fetch(1, js.FetchMaxWait(wait)) })
		if len(out) > 0 || err != nil {
			return out, err
		}
	}
}

// fetch leases the messages of one pull request.
func (s *Subscription[T]) fetch(n int, vis time.Duration, pull func() (js.MessageBatch, error)) ([]queue.Delivery[T], error) {
	batch, err := pull()
	if err != nil {
		return nil, fmt.Errorf("poll %s/%s: %w", s.topic, s.name, err)
	}
	out := make([]queue.Delivery[T], 0, n)
	for m := range batch.Messages() {
		if d, ok := s.lease(m, vis); ok {
			out = append(out, d)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, js.ErrNoMessages) {
		return nil, fmt.Errorf("poll %s/%s: %w", s.topic, s.name, err)
	}
	return nil, nil
}
