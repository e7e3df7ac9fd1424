package sqsserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/google/uuid"
)

// SNS's limits on a message and its attributes (a topic's
// MaximumMessageSize, by default the limit on a batch's total too).
const (
	snsMaxMessage    = 262_144   // the default
	snsMinMessageMax = 1024      // the least MaximumMessageSize
	snsMaxMessageMax = 1_048_576 // the most
)

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
	if limit := max(t.maxMessageSize(), snsMaxMessage); total > limit {
		return nil, kSNSBatchTooLong.new("The batch request is too long: %d bytes, at most %d.", total, limit)
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
// on a FIFO topic, its sequence number and deduplication ID). It refuses
// everything a queue would refuse of it as SendMessage: a publish that
// succeeds is never refused later by a queue for what it carries.
//
// A MessageGroupId on a standard topic is valid (AWS forwards it to SQS
// standard queues, whose fair queues use it) and checked as on a FIFO
// topic; a MessageDeduplicationId there is not.
func (rc *request) checkPublish(t *snsTopic, message, subject, structure *string, attrs map[string]snsAttributeValue, group, dedup *string) (*snsMessage, error) {
	if message == nil || *message == "" {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Empty message")
	}
	m := &snsMessage{id: uuid.NewString(), message: *message, subject: subject, attrs: attrs, group: group, dedup: dedup}
	if len(attrs) > maxAttributes {
		return nil, kSNSInvalidValue.new("Number of message attributes [%d] exceeds the allowed maximum [%d].", len(attrs), maxAttributes)
	}
	size := len(*message)
	for k, a := range attrs {
		if err := checkSNSAttribute(k, a); err != nil {
			return nil, err
		}
		size += len(k) + len(a.DataType) + len(a.BinaryValue)
		if a.StringValue != nil {
			size += len(*a.StringValue)
		}
	}
	if limit := t.maxMessageSize(); size > limit {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Message too long: %d bytes with its attributes, the topic's MaximumMessageSize is %d", size, limit)
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
	if t.fifo && (group == nil || *group == "") {
		return nil, kSNSInvalidParameter.new("Invalid parameter: The MessageGroupId parameter is required for FIFO topics")
	}
	if err := checkSNSID("MessageGroupId", group); err != nil {
		return nil, err
	}
	if err := checkSNSID("MessageDeduplicationId", dedup); err != nil {
		return nil, err
	}
	if t.fifo {
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

// checkSNSID checks a group or deduplication ID, if given: 1 to 128
// alphanumeric or punctuation characters.
func checkSNSID(param string, v *string) error {
	if v != nil && (*v == "" || len(*v) > maxGroupOrDedupID || !groupIDRE.MatchString(*v)) {
		return kSNSInvalidParameter.new("Invalid parameter: %s Reason: 1 to 128 alphanumeric or punctuation characters", param)
	}
	return nil
}

// checkSNSAttribute checks message attribute name, a, as SQS's SendMessage
// checks one (its name, type and value; a Number's range and digits), and a
// String.Array's value is a JSON array of strings, numbers, booleans and
// nulls. Its errors are SNS's InvalidParameterValue.
func checkSNSAttribute(name string, a snsAttributeValue) error {
	err := checkAttributeName(name)
	if err == nil {
		_, err = checkAttributeValue("message attribute", name, attributeValue{DataType: a.DataType, StringValue: a.StringValue, BinaryValue: a.BinaryValue})
	}
	if err != nil {
		return kSNSInvalidValue.new("%s", asError(err).Message)
	}
	if a.DataType == "String.Array" {
		var vs []any
		if json.Unmarshal([]byte(*a.StringValue), &vs) != nil {
			return kSNSInvalidValue.new("The message attribute '%s' with type 'String.Array' must be a JSON array.", name)
		}
		for _, v := range vs {
			switch v.(type) {
			case string, float64, bool, nil:
			default:
				return kSNSInvalidValue.new("The message attribute '%s' with type 'String.Array' holds an array or object: only strings, numbers, booleans and null.", name)
			}
		}
	}
	return nil
}

// deliver sends m to every queue subscribed to t whose filter policy it
// passes, as SendMessage would: in the JSON envelope, or raw (the message
// itself, its attributes as the queue message's). A delivery its queue
// refuses (the queue is gone, or the message too large for it) goes to
// the subscription's dead-letter queue (RedrivePolicy's
// deadLetterTargetArn, a queue of this server), as SNS does once its
// retries are spent; without one, it is lost, counted and logged (see
// NotificationsLost). The publish succeeds either way, as in SNS.
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
			if derr := rc.deadLetterDelivery(sub, in); derr != nil {
				rc.lostDelivery(sub, name, err, derr)
			}
		}
	}
}

// lostDelivery counts and logs a delivery that sub's queue (name) refused
// with err and that no dead-letter queue took (derr says why).
func (rc *request) lostDelivery(sub *snsSub, name string, err, derr error) {
	sub.lost.Add(1)
	if l := rc.s.cfg.logger; l != nil {
		l.Warn("sns delivery lost", "subscription", sub.arn, "queue", name, "error", err.Error(), "deadLetter", derr.Error())
	}
}

// NotificationsLost returns, for each SNS subscription, by its ARN, how
// many deliveries were lost: its queue refused them (the queue was deleted,
// or the message is larger than the queue's MaximumMessageSize) and no
// dead-letter queue took them (the subscription has no RedrivePolicy, or
// its queue refused them too). These are AWS's NumberOfNotificationsFailed
// without a RedrivePolicy and NumberOfNotificationsFailedToRedriveToDlq
// with one. Each is also logged at level Warn to WithLogger's logger.
// Counts live in memory and start at 0; a subscription that never lost one
// is left out.
func (s *Server) NotificationsLost() map[string]uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]uint64{}
	for _, t := range s.topics {
		for _, sub := range t.subs {
			if n := sub.lost.Load(); n > 0 {
				out[sub.arn] = n
			}
		}
	}
	return out
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
// subscription's dead-letter queue. The error says why it could not: there
// is none, or it refused the delivery too.
func (rc *request) deadLetterDelivery(sub *snsSub, in *sendMessageInput) error {
	var p struct {
		Target string `json:"deadLetterTargetArn"`
	}
	rc.s.mu.RLock()
	policy := sub.attrs["RedrivePolicy"]
	rc.s.mu.RUnlock()
	if policy == "" || json.Unmarshal([]byte(policy), &p) != nil {
		return errors.New("the subscription has no RedrivePolicy")
	}
	name, ok := rc.s.nameOfARN(p.Target)
	if !ok {
		return fmt.Errorf("its dead-letter queue %s is not a queue of this server", p.Target)
	}
	in.QueueURL = ptr(rc.queueURL(name))
	if _, err := sendMessage(rc, in); err != nil {
		return fmt.Errorf("its dead-letter queue %s refused it too: %w", name, err)
	}
	return nil
}
