package sqsserver

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	"github.com/google/uuid"
)

// SNS subscriptions: a topic's deliveries to one of this server's queues.

func subscribe(rc *request, in *subscribeInput) (any, error) {
	s := rc.s
	if in.Protocol == nil || *in.Protocol != "sqs" {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Protocol Reason: leasebus-sqs delivers to its own queues only: protocol sqs")
	}
	if in.Endpoint == nil {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Endpoint")
	}
	qname, ok := s.nameOfARN(*in.Endpoint)
	if !ok {
		return nil, kSNSInvalidParameter.new("Invalid parameter: SQS endpoint ARN Reason: a queue ARN of this server, %s<name>", s.arn(""))
	}
	sub := &snsSub{endpoint: *in.Endpoint, attrs: map[string]string{}}
	for k, v := range in.Attributes {
		if err := sub.set(k, v); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topicLocked(in.TopicArn, "TopicArn")
	if err != nil {
		return nil, err
	}
	if q := s.queues[qname]; q != nil && q.fifo != t.fifo {
		return nil, kSNSInvalidParameter.new("Invalid parameter: Endpoint Reason: a FIFO topic delivers to FIFO queues, a standard topic to standard queues")
	}
	for _, old := range t.subs {
		if old.endpoint == sub.endpoint {
			if !maps.Equal(old.attrs, sub.attrs) && len(sub.attrs) > 0 {
				return nil, kSNSInvalidParameter.new("Invalid parameter: Attributes Reason: Subscription already exists with different attributes")
			}
			return subscriptionARNOutput{old.arn}, nil
		}
	}
	sub.arn, sub.topic = t.arn+":"+uuid.NewString(), t
	t.subs = append(t.subs, sub)
	s.subs[sub.arn] = sub
	return subscriptionARNOutput{sub.arn}, s.saveLocked()
}

// set sets one of a subscription's attributes, checking it.
func (sub *snsSub) set(name, value string) error {
	switch name {
	case "RawMessageDelivery":
		if value != "true" && value != "false" {
			return kSNSInvalidParameter.new("Invalid parameter: Attributes Reason: RawMessageDelivery: true or false")
		}
		sub.raw = value == "true"
	case "FilterPolicy":
		if value == "" {
			sub.filter = nil
			break
		}
		f, err := parseFilterPolicy(value)
		if err != nil {
			return kSNSInvalidParameter.new("Invalid parameter: FilterPolicy: %v", err)
		}
		sub.filter = f
	case "FilterPolicyScope":
		if value != "MessageAttributes" && value != "MessageBody" {
			return kSNSInvalidParameter.new("Invalid parameter: Attributes Reason: FilterPolicyScope: MessageAttributes or MessageBody")
		}
		sub.onBody = value == "MessageBody"
	case "RedrivePolicy", "DeliveryPolicy", "SubscriptionRoleArn", "ReplayPolicy":
		if value != "" && !json.Valid([]byte(value)) && name != "SubscriptionRoleArn" {
			return kSNSInvalidParameter.new("Invalid parameter: %s: not JSON", name)
		}
	default:
		return kSNSInvalidParameter.new("Invalid parameter: AttributeName")
	}
	sub.attrs[name] = value
	return nil
}

// subLocked returns the subscription an ARN names.
func (s *Server) subLocked(arn *string) (*snsSub, error) {
	if arn == nil || *arn == "" {
		return nil, kSNSInvalidParameter.new("Invalid parameter: SubscriptionArn")
	}
	sub := s.subs[*arn]
	if sub == nil {
		return nil, kSNSNotFound.new("Subscription does not exist")
	}
	return sub, nil
}

func unsubscribe(rc *request, in *subscriptionInput) (any, error) {
	s := rc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, err := s.subLocked(in.SubscriptionArn)
	if err != nil {
		return nil, err
	}
	delete(s.subs, sub.arn)
	sub.topic.subs = slices.DeleteFunc(sub.topic.subs, func(x *snsSub) bool { return x == sub })
	return struct{}{}, s.saveLocked()
}

func (s *Server) subEntry(sub *snsSub) snsSubscriptionEntry {
	return snsSubscriptionEntry{SubscriptionArn: sub.arn, Owner: s.cfg.account, Protocol: "sqs", Endpoint: sub.endpoint, TopicArn: sub.topic.arn}
}

func listSubscriptions(rc *request, in *listInput) (any, error) {
	s := rc.s
	s.mu.RLock()
	var all []snsSubscriptionEntry
	for _, name := range slices.Sorted(maps.Keys(s.topics)) {
		for _, sub := range s.topics[name].subs {
			all = append(all, s.subEntry(sub))
		}
	}
	s.mu.RUnlock()
	p, next, err := snsPage(all, in.NextToken)
	if err != nil {
		return nil, err
	}
	return listSubscriptionsOutput{Subscriptions: p, NextToken: next}, nil
}

func listSubscriptionsByTopic(rc *request, in *listByTopicInput) (any, error) {
	s := rc.s
	s.mu.RLock()
	t, err := s.topicLocked(in.TopicArn, "TopicArn")
	var all []snsSubscriptionEntry
	if err == nil {
		for _, sub := range t.subs {
			all = append(all, s.subEntry(sub))
		}
	}
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	p, next, err := snsPage(all, in.NextToken)
	if err != nil {
		return nil, err
	}
	return listSubscriptionsOutput{Subscriptions: p, NextToken: next}, nil
}

func getSubscriptionAttributes(rc *request, in *subscriptionInput) (any, error) {
	s := rc.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	sub, err := s.subLocked(in.SubscriptionArn)
	if err != nil {
		return nil, err
	}
	a := map[string]string{
		"SubscriptionArn": sub.arn, "TopicArn": sub.topic.arn, "Owner": s.cfg.account, "Protocol": "sqs",
		"Endpoint": sub.endpoint, "ConfirmationWasAuthenticated": "true", "PendingConfirmation": "false",
		"RawMessageDelivery": strconv.FormatBool(sub.raw), "SubscriptionPrincipal": "arn:aws:iam::" + s.cfg.account + ":user/leasebus",
	}
	maps.Copy(a, sub.attrs)
	if sub.filter != nil && a["FilterPolicyScope"] == "" {
		a["FilterPolicyScope"] = "MessageAttributes"
	}
	return snsAttributesOutput{a}, nil
}

func setSubscriptionAttributes(rc *request, in *setAttributeInput) (any, error) {
	s := rc.s
	if in.AttributeName == nil {
		return nil, kSNSInvalidParameter.new("Invalid parameter: AttributeName")
	}
	value := ""
	if in.AttributeValue != nil {
		value = *in.AttributeValue
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, err := s.subLocked(in.SubscriptionArn)
	if err != nil {
		return nil, err
	}
	if err := sub.set(*in.AttributeName, value); err != nil {
		return nil, err
	}
	return struct{}{}, s.saveLocked()
}
