package sqsleasebus

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// acker coalesces concurrent Acks into DeleteMessageBatch calls, as a
// group commit does: an Ack that finds no delete in flight sends its own
// at once (no timer, nothing added to a lone Ack's latency), and the Acks
// that come while one is in flight wait and go together in the next, up
// to SQS's 10; the first of them sends it. Each Ack returns its own
// entry's result.
type acker struct {
	mu     sync.Mutex
	flying bool       // a delete is in flight
	queue  []*ackWait // Acks waiting for the next one
}

// ackWait is one Ack's place in the acker.
type ackWait struct {
	handle *string
	err    error
	done   chan struct{} // closed when err is set, or when this Ack is to send the next batch
	batch  []*ackWait    // set for the Ack that sends the next batch (itself first)
}

// deleteAck deletes the message of the receipt handle, with other Acks
// of the moment in one request.
func (s *Subscription[T]) deleteAck(handle *string) error {
	w := &ackWait{handle: handle, done: make(chan struct{})}
	a := &s.acks
	a.mu.Lock()
	if a.flying {
		a.queue = append(a.queue, w)
		a.mu.Unlock()
		<-w.done
		if w.batch == nil {
			return w.err // sent in another's batch
		}
	} else {
		a.flying = true
		w.batch = []*ackWait{w}
		a.mu.Unlock()
	}
	s.sendAcks(w.batch)
	// Hand the next batch to the first waiting, or end the flight.
	a.mu.Lock()
	if len(a.queue) > 0 {
		n := min(len(a.queue), maxBatch)
		next := a.queue[0]
		next.batch = append([]*ackWait(nil), a.queue[:n]...)
		a.queue = a.queue[n:]
		a.mu.Unlock()
		close(next.done)
	} else {
		a.flying = false
		a.mu.Unlock()
	}
	return w.err
}

// sendAcks deletes the batch's messages (one DeleteMessage for one), sets
// each one's err and wakes the others.
func (s *Subscription[T]) sendAcks(batch []*ackWait) {
	ctx, cancel := s.settleCtx()
	defer cancel()
	if len(batch) == 1 {
		_, batch[0].err = s.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(s.url), ReceiptHandle: batch[0].handle})
		return
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, len(batch))
	for i, w := range batch {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: w.handle}
	}
	out, err := s.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.url), Entries: entries})
	if err == nil {
		answered := make([]bool, len(batch))
		for _, ok := range out.Successful {
			if i, ok := entryIndex(ok.Id, 0, len(batch)); ok {
				answered[i] = true
			}
		}
		for _, f := range out.Failed {
			if i, ok := entryIndex(f.Id, 0, len(batch)); ok {
				answered[i] = true
				batch[i].err = &smithy.GenericAPIError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message)}
			}
		}
		for i, done := range answered {
			if !done {
				batch[i].err = fmt.Errorf("DeleteMessageBatch did not answer entry %d", i)
			}
		}
	} else {
		for _, w := range batch {
			w.err = err
		}
	}
	for _, w := range batch[1:] {
		close(w.done)
	}
}

// entryIndex reads a batch entry's Id, the index it was sent with, which
// must be in [lo, hi): an answer that names another is ignored.
func entryIndex(id *string, lo, hi int) (int, bool) {
	i, err := strconv.Atoi(aws.ToString(id))
	return i, err == nil && i >= lo && i < hi
}

// AckBatch deletes the messages of many leases, each as Ack would, in
// DeleteMessageBatch calls of up to 10 in flight at once. It returns nil
// when every lease was acked, else a *queue.BatchError whose Errs[i] is
// ids[i]'s error (nil for those acked). An empty ids is nil.
func (s *Subscription[T]) AckBatch(ids []lease.ID) error {
	errs := make([]error, len(ids))
	helds := make([]*held, len(ids))
	var ws []*ackWait // the leases found, each with its place in ids
	var at []int
	for i, id := range ids {
		h, err := s.take(id, "ack", false)
		if err != nil {
			errs[i] = err
			continue
		}
		helds[i] = h
		ws = append(ws, &ackWait{handle: h.m.ReceiptHandle, done: make(chan struct{})})
		at = append(at, i)
	}
	var wg sync.WaitGroup
	for lo := 0; lo < len(ws); lo += maxBatch {
		wg.Go(func() { s.sendAcks(ws[lo:min(lo+maxBatch, len(ws))]) })
	}
	wg.Wait()
	for j, w := range ws {
		i := at[j]
		errs[i] = s.acked(ids[i], helds[i], w.err)
	}
	return queue.NewBatchError(errs)
}
