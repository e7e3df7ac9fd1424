package sqsleasebus

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Redrive sends the dead letters match accepts (nil: every one) back to
// the queue, and returns how many. Each is re-sent (SendMessage to the
// queue, then DeleteMessage from the dead-letter queue): SQS counts its
// receives afresh, so its next delivery is attempt 1, and it gets a new
// MessageId, so its Message.ID is new too. A crash between the two sends
// it twice (at least once: the dead letter is still there); on a FIFO
// queue it keeps its message group. The others are shown again when the
// scan ends.
//
// The scan receives the dead-letter queue until a receive comes back
// empty. SQS's short receive samples its servers, so over a large
// dead-letter queue one call may miss some: call again until it returns
// 0, or move them all with StartRedrive. A queue without a RedrivePolicy
// returns an error matching ErrUnsupported.
func (s *Subscription[T]) Redrive(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	return s.redrive(ctx, "redrive", func(dl queue.DeadLetter[T]) (T, bool, bool) {
		return dl.Message.Payload, match == nil || match(dl), false
	})
}

// RedriveWith is Redrive with the payload fix returns: fix is called for
// each dead letter, and one it returns ok for is re-sent with the payload
// it gives (encoded by the Subscription's codec), the others shown again.
// A nil fix is refused (queue.ErrInvalidArgument).
func (s *Subscription[T]) RedriveWith(ctx context.Context, fix func(queue.DeadLetter[T]) (payload T, ok bool)) (int, error) {
	if fix == nil {
		return 0, backend.Invalid("RedriveWith: a nil fix")
	}
	return s.redrive(ctx, "redrive", func(dl queue.DeadLetter[T]) (T, bool, bool) {
		p, ok := fix(dl)
		return p, ok, true
	})
}

// DiscardDeadLetters deletes the dead letters match accepts (nil: every
// one) from the dead-letter queue, and returns how many. It scans as
// Redrive does.
func (s *Subscription[T]) DiscardDeadLetters(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	return s.scanDeadLetters(ctx, "discard", func(dl queue.DeadLetter[T], m types.Message, dlq string) (bool, error) {
		if match != nil && !match(dl) {
			return false, nil
		}
		return true, s.deleteFrom(ctx, dlq, m)
	})
}

// redrive re-sends what pick accepts, with the payload it gives (encoded
// when edited, else the body as it was).
func (s *Subscription[T]) redrive(ctx context.Context, op string, pick func(queue.DeadLetter[T]) (T, bool, bool)) (int, error) {
	return s.scanDeadLetters(ctx, op, func(dl queue.DeadLetter[T], m types.Message, dlq string) (bool, error) {
		payload, ok, edited := pick(dl)
		if !ok {
			return false, nil
		}
		body := aws.ToString(m.Body)
		if edited {
			b, err := s.codec.Encode(nil, payload)
			if err != nil {
				return false, fmt.Errorf("encode the fixed payload of %v: %w", dl.Message.ID, err)
			}
			body = string(b)
		}
		attrs := maps.Clone(m.MessageAttributes)
		delete(attrs, attrDeadLetter)
		in := &sqs.SendMessageInput{QueueUrl: aws.String(s.url), MessageBody: aws.String(body), MessageAttributes: attrs}
		if s.isFIFO() {
			group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
			if group == "" {
				group = s.name
			}
			in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(uuid.NewString())
		}
		if _, err := s.client.SendMessage(ctx, in); err != nil {
			return false, queueError(s.url, op, err)
		}
		return true, s.deleteFrom(ctx, dlq, m)
	})
}

// scanDeadLetters receives the dead-letter queue until a receive comes
// back empty (or with only messages it has seen), calling act on each dead letter that decodes; act reports
// whether it took the message (then it is gone from the dead-letter
// queue). What it did not take is shown again at the end. It returns how
// many act took, and every error joined (act's, a body that does not
// decode, a receive's).
func (s *Subscription[T]) scanDeadLetters(ctx context.Context, op string, act func(queue.DeadLetter[T], types.Message, string) (bool, error)) (int, error) {
	s.mu.Lock()
	dlq, maxA := s.attrs.dlqURL, s.attrs.maxReceive
	s.mu.Unlock()
	if dlq == "" {
		return 0, fmt.Errorf("sqsleasebus: %s dead letters of %s: %w: the queue has no RedrivePolicy", op, s.name, ErrUnsupported)
	}
	var (
		n       int
		handles []types.ChangeMessageVisibilityBatchRequestEntry
		errs    []error
		seen    = map[string]bool{}
	)
	for ctx.Err() == nil {
		got, err := s.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlq), MaxNumberOfMessages: maxBatch,
			VisibilityTimeout: secs(peekVisibility), MessageSystemAttributeNames: receiveAttrs, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			errs = append(errs, queueError(dlq, op+" dead letters", err))
			break
		}
		fresh := 0
		for _, m := range got.Messages {
			mid := aws.ToString(m.MessageId)
			if seen[mid] {
				// Scanned, and visible again: the scan has outlasted
				// peekVisibility, and has come round.
				handles = append(handles, types.ChangeMessageVisibilityBatchRequestEntry{
					Id: aws.String(fmt.Sprint(len(handles))), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
				})
				continue
			}
			seen[mid] = true
			fresh++
			took := false
			dl, err := s.deadLetterOf(m, maxA)
			if err == nil {
				took, err = act(dl, m, dlq)
			}
			if err != nil {
				errs = append(errs, err)
			}
			if !took {
				handles = append(handles, types.ChangeMessageVisibilityBatchRequestEntry{
					Id: aws.String(fmt.Sprint(len(handles))), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
				})
				continue
			}
			n++
		}
		if fresh == 0 {
			break
		}
	}
	errs = append(errs, s.show(dlq, handles))
	return n, errors.Join(errs...)
}

// deleteFrom deletes m from the queue at url.
func (s *Subscription[T]) deleteFrom(ctx context.Context, url string, m types.Message) error {
	if _, err := s.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
		return queueError(url, "delete a dead letter", err)
	}
	return nil
}

// isFIFO reports whether the queue is FIFO.
func (s *Subscription[T]) isFIFO() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attrs.fifo
}

// StartRedrive asks SQS to move every message of the dead-letter queue
// back to the queue (StartMessageMoveTask), at most maxPerSecond a second
// (0: as fast as SQS goes), and returns the task's handle, for
// ListMessageMoveTasks or CancelMessageMoveTask. SQS moves them as they
// are (body and attributes), in the background, and their receive count
// starts again. The reason this package recorded travels along unseen (a
// Subscription shows no header of it), and a message that SQS itself then
// dead-letters again (past maxReceiveCount at a receive) still reports
// it in DeadLetters; one this package moves gets a new one. It is the way
// to move a large dead-letter queue; Redrive and RedriveWith choose and
// edit. maxPerSecond must be in [0, 500] (SQS's limit).
func (s *Subscription[T]) StartRedrive(ctx context.Context, maxPerSecond int) (string, error) {
	if maxPerSecond < 0 || maxPerSecond > 500 {
		return "", backend.Invalid("StartRedrive: maxPerSecond = %d, must be in [0, 500]", maxPerSecond)
	}
	s.mu.Lock()
	src, dst := s.attrs.dlqARN, s.attrs.arn
	s.mu.Unlock()
	if src == "" {
		return "", fmt.Errorf("sqsleasebus: start a redrive of %s: %w: the queue has no RedrivePolicy", s.name, ErrUnsupported)
	}
	in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(src), DestinationArn: aws.String(dst)}
	if maxPerSecond > 0 {
		in.MaxNumberOfMessagesPerSecond = aws.Int32(int32(maxPerSecond))
	}
	out, err := s.client.StartMessageMoveTask(ctx, in)
	if err != nil {
		return "", queueError(src, "start a redrive", err)
	}
	return aws.ToString(out.TaskHandle), nil
}
