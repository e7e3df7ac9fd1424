package sqsserver

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

type delivery = queue.Delivery[message]

func receiveMessage(rc *request, in *receiveMessageInput) (any, error) {
	s := rc.s
	q, err := s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	st := q.settings()
	n := 1
	if p := in.MaxNumberOfMessages; p != nil {
		if *p < 1 || *p > maxBatchEntries {
			return nil, kInvalidParameterValue.new("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", *p)
		}
		n = *p
	}
	vis := st.visibility
	if p := in.VisibilityTimeout; p != nil {
		if *p < 0 || *p > maxVisibility {
			return nil, kInvalidParameterValue.new("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200, if provided.", *p)
		}
		vis = *p
	}
	wait := st.wait
	if p := in.WaitTimeSeconds; p != nil {
		if *p < 0 || *p > maxWait {
			return nil, kInvalidParameterValue.new("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.", *p)
		}
		wait = *p
	}
	ds, now, err := s.lease(rc.ctx(), q, st, n, time.Duration(vis)*time.Second, time.Duration(wait)*time.Second)
	if err != nil {
		return nil, err
	}
	names := append(slices.Clone(in.AttributeNames), in.MessageSystemAttributeNames...)
	out := receiveMessageOutput{Messages: make([]wireMessage, 0, len(ds))}
	for _, d := range ds {
		out.Messages = append(out.Messages, s.wire(q, d, now, names, in.MessageAttributeNames))
	}
	if vis == 0 {
		// Visible again at once, the receive counted (a 0 visibility
		// timeout): as after ChangeMessageVisibility to 0, the handle
		// still deletes the message until it is received again.
		for _, d := range ds {
			if q.sub.Nack(d.LeaseID, 0) == nil {
				q.reset(d.LeaseID)
			}
		}
	}
	return out, nil
}

// lease takes up to n messages for vis (0: made visible again by the
// caller), waiting up to wait on the server's clock for one. It returns
// when at least one is leased, when the wait is over (none), or when ctx
// ends (the client is gone, or the HTTP server shuts down:
// ServiceUnavailable). Messages deleted after a reset or past the queue's
// retention are deleted on the way, and those received more than the
// RedrivePolicy's maxReceiveCount are moved to the dead-letter queue; none
// of them counts toward n.
func (s *Server) lease(ctx context.Context, q *sqsQueue, st settings, n int, vis, wait time.Duration) ([]delivery, time.Time, error) {
	if vis == 0 {
		vis = time.Second // then nacked at once by the caller
	}
	if wait == 0 {
		return s.shortPoll(ctx, q, st, n, vis)
	}
	pctx, stop := s.waitUntil(ctx, s.clock.Now().Add(wait))
	defer stop()
	for {
		ds, err := q.sub.PollWithVisibility(pctx, n, vis)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, time.Time{}, kUnavailable.new("The receive ended before a message was visible: the server is shutting down, or the client went away.")
		case pctx.Err() != nil:
			return nil, s.clock.Now(), nil // the wait is over
		default:
			return nil, time.Time{}, s.brokerError(err)
		}
		now := s.clock.Now()
		if kept := s.sift(ctx, q, st, ds, now); len(kept) > 0 {
			return kept, now, nil
		}
	}
}

// shortPoll takes up to n of the messages visible now, without waiting.
// When sift drops some of them (each for good: deleted, or moved to the
// dead-letter queue) it takes again for the places left, so that a receive
// of 1 gets the next message rather than nothing.
func (s *Server) shortPoll(ctx context.Context, q *sqsQueue, st settings, n int, vis time.Duration) ([]delivery, time.Time, error) {
	var out []delivery
	buf := make([]delivery, n)
	for {
		k, err := q.sub.TryPollInto(buf[:n-len(out)])
		if err != nil {
			return nil, time.Time{}, s.brokerError(err)
		}
		ds := buf[:k]
		if vis != defaultVis*time.Second {
			ds = s.extend(q, ds, vis)
		}
		now := s.clock.Now()
		kept := s.sift(ctx, q, st, ds, now)
		out = append(out, kept...)
		if len(kept) == len(ds) || len(out) == n {
			return out, now, nil
		}
	}
}

// extend gives short-polled deliveries (leased for the subscription's
// default) their receive's visibility timeout.
func (s *Server) extend(q *sqsQueue, ds []delivery, vis time.Duration) []delivery {
	kept := ds[:0]
	for _, d := range ds {
		if err := q.sub.Extend(d.LeaseID, vis); err != nil {
			continue // expired already (a real clock that stalled 30 s): it is visible again
		}
		d.Deadline = s.clock.Now().Add(vis)
		kept = append(kept, d)
	}
	return kept
}

// waitUntil returns a context that ends at deadline on the server's clock,
// or with ctx, and the func that releases it. The wake-up is a
// backend.At wake-up, never a mock's channel timer.
func (s *Server) waitUntil(ctx context.Context, deadline time.Time) (context.Context, func()) {
	pctx, cancel := context.WithCancel(ctx)
	t := backend.At(s.clock, deadline)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-t.C:
			cancel()
		case <-pctx.Done():
		}
	}()
	return pctx, func() {
		cancel()
		t.Stop()
		<-done
	}
}

// sentAt is a message's SentTimestamp: when it was first sent, also after
// a move to or from a dead-letter queue.
func sentAt(m queue.Message[message]) time.Time {
	if m.Payload.SentAt != 0 {
		return time.UnixMilli(m.Payload.SentAt)
	}
	return m.PublishedAt
}

// sift deletes the deliveries of messages deleted after a reset or past
// retention, moves those past maxReceiveCount to the dead-letter queue,
// and returns the others.
func (s *Server) sift(ctx context.Context, q *sqsQueue, st settings, ds []delivery, now time.Time) []delivery {
	kept := ds[:0]
	retention := time.Duration(st.retention) * time.Second
	for _, d := range ds {
		if q.takeDeleted(d) {
			_ = q.sub.Ack(d.LeaseID) // deleted after a reset, with its handle
			continue
		}
		if !now.Before(sentAt(d.Message).Add(retention)) {
			_ = q.sub.Ack(d.LeaseID) // past retention (shortened since it was sent): deleted
			q.forget(d.LeaseID.Seq())
			continue
		}
		if p := st.redrive; p != nil && d.Attempt > p.MaxReceiveCount && s.moveToDeadLetters(ctx, q, p, d, now) {
			continue
		}
		kept = append(kept, d)
	}
	return kept
}

// moveToDeadLetters moves a delivery to the queue's dead-letter queue (see
// moveTo), naming the source (DeadLetterQueueSourceArn). It reports false,
// and the message is delivered as usual, if the dead-letter queue no
// longer exists (as SQS does) or refuses it.
func (s *Server) moveToDeadLetters(ctx context.Context, q *sqsQueue, p *redrivePolicy, d delivery, now time.Time) bool {
	name, ok := s.nameOfARN(p.DeadLetterTargetArn)
	if !ok {
		return false
	}
	dlq, err := s.queue(name)
	if err != nil {
		return false
	}
	m := d.Payload
	m.SourceArn = s.arn(q.name)
	return s.moveTo(ctx, q, d, dlq, m, now)
}

// moveTo moves the delivery d, which src has leased, to dst as m, in one
// step (broker.Subscription.Forward: in a durable server, one journal
// commit, so a crash leaves it in one queue or the other, never both and
// never neither): MessageId and SentTimestamp kept, the receive count
// starting again, its retention on dst counted from the original send. A
// message already past dst's retention is deleted, and counts as moved. It
// reports false, with d still leased, if dst refuses it.
func (s *Server) moveTo(ctx context.Context, src *sqsQueue, d delivery, dst *sqsQueue, m message, now time.Time) bool {
	from := d.Message
	st := dst.settings()
	m.MessageID = messageID(from)
	m.SentAt = sentAt(from).UnixMilli()
	left := sentAt(from).Add(time.Duration(st.retention) * time.Second).Sub(now)
	if left <= 0 {
		_ = src.sub.Ack(d.LeaseID) // we hold the lease we just took
		src.forget(d.LeaseID.Seq())
		return true
	}
	opts := []broker.PublishOption{broker.WithTTL(left)}
	if dst.fifo {
		dst.sendMu.Lock() // the group's order is the order of the sequence numbers
		defer dst.sendMu.Unlock()
		seq, err := s.nextSeq()
		if err != nil {
			return false
		}
		m.Sequence = seq
		if m.GroupID != "" {
			opts = append(opts, broker.WithKey(m.GroupID))
		}
	} else {
		m.Sequence, m.DedupID = 0, ""
		if m.GroupID != "" { // a fair queue's tenant
			opts = append(opts, broker.WithKey(m.GroupID))
		}
	}
	_, err := src.sub.Forward(ctx, d.LeaseID, dst.name, m, opts...)
	if err != nil && !errors.Is(err, queue.ErrLeaseExpired) {
		return false // refused: nothing moved, still leased
	}
	// Moved; or the lease was lost meanwhile (its visibility passed and
	// another receive took the message), so this receive owns it no more
	// either way.
	src.forget(d.LeaseID.Seq())
	return true
}

// wire is a delivery as ReceiveMessage returns it, with the system
// attributes in names and the message attributes in attrNames.
func (s *Server) wire(q *sqsQueue, d delivery, now time.Time, names, attrNames []string) wireMessage {
	m := d.Payload
	first := q.record(d, now)
	w := wireMessage{
		MessageID:     messageID(d.Message),
		ReceiptHandle: s.encodeHandle(receipt{gen: q.gen, lease: d.LeaseID, receivedAt: now}),
		MD5OfBody:     m.MD5,
		Body:          m.Body,
	}
	if w.MD5OfBody == "" {
		w.MD5OfBody = md5Hex(m.Body)
	}
	all := slices.Contains(names, "All")
	want := func(n string) bool { return all || slices.Contains(names, n) }
	attrs := map[string]string{}
	set := func(k, v string) {
		if v != "" && want(k) {
			attrs[k] = v
		}
	}
	set("SenderId", m.SenderID)
	set("SentTimestamp", strconv.FormatInt(sentAt(d.Message).UnixMilli(), 10))
	set("ApproximateReceiveCount", strconv.Itoa(d.Attempt))
	set("ApproximateFirstReceiveTimestamp", strconv.FormatInt(first.UnixMilli(), 10))
	set("MessageGroupId", m.GroupID)
	set("AWSTraceHeader", m.TraceHeader)
	set("DeadLetterQueueSourceArn", m.SourceArn)
	if q.fifo {
		set("MessageDeduplicationId", m.DedupID)
		if m.Sequence != 0 {
			set("SequenceNumber", formatSeq(m.Sequence))
		}
	}
	if len(attrs) > 0 {
		w.Attributes = attrs
	}
	if sel := selectAttributes(m.Attributes, attrNames); len(sel) > 0 {
		w.MessageAttributes = make(map[string]attributeValue, len(sel))
		for _, a := range sel {
			w.MessageAttributes[a.Name] = a.wire()
		}
		w.MD5OfMessageAttributes = attributesMD5(sel)
	}
	return w
}
