package sqsleasebus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// Ack deletes the message (DeleteMessage with the delivery's receipt
// handle; Acks made while another's delete is in flight go together in
// one DeleteMessageBatch, each with its own result). An Ack after the deadline still deletes the message on a
// standard queue unless it has been received again (SQS honours the
// latest receipt); on a FIFO queue the receipt expires with the deadline
// (queue.ErrLeaseExpired). A lease this Subscription has since seen
// superseded (the message came back to it) returns queue.ErrLeaseExpired
// and changes nothing; a second Ack, or a lease it never issued,
// queue.ErrLeaseNotFound.
func (s *Subscription[T]) Ack(id lease.ID) error {
	h, err := s.take(id, "ack", false)
	if err != nil {
		return err
	}
	return s.acked(id, h, s.deleteAck(h.m.ReceiptHandle))
}

// acked ends an Ack of id, held as h, whose delete returned err.
func (s *Subscription[T]) acked(id lease.ID, h *held, err error) error {
	switch {
	case err == nil:
		s.forget(id, h)
		return nil
	case errGone(err):
		s.forget(id, h)
		return fmt.Errorf("sqsleasebus: ack %v: %w", id, queue.ErrLeaseNotFound)
	case strings.Contains(err.Error(), "expired"): // a FIFO queue's receipt past its visibility
		s.retire(id, h)
		return fmt.Errorf("sqsleasebus: ack %v: %w: %v", id, queue.ErrLeaseExpired, err)
	}
	s.restore(id, h)
	return fmt.Errorf("sqsleasebus: ack %v: %w", id, err)
}

// Nack makes the message visible again after delay (ChangeMessageVisibility
// to delay, rounded up to whole seconds; 0 is at once). The receive was
// counted: the next delivery's Attempt is one more, and a Nack of the last
// attempt leaves SQS to move the message to the dead-letter queue at its
// next receive, with no error kept (Fail keeps it). delay must be in
// [0, 12h] (queue.ErrInvalidArgument).
func (s *Subscription[T]) Nack(id lease.ID, delay time.Duration) error {
	if delay < 0 || delay > maxVisibility {
		return backend.Invalid("Nack: delay %v, must be in [0, 12h]", delay)
	}
	return s.settleVisible(id, "nack", delay)
}

// Release hands the message back at once (ChangeMessageVisibility to 0).
// SQS has counted the receive, so unlike the broker's Release this spends
// an attempt: the next delivery's Attempt is one more, and a released
// last attempt is moved to the dead-letter queue at its next receive.
func (s *Subscription[T]) Release(id lease.ID) error {
	return s.settleVisible(id, "release", 0)
}

// Fail reports a failure: the message is visible again after the retry
// policy's delay for its attempt (WithRetry), or, on its last attempt,
// is moved to the dead-letter queue now with cause kept as its last error
// (reason max-attempts).
func (s *Subscription[T]) Fail(id lease.ID, cause error) error {
	s.mu.Lock()
	h, _ := s.leases.Held(id)
	s.mu.Unlock()
	attempt := 1
	if h != nil {
		attempt = h.attempt
	}
	return s.FailAfter(id, s.cfg.retry.Delay(attempt), cause)
}

// FailAfter is Fail with the caller's delay (backend.DelayFailer), in
// [0, 12h].
func (s *Subscription[T]) FailAfter(id lease.ID, delay time.Duration, cause error) error {
	if delay < 0 || delay > maxVisibility {
		return backend.Invalid("FailAfter: delay %v, must be in [0, 12h]", delay)
	}
	s.mu.Lock()
	h, _ := s.leases.Held(id)
	maxA := s.attrs.maxReceive
	s.mu.Unlock()
	if h != nil && maxA > 0 && h.attempt >= maxA {
		return s.deadLetter(id, "fail", queue.ReasonMaxAttempts, errText(cause))
	}
	return s.settleVisible(id, "fail", delay)
}

// Reject moves the message to the queue's dead-letter queue now, with
// reason queue.RejectReason(cause) (rejected, or cancelled for a pool's
// cancelled job) and cause as its last error (backend.Rejecter). A queue
// without a RedrivePolicy has no dead-letter queue: Reject then returns an
// error matching ErrUnsupported and the lease stays.
func (s *Subscription[T]) Reject(id lease.ID, cause error) error {
	return s.deadLetter(id, "reject", queue.RejectReason(cause), errText(cause))
}

// Extend sets the lease's deadline to timeout from now
// (ChangeMessageVisibility; whole seconds, rounded up). timeout must be in
// (0, 12h], and SQS refuses one that would take the message past 12 hours
// from its first receive (queue.ErrInvalidArgument). A lease past its
// deadline, or superseded, returns queue.ErrLeaseExpired.
func (s *Subscription[T]) Extend(id lease.ID, timeout time.Duration) error {
	if timeout <= 0 || timeout > maxVisibility {
		return backend.Invalid("Extend: timeout %v, must be in (0, 12h]", timeout)
	}
	h, err := s.current(id, "extend")
	if err != nil {
		return err
	}
	now := s.cfg.clk.Now()
	if err := s.changeVisibility(h, timeout); err != nil {
		if errNotInflight(err) {
			s.retire(id, h)
			return fmt.Errorf("sqsleasebus: extend %v: %w: %v", id, queue.ErrLeaseExpired, err)
		}
		return fmt.Errorf("sqsleasebus: extend %v: %w", id, err)
	}
	s.mu.Lock()
	if cur, _ := s.leases.Held(id); cur == h {
		h.deadline = now.Add(seconds(timeout))
		if h.stopT != nil {
			h.stopTimer()
			s.watchLocked(id, h)
		}
	}
	s.mu.Unlock()
	return nil
}

// settleVisible ends the lease by making the message visible after d.
func (s *Subscription[T]) settleVisible(id lease.ID, op string, d time.Duration) error {
	h, err := s.take(id, op, true)
	if err != nil {
		return err
	}
	if left := h.first.Add(maxVisibility).Sub(s.cfg.clk.Now()); d > left {
		d = max(left.Truncate(time.Second), 0) // SQS's 12 hours from the first receive
	}
	switch err := s.changeVisibility(h, d); {
	case err == nil:
		s.retire(id, h)
		return nil
	case errNotInflight(err) || errGone(err):
		s.retire(id, h)
		return fmt.Errorf("sqsleasebus: %s %v: %w: %v", op, id, queue.ErrLeaseExpired, err)
	default:
		s.restore(id, h)
		return fmt.Errorf("sqsleasebus: %s %v: %w", op, id, err)
	}
}

func (s *Subscription[T]) changeVisibility(h *held, d time.Duration) error {
	ctx, cancel := s.settleCtx()
	defer cancel()
	_, err := s.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(s.url), ReceiptHandle: h.m.ReceiptHandle, VisibilityTimeout: secs(d),
	})
	return err
}

func errNotInflight(err error) bool {
	var ni *types.MessageNotInflight
	return errors.As(err, &ni) || strings.HasSuffix(apiCode(err), "MessageNotInflight")
}

// current returns the lease id if it is current: held and not past its
// deadline.
func (s *Subscription[T]) current(id lease.ID, op string) (*held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookupLocked(id, op, true)
}

// take takes the lease id out of the held ones for a settle; restore puts
// it back if the settle did not reach SQS. live: a lease past its
// deadline is refused (all but Ack).
func (s *Subscription[T]) take(id lease.ID, op string, live bool) (*held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.lookupLocked(id, op, live)
	if err != nil {
		return nil, err
	}
	s.leases.Take(id)
	h.stopTimer()
	return h, nil
}

func (s *Subscription[T]) lookupLocked(id lease.ID, op string, live bool) (*held, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("sqsleasebus: %s %v: %w", op, id, queue.ErrClosed)
	}
	h, _ := s.leases.Held(id)
	switch {
	case h != nil && live && !s.cfg.clk.Now().Before(h.deadline):
		return nil, fmt.Errorf("sqsleasebus: %s %v: %w (its deadline %v has passed)", op, id, queue.ErrLeaseExpired, h.deadline)
	case h != nil:
		return h, nil
	case s.retired.has(id):
		return nil, fmt.Errorf("sqsleasebus: %s %v: %w", op, id, queue.ErrLeaseExpired)
	}
	return nil, fmt.Errorf("sqsleasebus: %s %v: %w", op, id, queue.ErrLeaseNotFound)
}

// restore puts back a lease whose settle did not reach SQS, unless the
// message has been received again here since.
func (s *Subscription[T]) restore(id lease.ID, h *held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isClosed() || !s.leases.PutBack(id, h) {
		return
	}
	if maxA := s.attrs.maxReceive; maxA > 0 && h.attempt >= maxA {
		s.watchLocked(id, h)
	}
}

// forget drops a lease whose message is gone.
func (s *Subscription[T]) forget(id lease.ID, h *held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases.ForgetIf(id, h.id)
}

// retire ends a lease whose message stays in the queue: later calls with
// it return queue.ErrLeaseExpired (while the bounded memory of retired
// leases has it; then queue.ErrLeaseNotFound).
func (s *Subscription[T]) retire(id lease.ID, h *held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retireLocked(id, h)
}

func (s *Subscription[T]) retireLocked(id lease.ID, h *held) {
	h.stopTimer()
	if cur, _ := s.leases.Held(id); cur == h {
		s.leases.Take(id)
	}
	s.leases.ForgetIf(id, h.id)
	s.retired.add(id)
}

// settleCtx bounds one settle round trip.
func (s *Subscription[T]) settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.settle)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
