package poller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// directive is a handler error that tells the poller how to settle: the
// first one found in the error's chain wins.
type directive interface {
	error
	directive()
}

// retryError is RetryAfter's error.
type retryError struct {
	delay time.Duration
	err   error
}

func (e *retryError) directive() {}

func (e *retryError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("retry after %v", e.delay)
	}
	return e.err.Error()
}

func (e *retryError) Unwrap() error { return e.err }

// RetryAfter returns an error with which a handler asks for its message to
// be delivered again after d, rather than after the source's retry
// backoff: the poller settles the lease with FailAfter(id, d, err) on a
// source that has it (a backend.DelayFailer: a *broker.Subscription is one), else
// with Nack(id, d) (a negative d counts as 0). The attempt is spent, so on
// the last allowed attempt the source dead-letters the message instead,
// with err as its LastError where FailAfter carried it (Nack cannot; the
// poller hands err to the observer either way). Its Error is
// err's (or "retry after d" for a nil err), and it wraps err, so
// RetryAfter(d, err) may itself be wrapped with %w.
func RetryAfter(d time.Duration, err error) error {
	return &retryError{delay: max(d, 0), err: err}
}

// giveUpError is GiveUp's error.
type giveUpError struct{ err error }

func (e *giveUpError) directive() {}

func (e *giveUpError) Error() string {
	if e.err == nil {
		return "gave up"
	}
	return e.err.Error()
}

func (e *giveUpError) Unwrap() error { return e.err }

// GiveUp returns an error with which a handler asks for its message to be
// dead-lettered at once, whatever attempts remain: a poison message that
// no retry will fix. The poller settles the lease with Reject(id, err) when
// the source implements backend.Rejecter (a *broker.Subscription does), and the
// dead letter keeps the handler's error text as its LastError. A source
// without Reject gets Fail(id, err) instead: the message is retried as for
// any error until the source runs out of attempts. Its Error is err's (or
// "gave up" for a nil err), and it wraps err, so GiveUp(err) may itself be
// wrapped with %w.
func GiveUp(err error) error { return &giveUpError{err: err} }

// PanicError is the error a handler's panic turns into: the poller
// recovers the panic and fails the lease with a *PanicError, so the
// message is retried and, when its attempts run out, dead-lettered with
// the panic value in its LastError. It is queue.PanicError, which a
// schedule's job's panic turns into too.
type PanicError = queue.PanicError

// errGoexit is the failure of a handler that called runtime.Goexit (for
// example t.FailNow in a test).
var errGoexit = errors.New("poller: handler called runtime.Goexit")

// Idempotent wraps h so that a message already processed successfully is
// acked without running h again: it runs h through d.Do, keyed by the
// message ID, and a duplicate (a redelivery after a success whose Ack was
// lost, for example because the lease lapsed) returns nil at once. A
// message being processed by another worker right now makes it return
// ErrInProgress, which fails the attempt: by the next delivery the
// first one has finished. If d or h is nil it returns nil, which New
// reports as an invalid argument (a nil handler).
func Idempotent[T any](d *Deduper, h Handler[T]) Handler[T] {
	if d == nil || h == nil {
		return nil
	}
	return func(ctx context.Context, dl queue.Delivery[T]) error {
		_, err := d.Do(dl.ID, func() error { return h(ctx, dl) })
		return err
	}
}
