package sqsleasebus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// attrDeadLetter is the message attribute a dead letter this package
// moves carries: why, after how many attempts, the last error (JSON of
// deadLetterInfo). A message SQS moved itself (past maxReceiveCount at a
// receive) has none.
const attrDeadLetter = "leasebus-dead-letter"

// maxAttributes is SQS's limit of message attributes per message.
const maxAttributes = 10

// maxLastError bounds the last error a dead letter keeps.
const maxLastError = 1024

// deadLetterInfo is attrDeadLetter's value.
type deadLetterInfo struct {
	Reason    string    `json:"reason"` // queue.Reason.String()
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError,omitempty"`
	At        time.Time `json:"at"`
	Queue     string    `json:"queue"`     // the source queue's name
	MessageID string    `json:"messageId"` // its SQS MessageId there
}

// watchLocked arms the expiry of a last attempt's lease: when its
// deadline passes unsettled, the lease's message is moved to the
// dead-letter queue with the last error "lease expired", as the broker
// does (SQS would move it only at its next receive, and keep no error).
func (s *Subscription[T]) watchLocked(id lease.ID, h *held) {
	if s.isClosed() || s.attrs.dlqURL == "" {
		return
	}
	stop := make(chan struct{})
	h.stopT, h.timer = stop, backend.At(s.cfg.clk, h.deadline)
	c := h.timer.C
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		select {
		case <-c:
			s.expired(id, h)
		case <-stop:
		}
	}()
}

// stopTimer disarms a last attempt's expiry. Called under s.mu.
func (h *held) stopTimer() {
	if h.stopT != nil {
		h.timer.Stop()
		close(h.stopT)
		h.stopT = nil
	}
}

// expired moves the message of a last attempt whose lease expired here.
func (s *Subscription[T]) expired(id lease.ID, h *held) {
	s.mu.Lock()
	if cur, _ := s.leases.Held(id); cur != h || s.cfg.clk.Now().Before(h.deadline) || s.isClosed() {
		s.mu.Unlock()
		return // settled, extended, or closing
	}
	s.leases.Take(id)
	h.stopT = nil // this goroutine is the timer's
	s.startMoveLocked()
	s.mu.Unlock()
	defer s.endMove()
	if err := s.move(id, h, queue.ReasonMaxAttempts, backend.LeaseExpired); err != nil {
		s.retire(id, h) // SQS moves it at its next receive
	}
}

// startMoveLocked counts a move in the background; endMove ends it.
func (s *Subscription[T]) startMoveLocked() {
	if s.moving == 0 {
		s.moved = make(chan struct{})
	}
	s.moving++
}

func (s *Subscription[T]) endMove() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.moving--; s.moving == 0 {
		close(s.moved)
		s.moved = nil
	}
}

// awaitMoves waits until no dead-letter move runs in the background, or
// ctx ends.
func (s *Subscription[T]) awaitMoves(ctx context.Context) error {
	s.mu.Lock()
	ch := s.moved
	s.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return s.awaitMoves(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// moveAsync moves the message of lease id to the dead-letter queue in the
// background: one that cannot be delivered (it does not decode, or is
// past the limit). With no dead-letter queue, or if the move fails, it
// is left to come back after its visibility timeout.
func (s *Subscription[T]) moveAsync(id lease.ID, reason queue.Reason, text string) {
	s.mu.Lock()
	h, _ := s.leases.Held(id)
	if h == nil || s.isClosed() || s.attrs.dlqURL == "" {
		s.mu.Unlock()
		return
	}
	s.leases.Take(id)
	h.stopTimer()
	s.bg.Add(1)
	s.startMoveLocked()
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		defer s.endMove()
		if err := s.move(id, h, reason, text); err != nil {
			s.retire(id, h)
		}
	}()
}

// deadLetter moves the message of the current lease id to the
// dead-letter queue now: Fail on the last attempt, and Reject.
func (s *Subscription[T]) deadLetter(id lease.ID, op string, reason queue.Reason, text string) error {
	s.mu.Lock()
	noDLQ := s.attrs.dlqURL == ""
	s.mu.Unlock()
	if noDLQ {
		return fmt.Errorf("sqsleasebus: %s %v: %w: queue %s has no RedrivePolicy, so no dead-letter queue", op, id, ErrUnsupported, s.name)
	}
	h, err := s.take(id, op, true)
	if err != nil {
		return err
	}
	if err := s.move(id, h, reason, text); err != nil {
		if !errors.Is(err, errMovedNotDeleted) {
			s.restore(id, h)
		}
		return fmt.Errorf("sqsleasebus: %s %v: %w", op, id, err)
	}
	return nil
}

// errMovedNotDeleted: the copy is in the dead-letter queue, but the
// message is still in its queue.
var errMovedNotDeleted = errors.New("sent to the dead-letter queue, but not deleted from its queue: it will be delivered again")

// move sends h's message to the dead-letter queue, then deletes it from
// its queue: at least once (a crash between the two leaves it in both;
// on a FIFO queue the send's deduplication ID, the message's ID, keeps a
// second copy out for SQS's five minutes).
func (s *Subscription[T]) move(id lease.ID, h *held, reason queue.Reason, text string) error {
	s.mu.Lock()
	dlq, fifo := s.attrs.dlqURL, s.attrs.fifo
	s.mu.Unlock()
	if len(text) > maxLastError {
		text = text[:maxLastError] + "…"
	}
	info, _ := json.Marshal(deadLetterInfo{
		Reason: reason.String(), Attempts: h.attempt, LastError: text,
		At: s.cfg.clk.Now().UTC(), Queue: s.name, MessageID: h.id,
	})
	attrs := maps.Clone(h.m.MessageAttributes)
	if attrs == nil {
		attrs = make(map[string]types.MessageAttributeValue, 1)
	}
	delete(attrs, attrDeadLetter) // a redriven dead letter's earlier one
	if len(attrs) < maxAttributes {
		attrs[attrDeadLetter] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(string(info))}
	} // else: no room, and it goes without why (as if SQS had moved it)
	in := &sqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: h.m.Body, MessageAttributes: attrs}
	if fifo {
		group := h.m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		if group == "" {
			group = s.name
		}
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(h.id)
	}
	ctx, cancel := s.settleCtx()
	defer cancel()
	if _, err := s.client.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("move to the dead-letter queue: %w", err)
	}
	_, err := s.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(s.url), ReceiptHandle: h.m.ReceiptHandle})
	if err != nil && !errGone(err) {
		return fmt.Errorf("%w: %w", errMovedNotDeleted, err)
	}
	s.forget(id, h)
	return nil
}

// peekVisibility is how long DeadLetters hides what it has read while it
// reads on; it shows them again at once when done.
const peekVisibility = 30 * time.Second

// DeadLetters returns up to max messages of the queue's dead-letter queue
// (fewer when it holds fewer), without taking them: SQS has no peek, so it
// receives them (which counts a receive on each) and makes them visible
// again at once. A dead letter this package moved says why, after how
// many attempts and with what last error; one SQS moved itself (past
// maxReceiveCount at a receive) says max-attempts, maxReceiveCount
// attempts and no error. A body that does not decode is left out and its
// error returned with the rest. A queue without a RedrivePolicy returns
// an error matching ErrUnsupported.
func (s *Subscription[T]) DeadLetters(ctx context.Context, max int) ([]queue.DeadLetter[T], error) {
	if max < 1 {
		return nil, backend.Invalid("DeadLetters: max = %d, must be >= 1", max)
	}
	s.mu.Lock()
	dlq, maxA := s.attrs.dlqURL, s.attrs.maxReceive
	s.mu.Unlock()
	if dlq == "" {
		return nil, fmt.Errorf("sqsleasebus: dead letters of %s: %w: the queue has no RedrivePolicy", s.name, ErrUnsupported)
	}
	var (
		out     []queue.DeadLetter[T]
		handles []types.ChangeMessageVisibilityBatchRequestEntry
		errs    []error
	)
	for len(out)+len(errs) < max {
		got, err := s.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlq), MaxNumberOfMessages: int32(min(max-len(out)-len(errs), maxBatch)),
			VisibilityTimeout: secs(peekVisibility), MessageSystemAttributeNames: receiveAttrs, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			errs = append(errs, queueError(dlq, "read dead letters", err))
			break
		}
		if len(got.Messages) == 0 {
			break
		}
		for _, m := range got.Messages {
			handles = append(handles, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(fmt.Sprint(len(handles))), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
			})
			dl, err := s.deadLetterOf(m, maxA)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, dl)
		}
	}
	errs = append(errs, s.show(dlq, handles))
	return out, errors.Join(errs...)
}

// show makes the dead letters DeadLetters read visible again.
func (s *Subscription[T]) show(dlq string, handles []types.ChangeMessageVisibilityBatchRequestEntry) error {
	ctx, cancel := s.settleCtx()
	defer cancel()
	var errs []error
	for len(handles) > 0 {
		batch := handles[:min(len(handles), maxBatch)]
		handles = handles[len(batch):]
		if _, err := s.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(dlq), Entries: batch}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deadLetterOf reads a message of the dead-letter queue.
func (s *Subscription[T]) deadLetterOf(m types.Message, maxA int) (queue.DeadLetter[T], error) {
	payload, err := s.codec.Decode([]byte(aws.ToString(m.Body)))
	if err != nil {
		return queue.DeadLetter[T]{}, fmt.Errorf("sqsleasebus: dead letter %s: decode: %w", aws.ToString(m.MessageId), err)
	}
	sent := millis(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], time.Time{})
	dl := queue.DeadLetter[T]{
		Subscription: s.name, Topic: s.name,
		Message: s.message(m, payload, sent),
		Reason:  queue.ReasonMaxAttempts, Attempts: maxA, At: sent,
	}
	if v, ok := m.MessageAttributes[attrDeadLetter]; ok && v.StringValue != nil {
		var info deadLetterInfo
		if json.Unmarshal([]byte(*v.StringValue), &info) == nil {
			if r, ok := queue.ParseReason(info.Reason); ok {
				dl.Reason = r
			}
			dl.Attempts, dl.LastError, dl.At = info.Attempts, info.LastError, info.At
			dl.Message.ID = messageID(s.url, info.MessageID)
		}
	}
	return dl, nil
}
