package sqsserver

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// outgoing is one message checked and ready to publish.
type outgoing struct {
	msg   message
	delay time.Duration
	dedup string // the broker's dedup ID, namespaced (FIFO)
	out   sendMessageOutput
}

// sendArgs are the fields SendMessage and a SendMessageBatch entry share.
type sendArgs struct {
	body     *string
	delay    *int
	attrs    map[string]attributeValue
	sysAttrs map[string]attributeValue
	dedup    *string
	group    *string
}

// prepare checks one message against SQS's rules and the queue's
// attributes.
func (rc *request) prepare(q *sqsQueue, st settings, a sendArgs) (*outgoing, error) {
	if a.body == nil || *a.body == "" {
		return nil, kMissingParameter.new("The request must contain the parameter MessageBody.")
	}
	body := *a.body
	if r, ok := validText(body); !ok {
		return nil, kInvalidMessage.new("Invalid binary character '%U' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF", r)
	}
	attrs, err := parseAttributes(a.attrs, false)
	if err != nil {
		return nil, err
	}
	sys, err := parseAttributes(a.sysAttrs, true)
	if err != nil {
		return nil, err
	}
	if size := len(body) + attributesSize(attrs); size > st.maxSize {
		return nil, kInvalidParameterValue.new("One or more parameters are invalid. Reason: Message must be shorter than %d bytes (this one is %d, body and attributes).", st.maxSize, size)
	}
	delay := st.delay
	if a.delay != nil {
		switch d := *a.delay; {
		case d < 0 || d > maxDelay:
			return nil, kInvalidParameterValue.new("Value %d for parameter DelaySeconds is invalid. Reason: must be between 0 and %d, if provided.", d, maxDelay)
		case q.fifo && d != 0:
			return nil, kInvalidParameterValue.new("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type (a FIFO queue takes its delay from the queue's DelaySeconds).", d)
		default:
			if !q.fifo {
				delay = d
			}
		}
	}
	o := &outgoing{delay: time.Duration(delay) * time.Second}
	o.msg = message{Body: body, Attributes: attrs, MD5: md5Hex(body), SenderID: rc.sender}
	if len(sys) == 1 {
		o.msg.TraceHeader = sys[0].String
	}
	if a.group != nil {
		if g := *a.group; g == "" || len(g) > maxGroupOrDedupID || !groupIDRE.MatchString(g) {
			return nil, kInvalidParameterValue.new("Value %q for parameter MessageGroupId is invalid. Reason: 1 to 128 alphanumeric or punctuation characters.", g)
		}
		o.msg.GroupID = *a.group
	}
	if q.fifo {
		if a.group == nil {
			return nil, kMissingParameter.new("The request must contain the parameter MessageGroupId.")
		}
		switch {
		case a.dedup != nil:
			if d := *a.dedup; d == "" || len(d) > maxGroupOrDedupID || !groupIDRE.MatchString(d) {
				return nil, kInvalidParameterValue.new("Value %q for parameter MessageDeduplicationId is invalid. Reason: 1 to 128 alphanumeric or punctuation characters.", d)
			}
			o.msg.DedupID = *a.dedup
		case st.cbd:
			sum := sha256.Sum256([]byte(body))
			o.msg.DedupID = hex.EncodeToString(sum[:])
		default:
			return nil, kInvalidParameterValue.new("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
		}
		o.dedup = "q\x00" + o.msg.DedupID
		if st.groupScope {
			o.dedup = "g\x00" + o.msg.GroupID + "\x00" + o.msg.DedupID
		}
	} else if a.dedup != nil {
		return nil, kInvalidParameterValue.new("The request include parameter MessageDeduplicationId that is not valid for this queue type")
	}
	o.out = sendMessageOutput{
		MD5OfMessageBody:             o.msg.MD5,
		MD5OfMessageAttributes:       attributesMD5(attrs),
		MD5OfMessageSystemAttributes: attributesMD5(sys),
	}
	return o, nil
}

// options are the publish options of o on a queue with settings st.
func (o *outgoing) options(q *sqsQueue, st settings) []broker.PublishOption {
	opts := []broker.PublishOption{broker.WithTTL(time.Duration(st.retention) * time.Second)}
	if o.delay > 0 {
		opts = append(opts, broker.WithDelay(o.delay))
	}
	switch {
	case q.fifo:
		opts = append(opts, broker.WithKey(o.msg.GroupID), broker.WithDedupID(o.dedup))
	case o.msg.GroupID != "": // a fair queue's tenant: its groups take turns (see attach)
		opts = append(opts, broker.WithKey(o.msg.GroupID))
	}
	return opts
}

// sent fills the output of a message the broker stored as m (for a
// duplicate, the original).
func (o *outgoing) sent(m queue.Message[message]) sendMessageOutput {
	out := o.out
	out.MessageID = messageID(m)
	if m.Payload.Sequence != 0 {
		out.SequenceNumber = formatSeq(m.Payload.Sequence)
	}
	return out
}

func messageID(m queue.Message[message]) string {
	if m.Payload.MessageID != "" {
		return m.Payload.MessageID
	}
	return m.ID.String()
}

func formatSeq(n uint64) string { return fmt.Sprintf("%020d", n) }

// publish publishes one prepared message.
func (rc *request) publish(q *sqsQueue, st settings, o *outgoing) (sendMessageOutput, error) {
	if q.fifo {
		q.sendMu.Lock() // the group's order is the order of the sequence numbers
		defer q.sendMu.Unlock()
		n, err := rc.s.nextSeq()
		if err != nil {
			return sendMessageOutput{}, err
		}
		o.msg.Sequence = n
	}
	m, err := rc.s.b.Publish(rc.storeCtx(), q.name, o.msg, o.options(q, st)...)
	if err != nil {
		return sendMessageOutput{}, rc.s.publishError(err)
	}
	return o.sent(m), nil
}

func (s *Server) publishError(err error) error {
	switch {
	case errors.Is(err, queue.ErrQueueFull), errors.Is(err, broker.ErrDedupFull):
		return kOverLimit.new("%v", err)
	case errors.Is(err, broker.ErrTopicNotFound):
		return kQueueDoesNotExist.new("The specified queue does not exist.")
	}
	return s.brokerError(err)
}

func sendMessage(rc *request, in *sendMessageInput) (any, error) {
	q, err := rc.s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	st := q.settings()
	o, err := rc.prepare(q, st, sendArgs{in.MessageBody, in.DelaySeconds, in.MessageAttributes, in.MessageSystemAttributes, in.MessageDeduplicationID, in.MessageGroupID})
	if err != nil {
		return nil, err
	}
	return rc.publish(q, st, o)
}

// checkBatchIDs checks a batch's entry IDs: some, at most 10, each 1 to 80
// alphanumerics, hyphens or underscores, all distinct.
func checkBatchIDs(ids []*string) error {
	switch {
	case len(ids) == 0:
		return kEmptyBatch.new("There should be at least one entry in the request.")
	case len(ids) > maxBatchEntries:
		return kTooManyEntries.new("Maximum number of entries per request are %d. You have sent %d.", maxBatchEntries, len(ids))
	}
	seen := make(map[string]bool, len(ids))
	for _, p := range ids {
		if p == nil {
			return kMissingParameter.new("The request must contain the parameter Id in every entry.")
		}
		id := *p
		if id == "" || len(id) > maxBatchEntryID || !idRE.MatchString(id) {
			return kInvalidBatchEntryID.new("A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most %d letters long: %q.", maxBatchEntryID, id)
		}
		if seen[id] {
			return kBatchIDsNotDistinct.new("Id %s repeated.", id)
		}
		seen[id] = true
	}
	return nil
}

func failed(id string, err error) batchResultError {
	e := asError(err)
	return batchResultError{ID: id, SenderFault: e.Sender, Code: e.Type, Message: e.Message}
}

// batchSize is what SQS counts toward a batch's 1 MiB: the
// bodies, and the attributes' names, types and values.
func batchSize(entries []sendMessageBatchEntry) int {
	total := 0
	for _, e := range entries {
		if e.MessageBody != nil {
			total += len(*e.MessageBody)
		}
		for name, a := range e.MessageAttributes {
			total += len(name) + len(a.DataType) + len(a.BinaryValue)
			if a.StringValue != nil {
				total += len(*a.StringValue)
			}
		}
	}
	return total
}

func sendMessageBatch(rc *request, in *sendMessageBatchInput) (any, error) {
	q, err := rc.s.queueOf(in.QueueURL)
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
	if total := batchSize(in.Entries); total > maxMessageSizeLimit {
		return nil, kBatchTooLong.new("Batch requests cannot be longer than %d bytes. You have sent %d bytes.", maxMessageSizeLimit, total)
	}
	st := q.settings()
	out := sendMessageBatchOutput{Successful: []sendMessageBatchResultEntry{}, Failed: []batchResultError{}}
	ready := make([]*outgoing, len(in.Entries))
	for i, e := range in.Entries {
		o, err := rc.prepare(q, st, sendArgs{e.MessageBody, e.DelaySeconds, e.MessageAttributes, e.MessageSystemAttributes, e.MessageDeduplicationID, e.MessageGroupID})
		if err != nil {
			out.Failed = append(out.Failed, failed(*e.ID, err))
			continue
		}
		ready[i] = o
	}
	if q.fifo {
		// One by one, in order: each has its key, dedup ID and sequence number.
		for i, o := range ready {
			if o == nil {
				continue
			}
			res, err := rc.publish(q, st, o)
			if err != nil {
				out.Failed = append(out.Failed, failed(*in.Entries[i].ID, err))
				continue
			}
			out.Successful = append(out.Successful, sendMessageBatchResultEntry{ID: *in.Entries[i].ID, sendMessageOutput: res})
		}
		return out, nil
	}
	rc.publishStandard(q, st, in.Entries, ready, &out)
	return out, nil
}

// publishStandard publishes the prepared entries of a standard queue's
// batch (ready[i] nil: entry i failed its checks) with one PublishBatch
// per delay and message group (usually one), so a durable server waits for
// the disk once, and reports each in out.
func (rc *request) publishStandard(q *sqsQueue, st settings, entries []sendMessageBatchEntry, ready []*outgoing, out *sendMessageBatchOutput) {
	type batch struct {
		delay time.Duration
		group string
	}
	byBatch := map[batch][]int{}
	var batches []batch
	for i, o := range ready {
		if o == nil {
			continue
		}
		k := batch{o.delay, o.msg.GroupID}
		if _, ok := byBatch[k]; !ok {
			batches = append(batches, k)
		}
		byBatch[k] = append(byBatch[k], i)
	}
	for _, k := range batches {
		idx := byBatch[k]
		payloads := make([]message, len(idx))
		for j, i := range idx {
			payloads[j] = ready[i].msg
		}
		ms, err := rc.s.b.PublishBatch(rc.storeCtx(), q.name, payloads, ready[idx[0]].options(q, st)...)
		for j, i := range idx {
			id := *entries[i].ID
			if err != nil {
				// The queue was deleted or the server closed (nothing
				// stored), or the queue holds 2^31 messages: the entries
				// are reported failed, though a full queue may have taken
				// some of them.
				out.Failed = append(out.Failed, failed(id, rc.s.publishError(err)))
				continue
			}
			out.Successful = append(out.Successful, sendMessageBatchResultEntry{ID: id, sendMessageOutput: ready[i].sent(ms[j])})
		}
	}
}
