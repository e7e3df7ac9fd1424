package sqsleasebus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// Poll leases up to n messages, blocking until at least one is visible,
// ctx ends (its error) or the Subscription closes (queue.ErrClosed).
//
// It long-polls with one ReceiveMessage of up to 10 messages (SQS's
// limit), asking again while the queue is empty; when that receive comes
// back full and n > 10, it asks for the rest with short receives, all in
// flight at once. Each delivery's lease is the visibility timeout, from
// before the receive was sent on the Subscription's clock (so it never
// outlasts the server's); Attempt is SQS's ApproximateReceiveCount, and
// MaxAttempts the RedrivePolicy's maxReceiveCount. n < 1 is refused
// (queue.ErrInvalidArgument).
//
// A receive cut short (ctx ends while it waits) may have taken messages
// on the server that never reach this Poll: SQS makes them visible again
// after their visibility timeout, one receive spent.
func (s *Subscription[T]) Poll(ctx context.Context, n int) ([]queue.Delivery[T], error) {
	return s.poll(ctx, n, 0, nil)
}

// PollFor is Poll as a worker pool asks for it (backend.PoolPoller). It
// receives for the visibility timeout whatever req.Hold asks (held is
// false), so that the pool extends its leases while it holds them: a
// pool whose process dies lets its messages go after one visibility
// timeout, not after its whole extension allowance. req.Parking is
// marked parked while a long poll is out: from when it is sent, as the
// server's side cannot be seen from here (a test over leasebus's own
// server waits for sqstest.Server.AwaitParked before moving its clock).
func (s *Subscription[T]) PollFor(ctx context.Context, req backend.PollRequest[T]) ([]queue.Delivery[T], bool, error) {
	if req.Hold < 0 {
		return nil, false, backend.Invalid("PollFor: Hold = %v, must be >= 0", req.Hold)
	}
	ds, err := s.poll(ctx, req.Max, 0, req.Parking)
	return ds, false, err
}

// visibility returns the lease a receive asks for by default.
func (s *Subscription[T]) visibility() time.Duration {
	if s.cfg.vis > 0 {
		return s.cfg.vis
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attrs.vis
}

func (s *Subscription[T]) poll(ctx context.Context, n int, vis time.Duration, pk *backend.Parking) ([]queue.Delivery[T], error) {
	if n < 1 {
		return nil, backend.Invalid("Poll: n = %d, must be >= 1", n)
	}
	if s.isClosed() {
		return nil, fmt.Errorf("sqsleasebus: poll %s: %w", s.name, queue.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if vis == 0 {
		vis = s.visibility()
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()
	for {
		s.refresh(rctx)
		sent := s.cfg.clk.Now()
		pk.Park(sent.Add(s.cfg.wait))
		msgs, err := s.receive(rctx, min(n, maxBatch), vis, s.cfg.wait)
		pk.Unpark()
		switch {
		case err == nil:
		case s.isClosed():
			return nil, fmt.Errorf("sqsleasebus: poll %s: %w", s.name, queue.ErrClosed)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			return nil, err
		}
		if len(msgs) == maxBatch && n > maxBatch {
			msgs = append(msgs, s.fill(n-maxBatch, vis)...)
		}
		if ds := s.deliveries(msgs, sent, vis); len(ds) > 0 {
			return ds, nil
		}
	}
}

// fill takes up to n more messages with short receives of up to 10 each,
// all at once. They run to their end whatever the Poll's context: a
// receive cut short could leave what it took invisible.
func (s *Subscription[T]) fill(n int, vis time.Duration) []types.Message {
	k := (n + maxBatch - 1) / maxBatch
	got := make([][]types.Message, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.WithoutCancel(s.base), s.cfg.settle)
			defer cancel()
			got[i], _ = s.receive(ctx, min(n-i*maxBatch, maxBatch), vis, 0) // a failed fill only means fewer
		}()
	}
	wg.Wait()
	var out []types.Message
	for _, g := range got {
		out = append(out, g...)
	}
	return out
}

// receiveAttrs are the system attributes a receive asks for.
var receiveAttrs = []types.MessageSystemAttributeName{
	types.MessageSystemAttributeNameApproximateReceiveCount,
	types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
	types.MessageSystemAttributeNameSentTimestamp,
	types.MessageSystemAttributeNameMessageGroupId,
}

// receive is one ReceiveMessage.
func (s *Subscription[T]) receive(ctx context.Context, n int, vis, wait time.Duration) ([]types.Message, error) {
	out, err := s.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.url),
		MaxNumberOfMessages:         int32(n),
		VisibilityTimeout:           secs(vis),
		WaitTimeSeconds:             secs(wait),
		MessageSystemAttributeNames: receiveAttrs,
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return nil, queueError(s.url, "receive", err)
	}
	return out.Messages, nil
}

// deliveries leases msgs, received with the visibility vis by a receive
// sent at sent. A message that does not decode, or is past the attempt
// limit, is dead-lettered instead (when the queue has a dead-letter
// queue; else it is left to come back after its visibility timeout).
func (s *Subscription[T]) deliveries(msgs []types.Message, sent time.Time, vis time.Duration) []queue.Delivery[T] {
	ds := make([]queue.Delivery[T], 0, len(msgs))
	for _, m := range msgs {
		h := &held{m: m, id: aws.ToString(m.MessageId), attempt: 1, deadline: sent.Add(vis)}
		if v, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil && v > 0 {
			h.attempt = v
		}
		h.first = millis(m.Attributes[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)], sent)
		payload, err := s.codec.Decode([]byte(aws.ToString(m.Body)))
		s.mu.Lock()
		maxA := s.attrs.maxReceive
		id := s.holdLocked(h, maxA)
		s.mu.Unlock()
		switch {
		case err != nil:
			s.moveAsync(id, queue.ReasonRejected, "decode: "+err.Error())
			continue
		case maxA > 0 && h.attempt > maxA:
			// The limit was lowered since, or SQS let it through: the
			// attempt past the limit is not made.
			h.attempt = maxA
			s.moveAsync(id, queue.ReasonMaxAttempts, backend.LeaseExpired)
			continue
		}
		ds = append(ds, queue.Delivery[T]{
			Message:     s.message(m, payload, sent),
			LeaseID:     id,
			Attempt:     h.attempt,
			Deadline:    h.deadline,
			MaxAttempts: maxA,
		})
	}
	return ds
}

// holdLocked records h as the current lease of its message here, and
// returns its ID. An earlier lease of the same message is superseded.
func (s *Subscription[T]) holdLocked(h *held, maxA int) lease.ID {
	s.seq++
	id := lease.NewID(s.scope, s.seq, uint32(min(h.attempt, 1<<31)))
	s.sweepLocked(s.cfg.clk.Now())
	if prev, ph, wasHeld := s.leases.Hold(id, h); !prev.IsZero() { // superseded
		if wasHeld {
			ph.stopTimer()
		}
		s.retired.add(prev)
	}
	if maxA > 0 && h.attempt == maxA {
		s.watchLocked(id, h)
	}
	return id
}

// message builds the leasebus message of m.
func (s *Subscription[T]) message(m types.Message, payload T, sent time.Time) queue.Message[T] {
	msg := queue.Message[T]{
		ID:          messageID(s.url, aws.ToString(m.MessageId)),
		Topic:       s.name,
		Key:         keyOf(m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]),
		Payload:     payload,
		PublishedAt: millis(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], sent),
	}
	if len(m.MessageAttributes) > 0 {
		hs := make(map[string]string, len(m.MessageAttributes))
		for k, v := range m.MessageAttributes {
			if v.StringValue != nil && k != attrDeadLetter {
				hs[k] = *v.StringValue
			}
		}
		msg.Headers = queue.NewHeaders(hs)
	}
	return msg
}

// millis reads an SQS timestamp (milliseconds since the epoch), or
// returns def.
func millis(v string, def time.Time) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return def
	}
	return time.UnixMilli(ms).UTC()
}

// errGone reports whether err says the lease's message is no longer
// there for this handle: deleted, or its receipt no longer valid.
func errGone(err error) bool {
	var bad *types.ReceiptHandleIsInvalid
	return errors.As(err, &bad) || apiCode(err) == "ReceiptHandleIsInvalid"
}
