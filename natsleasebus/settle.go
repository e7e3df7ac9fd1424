package natsleasebus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// Ack acks the message and waits for the server to confirm it (a double
// ack). A nil error means the server has the ack: the message is not
// delivered again unless the server loses it, which a single server
// killed or crashed within about a tenth of a second may do, whatever its
// sync setting, and three replicas do not (the README's Durability), or a
// delivery made after this lease expired was already out. A
// try that fails with a transient error (a timeout, no responders, as
// while a consumer's leader moves) is retried until the lease's deadline,
// each try bounded by the settle timeout, and a try that was out when the
// client reconnected is made again at once: an ack is idempotent on the
// server, so a retry after a lost reply is harmless. An error that no
// retry can fix (a closed connection) returns at once; either way the
// lease is still held, and the error says how many tries were made. It
// works after the deadline too (one try), as long as this handle has not
// seen the message delivered again — but the server may by then have
// handed it to another handle, and a confirmed late ack then still
// stands; an Ack whose message this handle saw delivered again returns
// ErrLeaseExpired. A lease not held (never issued, already acked) returns
// ErrLeaseNotFound.
func (s *Subscription[T]) Ack(id lease.ID) error {
	h, err := s.take("ack", id, false)
	if err != nil {
		return err
	}
	if err := s.retry(h.deadline, h.msg.DoubleAck); err != nil {
		s.putBack(id, h)
		return fmt.Errorf("ack %v: %w", id, err)
	}
	s.forget(id)
	return nil
}

// AckBatch acks many leases, each as Ack would, with their round trips
// to the server in flight at once rather than one after another. It
// returns nil when every lease was acked, else a *queue.BatchError whose
// Errs[i] is ids[i]'s error (nil for those acked).
func (s *Subscription[T]) AckBatch(ids []lease.ID) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = s.Ack(id) })
	}
	wg.Wait()
	return queue.NewBatchError(errs)
}

// Backoff between the tries of a settling call.
const (
	retryInitial = 10 * time.Millisecond
	retryMax     = 250 * time.Millisecond
)

// retry runs op until it succeeds, fails with an error that is not
// transient, the handle closes, or deadline passes (at least one try, and
// each bounded by the settle timeout). A try that was out when the client
// reconnected is made again at once: its request or reply may be gone
// with the old connection.
func (s *Subscription[T]) retry(deadline time.Time, op func(context.Context) error) error {
	wait := retryInitial
	for tries := 1; ; tries++ {
		now := time.Now()
		conn := s.bus.conn.epoch()
		var err error
		if end := now.Add(s.cfg.settleTimeout); deadline.After(now) && deadline.Before(end.Add(tryGrain)) {
			// Near the lease's deadline: bounded exactly.
			if deadline.Before(end) {
				end = deadline
			}
			ctx, cancel := context.WithDeadline(conn.ctx, end)
			err = op(ctx)
			cancel()
		} else {
			err = op(conn.until(end))
		}
		if err == nil {
			return nil
		}
		if conn.ctx.Err() != nil && time.Now().Before(deadline) && !s.isClosed() {
			wait = retryInitial // a new connection: begin the backoff again
			continue
		}
		if !transient(err) || !time.Now().Add(wait).Before(deadline) {
			if tries > 1 {
				return fmt.Errorf("%d tries: %w", tries, err)
			}
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.closed:
			t.Stop()
			return fmt.Errorf("%d tries, then closed: %w", tries, err)
		}
		wait = min(2*wait, retryMax)
	}
}

// transient reports whether a settling call that failed with err may
// succeed if tried again: its request or reply was lost, or no server
// answered (a consumer whose leader is moving, a reconnecting client).
func transient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, js.ErrNoHeartbeat)
}

// Nack fails the attempt: the message is delivered again after delay
// (NakWithDelay). On the last allowed attempt it is dead-lettered
// (ReasonMaxAttempts) and terminated. It needs a live lease.
func (s *Subscription[T]) Nack(id lease.ID, delay time.Duration) error {
	if delay < 0 {
		return backend.Invalid("Nack: delay %v, must be >= 0", delay)
	}
	return s.fail("nack", id, delay, "nacked")
}

// Fail fails the attempt with cause: the message is delivered again after
// the retry policy's delay for this attempt; on the last allowed attempt
// it is dead-lettered with cause as its LastError, and terminated. It
// needs a live lease.
func (s *Subscription[T]) Fail(id lease.ID, cause error) error {
	text := "failed"
	if cause != nil {
		text = cause.Error()
	}
	h, err := s.peekAttempt(id)
	if err != nil {
		return s.fail("fail", id, 0, text) // reports the error
	}
	return s.fail("fail", id, s.cfg.retry.Delay(h), text)
}

// peekAttempt returns the attempt of a held lease.
func (s *Subscription[T]) peekAttempt(id lease.ID) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.leases.Held(id)
	if !ok {
		return 0, queue.ErrLeaseNotFound
	}
	return h.attempt, nil
}

func (s *Subscription[T]) fail(op string, id lease.ID, delay time.Duration, cause string) error {
	h, err := s.take(op, id, true)
	if err != nil {
		return err
	}
	if s.maxAttempts > 0 && h.attempt >= s.maxAttempts {
		if err := s.deadLetter(h, queue.ReasonMaxAttempts, cause); err != nil {
			s.putBack(id, h)
			return fmt.Errorf("%s %v: %w", op, id, err)
		}
		s.forget(id)
		return nil
	}
	if delay > 0 {
		err = h.msg.NakWithDelay(delay)
	} else {
		err = h.msg.Nak()
	}
	if err != nil {
		s.putBack(id, h)
		return fmt.Errorf("%s %v: %w", op, id, err)
	}
	return nil
}

// Reject dead-letters the message at once (queue.RejectReason of cause:
// ReasonRejected, or ReasonCancelled for a pool's cancelled job; cause as
// its LastError) and terminates it. It needs a live lease.
func (s *Subscription[T]) Reject(id lease.ID, cause error) error {
	h, err := s.take("reject", id, true)
	if err != nil {
		return err
	}
	text := "rejected"
	if cause != nil {
		text = cause.Error()
	}
	if err := s.deadLetter(h, queue.RejectReason(cause), text); err != nil {
		s.putBack(id, h)
		return fmt.Errorf("reject %v: %w", id, err)
	}
	s.forget(id)
	return nil
}

// Extend sets the lease's deadline to now + timeout, for any timeout > 0.
// JetStream's InProgress can only restart the server's timer at the
// visibility timeout (AckWait), so the handle emulates the rest: for a
// longer timeout it sends InProgress again before each AckWait runs out,
// until the deadline (if the handle closes or its process dies, the
// message comes back within an AckWait); for a shorter one it hands the
// message back (Nak) at the deadline, so it is visible again then, as an
// expired lease is. It needs a live lease.
func (s *Subscription[T]) Extend(id lease.ID, timeout time.Duration) error {
	if timeout <= 0 {
		return backend.Invalid("Extend: timeout %v, must be > 0", timeout)
	}
	if s.isClosed() {
		return s.errClosed("extend")
	}
	s.mu.Lock()
	h, ok := s.leases.Held(id)
	if !ok {
		err := s.unknownLocked("extend", id)
		s.mu.Unlock()
		return err
	}
	now := time.Now()
	if !now.Before(h.deadline) {
		s.mu.Unlock()
		return fmt.Errorf("extend %v: %w", id, queue.ErrLeaseExpired)
	}
	h.deadline, h.serverDeadline = now.Add(timeout), now.Add(s.cfg.vis)
	s.watch[id] = struct{}{}
	s.mu.Unlock()
	s.wake()
	if err := h.msg.InProgress(); err != nil {
		return fmt.Errorf("extend %v: %w", id, err)
	}
	return nil
}

// Release hands the message back unprocessed, visible at once, without
// spending its attempt: the next delivery has the same Attempt, as in the
// in-memory broker. JetStream counts every delivery, so the handle
// emulates it: it republishes the message to the subscription's own
// subject with the attempts spent so far in a header
// (headerAttemptsSpent), its ID, headers and publish time kept, then
// terminates this delivery (both confirmed, and retried like Ack; the
// copy carries a Nats-Msg-Id, so a retried Release makes one copy). The
// message goes to the back of the queue. It needs a live lease.
func (s *Subscription[T]) Release(id lease.ID) error {
	h, err := s.take("release", id, true)
	if err != nil {
		return err
	}
	m := nats.NewMsg(s.bus.subscriptionSubject(s.topic, s.name))
	m.Data = h.msg.Data()
	for k, vs := range h.msg.Headers() {
		if !isReserved(k) {
			m.Header[k] = vs
		}
	}
	m.Header.Set(headerAttemptsSpent, strconv.Itoa(h.attempt-1))
	m.Header.Set(backend.HeaderTopic, h.topic)
	if ttl := h.msg.Headers().Get(headerTTL); ttl != "" {
		m.Header.Set(headerTTL, ttl)
	}
	m.Header.Set(headerPublishedAt, h.published.Format(time.RFC3339Nano))
	m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("release.%s.%s.%s", s.bus.cfg.stream, s.durable, id)) // a retry of this Release is stored once
	if err := s.retry(h.deadline, func(ctx context.Context) error {
		_, err := s.bus.js.PublishMsg(ctx, m)
		return err
	}); err != nil {
		s.putBack(id, h)
		return fmt.Errorf("release %v: %w", id, err)
	}
	if err := s.term(h, "released"); err != nil {
		// The copy is out: this delivery would come back too. A second
		// Release publishes no second copy and terminates it.
		s.putBack(id, h)
		return fmt.Errorf("release %v: republished, not terminated: %w", id, err)
	}
	s.forget(id)
	return nil
}
