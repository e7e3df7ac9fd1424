package sqsserver

import (
	"errors"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// receipt reads a receipt handle of q: one this server issued for this
// incarnation of q, or ReceiptHandleIsInvalid.
func (s *Server) receipt(q *sqsQueue, h *string) (receipt, error) {
	if h == nil || *h == "" {
		return receipt{}, kMissingParameter.new("The request must contain the parameter ReceiptHandle.")
	}
	r, ok := s.decodeHandle(*h)
	if !ok || r.gen != q.gen {
		return receipt{}, kReceiptHandleInvalid.new("The input receipt handle %q is not a valid receipt handle.", *h)
	}
	return r, nil
}

// deleteOne deletes the message of a receipt handle. As in SQS, on a
// standard queue a handle of an earlier receive (the message was received
// again since), or of a message already deleted, succeeds and changes
// nothing, and the handle of the latest receive deletes the message even
// after its visibility passed or was changed to 0. On a FIFO queue a
// handle expires with its visibility: deleting with it then is
// InvalidParameterValue and changes nothing.
func (s *Server) deleteOne(q *sqsQueue, h *string) error {
	r, err := s.receipt(q, h)
	if err != nil {
		return err
	}
	if q.fifo && q.expired(r.lease, s.clock.Now()) {
		return errHandleExpired(*h)
	}
	switch err := q.sub.Ack(r.lease); {
	case err == nil:
		q.forget(r.lease.Seq())
		return nil
	case errors.Is(err, queue.ErrLeaseExpired):
		if q.fifo {
			return errHandleExpired(*h)
		}
		q.deleteReset(r.lease) // if it was reset and not received since: deleted
		return nil
	case errors.Is(err, queue.ErrLeaseNotFound):
		return nil
	default:
		return s.brokerError(err)
	}
}

func errHandleExpired(h string) error {
	return kInvalidParameterValue.new("Value %s for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", h)
}

// changeOne sets the visibility timeout of a received message: 0 makes it
// visible at once (the receive still counts, and its handle still deletes
// it until it is received again), more sets its deadline to now + vis.
// The receive must still be the message's current one, and its deadline
// not passed (MessageNotInflight); the total from the receive may not pass
// 12 hours.
func (s *Server) changeOne(q *sqsQueue, h *string, vis *int) error {
	r, err := s.receipt(q, h)
	if err != nil {
		return err
	}
	if vis == nil {
		return kMissingParameter.new("The request must contain the parameter VisibilityTimeout.")
	}
	v := *vis
	if v < 0 || v > maxVisibility {
		return kInvalidParameterValue.new("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200.", v)
	}
	d := time.Duration(v) * time.Second
	now := s.clock.Now()
	if now.Add(d).After(r.receivedAt.Add(maxVisibility * time.Second)) {
		return kInvalidParameterValue.new("Value %d for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds].", v)
	}
	if v == 0 {
		if err = q.sub.Nack(r.lease, 0); err == nil {
			q.reset(r.lease)
		}
	} else if err = q.sub.Extend(r.lease, d); err == nil {
		q.extended(r.lease, now.Add(d))
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, queue.ErrLeaseExpired) && !q.deletedAfterReset(r.lease):
		return kMessageNotInflight.new("The message referred to is not in flight: its visibility timeout has passed, or it was received again.")
	case errors.Is(err, queue.ErrLeaseExpired), errors.Is(err, queue.ErrLeaseNotFound):
		return kInvalidParameterValue.new("Value %s for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", *h)
	default:
		return s.brokerError(err)
	}
}

func deleteMessage(rc *request, in *deleteMessageInput) (any, error) {
	q, err := rc.s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	if err := rc.s.deleteOne(q, in.ReceiptHandle); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

func changeMessageVisibility(rc *request, in *changeVisibilityInput) (any, error) {
	q, err := rc.s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	if err := rc.s.changeOne(q, in.ReceiptHandle, in.VisibilityTimeout); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// batch runs one of the settling calls for each entry of a batch request.
func (s *Server) batch(in *batchInput, one func(q *sqsQueue, e batchEntry) error) (any, error) {
	q, err := s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	ids := make([]*string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = e.ID
	}
	if err := checkBatchIDs(ids); err != nil {
		return nil, err
	}
	out := batchOutput{Successful: []batchResultEntry{}, Failed: []batchResultError{}}
	for _, e := range in.Entries {
		if err := one(q, e); err != nil {
			if asError(err).Type == kQueueDoesNotExist.typ {
				return nil, err // the queue went away: the whole request fails
			}
			out.Failed = append(out.Failed, failed(*e.ID, err))
			continue
		}
		out.Successful = append(out.Successful, batchResultEntry{ID: *e.ID})
	}
	return out, nil
}

func deleteMessageBatch(rc *request, in *batchInput) (any, error) {
	return rc.s.batch(in, func(q *sqsQueue, e batchEntry) error { return rc.s.deleteOne(q, e.ReceiptHandle) })
}

func changeMessageVisibilityBatch(rc *request, in *batchInput) (any, error) {
	return rc.s.batch(in, func(q *sqsQueue, e batchEntry) error {
		vis := e.VisibilityTimeout
		if vis == nil {
			zero := 0 // the SDK leaves a 0 out of a batch entry
			vis = &zero
		}
		return rc.s.changeOne(q, e.ReceiptHandle, vis)
	})
}
