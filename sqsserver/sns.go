package sqsserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// SNS on the same server: topics whose subscriptions deliver to this
// server's queues (protocol sqs), confirmed at once as AWS does for a queue
// of the same account. A topic and its subscriptions are kept beside the
// queues, in the server's state (and its state file, with WithDir).

// snsTopic is one SNS topic. Its fields are guarded by Server.mu.
type snsTopic struct {
	name  string
	arn   string
	fifo  bool
	attrs map[string]string // the settable attributes set, FifoTopic included
	tags  map[string]string
	subs  []*snsSub // in subscription order
}

// snsSub is one subscription of a topic to a queue.
type snsSub struct {
	arn      string
	topic    *snsTopic
	endpoint string            // the queue's ARN
	attrs    map[string]string // the settable attributes set
	raw      bool              // RawMessageDelivery
	filter   *filterPolicy     // FilterPolicy, nil: every message
	onBody   bool              // FilterPolicyScope MessageBody
	lost     atomic.Uint64     // deliveries neither its queue nor its dead-letter queue took
}

// The SNS errors: codes without SQS's prefix, as SNS's query protocol has
// them.
var (
	kSNSNotFound          = errorKind{"NotFound", "NotFound", 404, true}
	kSNSInvalidParameter  = errorKind{"InvalidParameter", "InvalidParameter", 400, true}
	kSNSInvalidValue      = errorKind{"InvalidParameterValue", "InvalidParameterValue", 400, true}
	kSNSEmptyBatch        = errorKind{"EmptyBatchRequest", "EmptyBatchRequest", 400, true}
	kSNSTooManyEntries    = errorKind{"TooManyEntriesInBatchRequest", "TooManyEntriesInBatchRequest", 400, true}
	kSNSBatchIDsDuplicate = errorKind{"BatchEntryIdsNotDistinct", "BatchEntryIdsNotDistinct", 400, true}
	kSNSInvalidBatchID    = errorKind{"InvalidBatchEntryId", "InvalidBatchEntryId", 400, true}
	kSNSBatchTooLong      = errorKind{"BatchRequestTooLong", "BatchRequestTooLong", 400, true}
)

var topicNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// The topic attributes a caller may set (a subscription's are snsSub.set's).
var topicSettable = []string{"DisplayName", "Policy", "DeliveryPolicy", "KmsMasterKeyId", "SignatureVersion",
	"TracingConfig", "ContentBasedDeduplication", "ArchivePolicy", "FifoThroughputScope", "DataProtectionPolicy",
	"MaximumMessageSize"}

// checkTopicAttribute checks the value of a settable topic attribute
// whose value has a form.
func checkTopicAttribute(name, value string) error {
	if name == "MaximumMessageSize" {
		n, err := strconv.Atoi(value)
		if err != nil || n < snsMinMessageMax || n > snsMaxMessageMax || strconv.Itoa(n) != value {
			return kSNSInvalidParameter.new("Invalid parameter: Attributes Reason: MaximumMessageSize is a whole number of bytes from %d to %d, not %q", snsMinMessageMax, snsMaxMessageMax, value)
		}
	}
	return nil
}

// maxMessageSize is the most a message and its attributes may hold on t,
// in bytes: its MaximumMessageSize. The caller holds the server's lock or
// knows t's attributes do not change.
func (t *snsTopic) maxMessageSize() int {
	if n, err := strconv.Atoi(t.attrs["MaximumMessageSize"]); err == nil {
		return n
	}
	return snsMaxMessage
}

func (s *Server) topicARN(name string) string {
	return "arn:aws:sns:" + s.cfg.region + ":" + s.cfg.account + ":" + name
}

// topicLocked returns the topic an ARN names: NotFound for a well-formed
// one of no topic, InvalidParameter for anything else.
func (s *Server) topicLocked(arn *string, param string) (*snsTopic, error) {
	if arn == nil || *arn == "" {
		return nil, kSNSInvalidParameter.new("Invalid parameter: %s", param)
	}
	name, ok := strings.CutPrefix(*arn, s.topicARN(""))
	if !ok || !topicNameRE.MatchString(strings.TrimSuffix(name, ".fifo")) {
		return nil, kSNSInvalidParameter.new("Invalid parameter: %s Reason: An ARN must have the format arn:aws:sns:%s:%s:<topic>", param, s.cfg.region, s.cfg.account)
	}
	t := s.topics[name]
	if t == nil {
		return nil, kSNSNotFound.new("Topic does not exist")
	}
	return t, nil
}

func createTopic(rc *request, in *createTopicInput) (any, error) {
	s := rc.s
	if in.Name == nil || *in.Name == "" {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Name")
	}
	name := *in.Name
	fifo := strings.HasSuffix(name, ".fifo")
	if !topicNameRE.MatchString(strings.TrimSuffix(name, ".fifo")) {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Topic Name")
	}
	attrs := map[string]string{}
	for k, v := range in.Attributes {
		switch {
		case k == "FifoTopic":
			if v != "true" && v != "false" {
				return nil, kSNSInvalidParameter.new("Invalid parameter: Attributes Reason: FifoTopic must be true or false")
			}
		case !slices.Contains(topicSettable, k):
			return nil, kSNSInvalidParameter.new("Invalid parameter: Attributes Reason: Unknown attribute %s", k)
		}
		if err := checkTopicAttribute(k, v); err != nil {
			return nil, err
		}
		attrs[k] = v
	}
	if (attrs["FifoTopic"] == "true") != fifo {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Topic Name Reason: a FIFO topic's name ends in .fifo and it has FifoTopic true; a standard topic has neither")
	}
	if attrs["ContentBasedDeduplication"] != "" && !fifo {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Attributes Reason: ContentBasedDeduplication is for FIFO topics only")
	}
	tags, err := tagMap(in.Tags)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, kUnavailable.new("The server is closed.")
	}
	if t := s.topics[name]; t != nil {
		for k, v := range attrs {
			if t.attrs[k] != v {
				return nil, kSNSInvalidParameter.new("Invalid parameter: Attributes Reason: Topic already exists with different attributes")
			}
		}
		return topicARNOutput{t.arn}, nil
	}
	t := &snsTopic{name: name, arn: s.topicARN(name), fifo: fifo, attrs: attrs, tags: tags}
	s.topics[name] = t
	return topicARNOutput{t.arn}, s.saveLocked()
}

func tagMap(tags []snsTag) (map[string]string, error) {
	m := map[string]string{}
	for _, t := range tags {
		if t.Key == nil || *t.Key == "" || t.Value == nil {
			return nil, kSNSInvalidParameter.new("Invalid parameter: Tags Reason: every tag has a Key and a Value")
		}
		m[*t.Key] = *t.Value
	}
	if len(m) > 50 {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Tags Reason: at most 50 tags")
	}
	return m, nil
}

func deleteTopic(rc *request, in *topicInput) (any, error) {
	s := rc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(in.TopicArn, "TopicArn")
	if err != nil {
		if asError(err).Type == kSNSNotFound.typ {
			return struct{}{}, nil // deleting a missing topic succeeds, as in SNS
		}
		return nil, err
	}
	for _, sub := range t.subs {
		delete(s.subs, sub.arn)
	}
	delete(s.topics, t.name)
	return struct{}{}, s.saveLocked()
}

// snsPageSize is how many topics or subscriptions a List call returns.
const snsPageSize = 100

// snsPage returns the page of items a NextToken names, and the next token.
func snsPage[T any](items []T, token string) ([]T, string, error) {
	start := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(items) {
			return nil, "", kSNSInvalidParameter.new("Invalid parameter: NextToken")
		}
		start = n
	}
	end := min(len(items), start+snsPageSize)
	next := ""
	if end < len(items) {
		next = strconv.Itoa(end)
	}
	return items[start:end], next, nil
}

func listTopics(rc *request, in *listInput) (any, error) {
	s := rc.s
	s.mu.RLock()
	var all []snsTopicEntry
	for _, t := range s.topics {
		all = append(all, snsTopicEntry{t.arn})
	}
	s.mu.RUnlock()
	slices.SortFunc(all, func(a, b snsTopicEntry) int { return strings.Compare(a.TopicArn, b.TopicArn) })
	p, next, err := snsPage(all, in.NextToken)
	if err != nil {
		return nil, err
	}
	return listTopicsOutput{Topics: p, NextToken: next}, nil
}

func getTopicAttributes(rc *request, in *topicInput) (any, error) {
	s := rc.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.topicLocked(in.TopicArn, "TopicArn")
	if err != nil {
		return nil, err
	}
	a := map[string]string{
		"TopicArn": t.arn, "Owner": s.cfg.account, "DisplayName": "",
		"SubscriptionsConfirmed": strconv.Itoa(len(t.subs)), "SubscriptionsPending": "0", "SubscriptionsDeleted": "0",
		"Policy":                  defaultTopicPolicy(t.arn, s.cfg.account),
		"MaximumMessageSize":      strconv.Itoa(snsMaxMessage),
		"EffectiveDeliveryPolicy": `{"http":{"defaultHealthyRetryPolicy":{"minDelayTarget":20,"maxDelayTarget":20,"numRetries":3,"numMaxDelayRetries":0,"numNoDelayRetries":0,"numMinDelayRetries":0,"backoffFunction":"linear"},"disableSubscriptionOverrides":false,"defaultRequestPolicy":{"headerContentType":"text/plain; charset=UTF-8"}}}`,
	}
	if t.fifo {
		a["FifoTopic"], a["ContentBasedDeduplication"] = "true", "false"
	}
	maps.Copy(a, t.attrs)
	return snsAttributesOutput{a}, nil
}

func defaultTopicPolicy(arn, account string) string {
	b, _ := json.Marshal(map[string]any{
		"Version": "2008-10-17", "Id": "__default_policy_ID",
		"Statement": []any{map[string]any{
			"Sid": "__default_statement_ID", "Effect": "Allow", "Principal": map[string]string{"AWS": "*"},
			"Action":    []string{"SNS:Publish", "SNS:Subscribe", "SNS:GetTopicAttributes", "SNS:SetTopicAttributes"},
			"Resource":  arn,
			"Condition": map[string]any{"StringEquals": map[string]string{"AWS:SourceOwner": account}},
		}},
	})
	return string(b)
}

func setTopicAttributes(rc *request, in *setAttributeInput) (any, error) {
	s := rc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(in.TopicArn, "TopicArn")
	if err != nil {
		return nil, err
	}
	if in.AttributeName == nil || !slices.Contains(topicSettable, *in.AttributeName) {
		return nil, kSNSInvalidParameter.new("Invalid parameter: AttributeName")
	}
	name, value := *in.AttributeName, ""
	if in.AttributeValue != nil {
		value = *in.AttributeValue
	}
	if err := checkTopicAttribute(name, value); err != nil {
		return nil, err
	}
	if name == "ContentBasedDeduplication" && (!t.fifo || (value != "true" && value != "false")) {
		return nil, kSNSInvalidParameter.new("Invalid parameter: AttributeValue Reason: ContentBasedDeduplication is true or false, on a FIFO topic")
	}
	t.attrs[name] = value
	return struct{}{}, s.saveLocked()
}

func tagResource(rc *request, in *resourceInput) (any, error) {
	tags, err := tagMap(in.Tags)
	if err != nil {
		return nil, err
	}
	s := rc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(in.ResourceArn, "ResourceArn")
	if err != nil {
		return nil, err
	}
	if t.tags == nil {
		t.tags = map[string]string{}
	}
	maps.Copy(t.tags, tags)
	return emptyResult{}, s.saveLocked()
}

func untagResource(rc *request, in *resourceInput) (any, error) {
	s := rc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(in.ResourceArn, "ResourceArn")
	if err != nil {
		return nil, err
	}
	for _, k := range in.TagKeys {
		delete(t.tags, k)
	}
	return emptyResult{}, s.saveLocked()
}

func listTagsForResource(rc *request, in *resourceInput) (any, error) {
	s := rc.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.topicLocked(in.ResourceArn, "ResourceArn")
	if err != nil {
		return nil, err
	}
	out := listTagsOutput{Tags: []snsTag{}}
	for _, k := range slices.Sorted(maps.Keys(t.tags)) {
		out.Tags = append(out.Tags, snsTag{Key: ptr(k), Value: ptr(t.tags[k])})
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }

// restoreTopic brings back a topic of a durable server's state file, its
// subscriptions' filter policies compiled again.
func (s *Server) restoreTopic(saved savedTopic) error {
	t := &snsTopic{name: saved.Name, arn: s.topicARN(saved.Name), fifo: strings.HasSuffix(saved.Name, ".fifo"),
		attrs: saved.Attributes, tags: saved.Tags}
	if t.attrs == nil {
		t.attrs = map[string]string{}
	}
	for _, ss := range saved.Subscriptions {
		sub := &snsSub{arn: ss.Arn, topic: t, endpoint: ss.Endpoint, attrs: map[string]string{}}
		for k, v := range ss.Attributes {
			if err := sub.set(k, v); err != nil {
				return fmt.Errorf("subscription %s: %w", ss.Arn, err)
			}
		}
		t.subs = append(t.subs, sub)
		s.subs[sub.arn] = sub
	}
	s.topics[t.name] = t
	return nil
}
