package sqsserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/google/uuid"
)

// snsMaxMessage is SNS's limit on a message and its attributes, and on a
// batch's total.
const snsMaxMessage = 262_144

// notification is the JSON envelope SNS delivers to a queue when the
// subscription's RawMessageDelivery is false, its fields in AWS's order.
type notification struct {
	Type              string                  `json:"Type"`
	MessageID         string                  `json:"MessageId"`
	SequenceNumber    string                  `json:"SequenceNumber,omitempty"`
	TopicArn          string                  `json:"TopicArn"`
	Subject           *string                 `json:"Subject,omitempty"`
	Message           string                  `json:"Message"`
	Timestamp         string                  `json:"Timestamp"`
	SignatureVersion  string                  `json:"SignatureVersion"`
	Signature         string                  `json:"Signature"`
	SigningCertURL    string                  `json:"SigningCertURL"`
	UnsubscribeURL    string                  `json:"UnsubscribeURL"`
	MessageAttributes map[string]envelopeAttr `json:"MessageAttributes,omitempty"`
}

type envelopeAttr struct {
	Type  string `json:"Type"`
	Value string `json:"Value"`
}

// snsMessage is one publish, checked.
type snsMessage struct {
	id, seq  string
	message  string // for a queue: the "sqs" or "default" text of a JSON structure
	subject  *string
	attrs    map[string]snsAttributeValue
	group    *string
	dedup    *string
	bodyJSON map[string]any // the message as a JSON object, for a MessageBody filter; nil if it is not one
}

func publish(rc *request, in *publishInput) (any, error) {
	if in.PhoneNumber != nil {
		return nil, kSNSInvalidParameter.new("Invalid parameter: PhoneNumber Reason: leasebus-sqs publishes to topics only")
	}
	arn := in.TopicArn
	if arn == nil {
		arn = in.TargetArn
	}
	s := rc.s
	s.mu.RLock()
	t, err := s.topicLocked(arn, "TopicArn or TargetArn")
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	m, err := rc.checkPublish(t, in.Message, in.Subject, in.MessageStructure, in.MessageAttributes, in.MessageGroupID, in.MessageDeduplicationID)
	if err != nil {
		return nil, err
	}
	rc.deliver(t, m)
	return publishOutput{MessageID: m.id, SequenceNumber: m.seq}, nil
}

func publishBatch(rc *request, in *publishBatchInput) (any, error) {
	s := rc.s
	s.mu.RLock()
	t, err := s.topicLocked(in.TopicArn, "TopicArn")
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	ids := make([]*string, len(in.Entries))
	total := 0
	for i, e := range in.Entries {
		ids[i] = e.ID
		if e.Message != nil {
			total += len(*e.Message)
		}
		for k, a := range e.MessageAttributes {
			total += len(k) + len(a.DataType) + len(a.BinaryValue)
			if a.StringValue != nil {
				total += len(*a.StringValue)
			}
		}
	}
	if err := checkBatchIDs(ids); err != nil {
		kind := map[string]errorKind{kEmptyBatch.typ: kSNSEmptyBatch, kTooManyEntries.typ: kSNSTooManyEntries,
			kBatchIDsNotDistinct.typ: kSNSBatchIDsDuplicate, kInvalidBatchEntryID.typ: kSNSInvalidBatchID, kMissingParameter.typ: kSNSInvalidParameter}
		e := asError(err)
		if k, ok := kind[e.Type]; ok {
			return nil, k.new("%s", e.Message)
		}
		return nil, e
	}
	if total > snsMaxMessage {
		return nil, kSNSBatchTooLong.new("The batch request is too long: %d bytes, at most %d.", total, snsMaxMessage)
	}
	out := publishBatchOutput{Successful: []publishBatchResultEntry{}, Failed: []batchResultError{}}
	for _, e := range in.Entries {
		m, err := rc.checkPublish(t, e.Message, e.Subject, e.MessageStructure, e.MessageAttributes, e.MessageGroupID, e.MessageDeduplicationID)
		if err != nil {
			out.Failed = append(out.Failed, failed(*e.ID, err))
			continue
		}
		rc.deliver(t, m)
		out.Successful = append(out.Successful, publishBatchResultEntry{ID: *e.ID, publishOutput: publishOutput{MessageID: m.id, SequenceNumber: m.seq}})
	}
	return out, nil
}

// checkPublish checks one message for topic t and gives it its ID (and,
// on a FIFO topic, its sequence number and deduplication ID).
func (rc *request) checkPublish(t *snsTopic, message, subject, structure *string, attrs map[string]snsAttributeValue, group, dedup *string) (*snsMessage, error) {
	if message == nil || *message == "" {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Empty message")
	}
	m := &snsMessage{id: uuid.NewString(), message: *message, subject: subject, attrs: attrs, group: group, dedup: dedup}
	size := len(*message)
	for k, a := range attrs {
		size += len(k) + len(a.DataType) + len(a.BinaryValue)
		switch base, _, _ := strings.Cut(a.DataType, "."); {
		case base == "Binary":
		case base == "String" || base == "Number":
			if a.StringValue == nil {
				return nil, kSNSInvalidValue.new("The message attribute '%s' must contain non-empty message attribute value for message attribute type '%s'.", k, a.DataType)
			}
			size += len(*a.StringValue)
		default:
			return nil, kSNSInvalidValue.new("The message attribute '%s' has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String.", k)
		}
	}
	if len(attrs) > maxAttributes {
		return nil, kSNSInvalidValue.new("Number of message attributes [%d] exceeds the allowed maximum [%d].", len(attrs), maxAttributes)
	}
	if size > snsMaxMessage {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Message too long")
	}
	if subject != nil && (*subject == "" || len(*subject) > 100 || strings.ContainsAny(*subject, "\n\r")) {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Subject")
	}
	if structure != nil && *structure != "" {
		if *structure != "json" {
			return nil, kSNSInvalidParameter.new("Invalid parameter: MessageStructure")
		}
		var parts map[string]string
		if json.Unmarshal([]byte(*message), &parts) != nil || parts["default"] == "" {
			return nil, kSNSInvalidParameter.new("Invalid parameter: Message Structure - No default entry in JSON message body")
		}
		m.message = parts["default"]
		if q, ok := parts["sqs"]; ok {
			m.message = q
		}
	}
	_ = jsonValues([]byte(m.message), &m.bodyJSON) // not an object: nil, and no body filter matches
	if t.fifo {
		if group == nil || *group == "" {
			return nil, kSNSInvalidParameter.new("Invalid parameter: The MessageGroupId parameter is required for FIFO topics")
		}
		if dedup == nil {
			if t.attrs["ContentBasedDeduplication"] != "true" {
				return nil, kSNSInvalidParameter.new("Invalid parameter: The topic should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
			}
			sum := sha256.Sum256([]byte(*message))
			m.dedup = ptr(hex.EncodeToString(sum[:]))
		}
		n, err := rc.s.nextSeq()
		if err != nil {
			return nil, err
		}
		m.seq = fmt.Sprintf("%020d", n)
	} else if dedup != nil {
		return nil, kSNSInvalidParameter.new("Invalid parameter: MessageDeduplicationId Reason: The request includes MessageDeduplicationId parameter that is not valid for this topic type")
	}
	return m, nil
}

// deliver sends m to every queue subscribed to t whose filter policy it
// passes, as SendMessage would: in the JSON envelope, or raw (the message
// itself, its attributes as the queue message's). A delivery its queue
// refuses (the queue is gone, or the message too large for it) goes to
// the subscription's dead-letter queue (RedrivePolicy's
// deadLetterTargetArn, a queue of this server), as SNS does once its
// retries are spent; without one, it is lost. The publish succeeds either
// way, as in SNS.
func (rc *request) deliver(t *snsTopic, m *snsMessage) {
	s := rc.s
	s.mu.RLock()
	subs := make([]*snsSub, len(t.subs))
	copy(subs, t.subs)
	s.mu.RUnlock()
	now := s.clock.Now().UTC()
	for _, sub := range subs {
		if sub.filter != nil {
			if sub.onBody {
				if m.bodyJSON == nil || !sub.filter.matches(bodyLookup(m.bodyJSON)) {
					continue
				}
			} else if !sub.filter.matches(attributeLookup(m.attrs)) {
				continue
			}
		}
		name, ok := s.nameOfARN(sub.endpoint)
		if !ok {
			continue
		}
		in := &sendMessageInput{QueueURL: ptr(rc.queueURL(name)), MessageGroupID: m.group, MessageDeduplicationID: m.dedup}
		if sub.raw {
			in.MessageBody = ptr(m.message)
			in.MessageAttributes = map[string]attributeValue{}
			for k, a := range m.attrs {
				in.MessageAttributes[k] = attributeValue{DataType: a.DataType, StringValue: a.StringValue, BinaryValue: a.BinaryValue}
			}
		} else {
			in.MessageBody = ptr(rc.envelope(t, sub, m, now.Format("2006-01-02T15:04:05.000Z")))
		}
		if _, err := sendMessage(rc, in); err != nil {
			rc.deadLetterDelivery(sub, in)
		}
	}
}

// envelope returns m's notification as a subscription sub gets it.
func (rc *request) envelope(t *snsTopic, sub *snsSub, m *snsMessage, at string) string {
	n := notification{
		Type: "Notification", MessageID: m.id, SequenceNumber: m.seq, TopicArn: t.arn, Subject: m.subject,
		Message: m.message, Timestamp: at, SignatureVersion: "1",
		SigningCertURL: rc.baseURL() + "/leasebus/sns/SimpleNotificationService.pem",
		UnsubscribeURL: rc.baseURL() + "/?Action=Unsubscribe&SubscriptionArn=" + url.QueryEscape(sub.arn),
	}
	if len(m.attrs) > 0 {
		n.MessageAttributes = map[string]envelopeAttr{}
		for k, a := range m.attrs {
			v := ""
			if a.StringValue != nil {
				v = *a.StringValue
			}
			if strings.HasPrefix(a.DataType, "Binary") {
				v = base64.StdEncoding.EncodeToString(a.BinaryValue)
			}
			n.MessageAttributes[k] = envelopeAttr{Type: a.DataType, Value: v}
		}
	}
	// Not AWS's signature (its key is AWS's): an HMAC of the fields SNS
	// signs, under the server's key, so that it is stable and checkable by
	// this server alone.
	mac := hmac.New(sha256.New, rc.s.key)
	for _, f := range []string{"Message", n.Message, "MessageId", n.MessageID, "Timestamp", n.Timestamp, "TopicArn", n.TopicArn, "Type", n.Type} {
		mac.Write([]byte(f + "\n"))
	}
	n.Signature = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as AWS writes it: <, > and & as they are
	_ = enc.Encode(n)        // strings and maps of strings: no error
	return strings.TrimSuffix(b.String(), "\n")
}

// deadLetterDelivery sends a delivery that its queue refused to the
// subscription's dead-letter queue, if it has one.
func (rc *request) deadLetterDelivery(sub *snsSub, in *sendMessageInput) {
	var p struct {
		Target string `json:"deadLetterTargetArn"`
	}
	rc.s.mu.RLock()
	policy := sub.attrs["RedrivePolicy"]
	rc.s.mu.RUnlock()
	if policy == "" || json.Unmarshal([]byte(policy), &p) != nil {
		return
	}
	name, ok := rc.s.nameOfARN(p.Target)
	if !ok {
		return
	}
	in.QueueURL = ptr(rc.queueURL(name))
	_, _ = sendMessage(rc, in) // a dead-letter queue that refuses it too: lost, as in SNS
}
