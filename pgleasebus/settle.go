package pgleasebus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// acker coalesces concurrent Acks: up to maxAckSenders DELETEs are out at
// once, and the Acks that come while they are wait and go together in
// the next, each with its own result (group commit; the server commits
// the DELETEs out at once with one flush of its log).
type acker struct {
	s       func(ids []lease.ID) []error // sends one batch
	mu      sync.Mutex
	senders int
	queue   []ackReq
}

type ackReq struct {
	id   lease.ID
	done chan error
}

// maxAckBatch bounds one DELETE's leases; maxAckSenders, the DELETEs out
// at once.
const (
	maxAckBatch   = 1000
	maxAckSenders = 1
)

// ack acks id, in a batch with the Acks that wait meanwhile.
func (a *acker) ack(id lease.ID) error {
	req := ackReq{id, make(chan error, 1)}
	a.mu.Lock()
	a.queue = append(a.queue, req)
	if a.senders == maxAckSenders {
		a.mu.Unlock()
		return <-req.done
	}
	a.senders++
	for len(a.queue) > 0 {
		batch := a.queue[:min(len(a.queue), maxAckBatch)]
		a.queue = a.queue[len(batch):]
		a.mu.Unlock()
		ids := make([]lease.ID, len(batch))
		for i, r := range batch {
			ids[i] = r.id
		}
		errs := a.s(ids)
		for i, r := range batch {
			r.done <- errs[i]
		}
		a.mu.Lock()
	}
	a.senders--
	a.mu.Unlock()
	return <-req.done
}

// Ack deletes the message of a current lease, even after its deadline,
// as long as it was not delivered again or dead-lettered (a late ack
// saves a duplicate; SQS behaves so). An Ack whose message was delivered
// again, or is waiting to be, returns queue.ErrLeaseExpired and changes
// nothing; one the subscription never issued, or whose message is gone
// (acked, dead-lettered, purged), queue.ErrLeaseNotFound. Acks made while
// another's DELETE is out go together in the next, each with its own
// result.
func (s *Subscription[T]) Ack(id lease.ID) error {
	if s.isClosed() {
		return s.errClosed("ack")
	}
	return s.acks.ack(id)
}

// AckBatch acks ids in one DELETE (one per 1000). It returns nil when
// every lease was acked, else a *queue.BatchError whose Errs[i] is
// ids[i]'s error (nil for those acked; each names its lease), or, when the
// subscription is closed, that error alone (none acked).
func (s *Subscription[T]) AckBatch(ids []lease.ID) error {
	if s.isClosed() {
		return s.errClosed("ack")
	}
	errs := make([]error, 0, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), maxAckBatch)]
		ids = ids[len(chunk):]
		errs = append(errs, s.ackNow(chunk)...)
	}
	return queue.NewBatchError(errs)
}

// ackNow sends one DELETE for ids and returns each one's result. A DELETE
// whose connection is lost is sent again once, on another: an ack whose
// first DELETE may have committed, and whose second finds the lease gone,
// is taken as done (the message is gone either way).
func (s *Subscription[T]) ackNow(ids []lease.ID) []error {
	errs := make([]error, len(ids))
	var seqs []int64
	var deliveries []int32
	first := map[int64]int{} // a seq's first place in ids: an ack of the same lease twice in one batch is one ack
	for i, id := range ids {
		if id.Scope() != uint64(s.id) {
			errs[i] = fmt.Errorf("pgleasebus: ack %v: %w", id, queue.ErrLeaseNotFound)
			continue
		}
		if j, ok := first[int64(id.Seq())]; ok && ids[j] == id {
			errs[i] = fmt.Errorf("pgleasebus: ack %v: acked twice at once: %w", id, queue.ErrLeaseNotFound)
			continue
		}
		first[int64(id.Seq())] = i
		seqs, deliveries = append(seqs, int64(id.Seq())), append(deliveries, int32(id.Delivery()))
	}
	if len(seqs) == 0 {
		return errs
	}
	ctx, cancel := s.settleCtx()
	defer cancel()
	now := s.bus.now()
	deleted := map[int64]bool{}
	ambiguous, err := retryOnce(func() error {
		return s.bus.genericTx(ctx, s.bus.q.ack, []any{s.id, seqs, deliveries, now, s.cfg.limit(), s.bus.cfg.schema, s.topic}, func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var seq, notified int64
				if err := rows.Scan(&seq, &notified); err != nil {
					return err
				}
				deleted[seq] = true
			}
			return rows.Err()
		})
	})
	if err != nil {
		for i, id := range ids {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("pgleasebus: ack %v: %w", id, err)
			}
		}
		return errs
	}
	acked := 0
	for i, id := range ids {
		switch {
		case errs[i] != nil:
		case deleted[int64(id.Seq())]:
			acked++
		default:
			errs[i] = s.unchanged(ctx, "ack", id, time.Unix(0, now))
			if ambiguous && errors.Is(errs[i], queue.ErrLeaseNotFound) {
				errs[i] = nil // the first DELETE took it
				acked++
			}
		}
	}
	s.mu.Lock()
	s.counters.acked += uint64(acked)
	s.mu.Unlock()
	if acked > 0 {
		s.bus.wake(s.topic) // an AwaitIdle, or a key's next message, of every handle in this process
	}
	return errs
}

// retryOnce runs f, and once more if it failed for its connection (lost,
// terminated, the server shutting down): the pool gives the second try
// another connection. ambiguous reports a first try whose statement may
// have run: its connection was lost after it was sent.
func retryOnce(f func() error) (ambiguous bool, err error) {
	err = f()
	if err == nil || !connectionLost(err) {
		return false, err
	}
	ambiguous = !pgconn.SafeToRetry(err)
	return ambiguous, f()
}

// connectionLost reports whether err is the loss of a connection rather
// than the statement's own failure: an I/O error, a connection
// exception (SQLSTATE class 08) or an operator's intervention (57P01
// terminated, 57P02 crash, 57P03 starting up).
func connectionLost(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "conn closed")
}

// settleCtx bounds one settle's round trip: a settle is a method without a
// context (Ack(id) error), and must not hang on a database that does not
// answer.
func (s *Subscription[T]) settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// unchanged returns the error of a settle of id that changed nothing at
// now: the lease is not current. Its message still held by the
// subscription (leased again, or waiting) makes it ErrLeaseExpired, as
// does a live call past its deadline; else ErrLeaseNotFound. A last
// attempt whose lease expired is dead-lettered first (the sweep), as at
// any look.
func (s *Subscription[T]) unchanged(ctx context.Context, op string, id lease.ID, now time.Time) error {
	if id.Scope() != uint64(s.id) {
		return fmt.Errorf("pgleasebus: %s %v: %w", op, id, queue.ErrLeaseNotFound)
	}
	if _, err := s.bus.pool.Exec(ctx, s.bus.q.sweepOne, now.UnixNano(), s.id, int64(id.Seq())); err != nil {
		return fmt.Errorf("pgleasebus: %s %v: %w", op, id, err)
	}
	var delivery int32
	var state int16
	err := s.bus.pool.QueryRow(ctx, s.bus.q.current, s.id, int64(id.Seq())).Scan(&delivery, &state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgleasebus: %s %v: %w", op, id, queue.ErrLeaseNotFound)
	case err != nil:
		return fmt.Errorf("pgleasebus: %s %v: %w", op, id, err)
	case uint32(delivery) < id.Delivery():
		return fmt.Errorf("pgleasebus: %s %v: %w", op, id, queue.ErrLeaseNotFound) // never issued
	}
	return fmt.Errorf("pgleasebus: %s %v: %w", op, id, queue.ErrLeaseExpired)
}

// Nack hands the message back: visible again after delay (0: now), with
// the attempt spent. On its last attempt the message is dead-lettered
// (queue.ReasonMaxAttempts, last error "nacked"). It needs a live lease:
// past its deadline, queue.ErrLeaseExpired. delay >= 0.
func (s *Subscription[T]) Nack(id lease.ID, delay time.Duration) error {
	if delay < 0 {
		return backend.Invalid("Nack: delay %v, must be >= 0", delay)
	}
	return s.nack("nack", id, delay, "nacked", queue.AttemptNacked)
}

// Fail reports a failed attempt with its cause: the message is visible
// again after the retry policy's delay for the attempt (WithRetry), or,
// on its last attempt, dead-lettered with cause as its last error. It
// needs a live lease.
func (s *Subscription[T]) Fail(id lease.ID, cause error) error {
	attempt := int(id.Delivery()) // the attempt's number is at most the delivery's
	var a int32
	if err := s.bus.pool.QueryRow(context.Background(), `SELECT attempts FROM `+s.bus.cfg.schema+`.messages WHERE sub_id = $1 AND seq = $2 AND delivery = $3`,
		s.id, int64(id.Seq()), int32(id.Delivery())).Scan(&a); err == nil {
		attempt = int(a)
	}
	return s.FailAfter(id, s.retryPolicy().Delay(attempt), cause)
}

// retryPolicy returns the subscription's retry policy, with this handle's
// jitter source.
func (s *Subscription[T]) retryPolicy() queue.RetryPolicy {
	p := s.cfg.retry
	if p.Rand == nil {
		p.Rand = s.rand
	}
	return p
}

// FailAfter is Fail with the caller's delay (backend.DelayFailer).
func (s *Subscription[T]) FailAfter(id lease.ID, delay time.Duration, cause error) error {
	if delay < 0 {
		return backend.Invalid("FailAfter: delay %v, must be >= 0", delay)
	}
	text := "failed"
	if cause != nil {
		text = truncate(cause.Error())
	}
	return s.nack("fail", id, delay, text, queue.AttemptFailed)
}

// truncate keeps an error's text to what a dead letter keeps.
func truncate(s string) string {
	if len(s) > queue.MaxHistoryError*4 {
		return s[:queue.MaxHistoryError*4]
	}
	return s
}

func (s *Subscription[T]) nack(op string, id lease.ID, delay time.Duration, text string, outcome queue.AttemptOutcome) error {
	if s.isClosed() {
		return s.errClosed(op)
	}
	ctx, cancel := s.settleCtx()
	defer cancel()
	now := s.bus.cfg.clk.Now()
	ns := now.UnixNano()
	var dead, back int64
	var notified any
	ambiguous, err := retryOnce(func() error {
		return s.bus.genericTx(ctx, s.bus.q.nack, []any{s.id, int64(id.Seq()), int32(id.Delivery()), ns, after(now, delay), text, int(outcome),
			s.cfg.limit(), s.bus.cfg.schema, s.topic}, func(br pgx.BatchResults) error { return br.QueryRow().Scan(&dead, &back, &notified) })
	})
	if err != nil {
		return fmt.Errorf("pgleasebus: %s %v: %w", op, id, err)
	}
	if dead+back == 0 && !(ambiguous && s.settledBefore(ctx, id)) {
		return s.unchanged(ctx, op, id, now)
	}
	s.bus.wake(s.topic)
	return nil
}

// settledBefore reports, after a settle of id whose first statement's
// connection was lost once sent and whose second changed nothing, that the
// first took effect: the message waits again under id's delivery (a Nack,
// a Fail, a Release), or is a dead letter (a Reject, a last attempt). A
// settle is retried so; its result then says what happened, not the
// retry.
func (s *Subscription[T]) settledBefore(ctx context.Context, id lease.ID) bool {
	var took bool
	err := s.bus.pool.QueryRow(ctx, s.bus.q.settled, s.id, int64(id.Seq()), int32(id.Delivery())).Scan(&took)
	return err == nil && took
}

// Extend sets a live lease's deadline to timeout from the clock's now
// (SQS ChangeMessageVisibility); timeout > 0. Past the deadline,
// queue.ErrLeaseExpired.
func (s *Subscription[T]) Extend(id lease.ID, timeout time.Duration) error {
	if timeout <= 0 {
		return backend.Invalid("Extend: timeout %v, must be > 0", timeout)
	}
	if s.isClosed() {
		return s.errClosed("extend")
	}
	ctx, cancel := s.settleCtx()
	defer cancel()
	now := s.bus.cfg.clk.Now()
	var tag pgconn.CommandTag
	_, err := retryOnce(func() (err error) {
		return s.bus.genericTx(ctx, s.bus.q.extend, []any{s.id, int64(id.Seq()), int32(id.Delivery()), now.UnixNano(), after(now, timeout)},
			func(br pgx.BatchResults) (err error) { tag, err = br.Exec(); return err })
	})
	if err != nil {
		return fmt.Errorf("pgleasebus: extend %v: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return s.unchanged(ctx, "extend", id, now)
	}
	return nil
}

// Release hands the message back unprocessed: visible at once, and the
// attempt is not spent. It needs a live lease.
func (s *Subscription[T]) Release(id lease.ID) error { return s.ReleaseAfter(id, 0) }

// ReleaseAfter is Release with the message kept out of sight for delay
// (backend.DelayReleaser: a pool's SlowDown); delay >= 0.
func (s *Subscription[T]) ReleaseAfter(id lease.ID, delay time.Duration) error {
	if delay < 0 {
		return backend.Invalid("ReleaseAfter: delay %v, must be >= 0", delay)
	}
	if s.isClosed() {
		return s.errClosed("release")
	}
	ctx, cancel := s.settleCtx()
	defer cancel()
	now := s.bus.cfg.clk.Now()
	var n int64
	var notified any
	ambiguous, err := retryOnce(func() error {
		return s.bus.genericTx(ctx, s.bus.q.release, []any{s.id, int64(id.Seq()), int32(id.Delivery()), now.UnixNano(), after(now, delay),
			s.bus.cfg.schema, s.topic}, func(br pgx.BatchResults) error { return br.QueryRow().Scan(&n, &notified) })
	})
	if err != nil {
		return fmt.Errorf("pgleasebus: release %v: %w", id, err)
	}
	if n == 0 && !(ambiguous && s.settledBefore(ctx, id)) {
		return s.unchanged(ctx, "release", id, now)
	}
	s.bus.wake(s.topic)
	return nil
}

// Reject dead-letters the message at once (queue.RejectReason of cause:
// ReasonRejected, or ReasonCancelled for a pool's cancelled job), with
// cause as its last error (backend.Rejecter: a pool's poller.GiveUp). It
// needs a live lease.
func (s *Subscription[T]) Reject(id lease.ID, cause error) error {
	text := ""
	if cause != nil {
		text = truncate(cause.Error())
	}
	if s.isClosed() {
		return s.errClosed("reject")
	}
	ctx, cancel := s.settleCtx()
	defer cancel()
	return s.rejectAt(ctx, id, s.bus.cfg.clk.Now(), queue.RejectReason(cause), text)
}

func (s *Subscription[T]) rejectAt(ctx context.Context, id lease.ID, now time.Time, reason queue.Reason, text string) error {
	var n int64
	var notified any
	ambiguous, err := retryOnce(func() error {
		return s.bus.genericTx(ctx, s.bus.q.reject, []any{s.id, int64(id.Seq()), int32(id.Delivery()), now.UnixNano(), text,
			s.bus.cfg.schema, s.topic, int32(reason)}, func(br pgx.BatchResults) error { return br.QueryRow().Scan(&n, &notified) })
	})
	if err != nil {
		return fmt.Errorf("pgleasebus: reject %v: %w", id, err)
	}
	if n == 0 && !(ambiguous && s.settledBefore(ctx, id)) {
		return s.unchanged(ctx, "reject", id, now)
	}
	s.bus.wake(s.topic)
	return nil
}
