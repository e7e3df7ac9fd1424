package sqsserver

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// applyLocked checks the attributes given for the queue name against the
// other queues (a RedrivePolicy's target must exist, be of the same kind,
// and allow it) and merges them into attrs. Called with s.mu held.
func (s *Server) applyLocked(name string, attrs, given map[string]string) error {
	if v, ok := given["RedrivePolicy"]; ok && v != "" {
		p := parseSettings(map[string]string{"RedrivePolicy": v}).redrive
		target, ok := s.nameOfARN(p.DeadLetterTargetArn)
		dlq := s.queues[target]
		switch {
		case !ok || dlq == nil:
			return kInvalidParameterValue.new("Value %s for parameter RedrivePolicy is invalid. Reason: Dead-letter target does not exist.", v)
		case target == name:
			return kInvalidParameterValue.new("Value %s for parameter RedrivePolicy is invalid. Reason: a queue cannot be its own dead-letter queue.", v)
		case dlq.fifo != strings.HasSuffix(name, ".fifo"):
			return kInvalidParameterValue.new("Value %s for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same type of queue as the source.", v)
		}
		dlq.mu.Lock()
		allowed := allows(dlq.attrs["RedriveAllowPolicy"], s.arn(name))
		dlq.mu.Unlock()
		if !allowed {
			return kInvalidParameterValue.new("Value %s for parameter RedrivePolicy is invalid. Reason: the dead-letter queue's RedriveAllowPolicy does not allow this source queue.", v)
		}
	}
	for k, v := range given {
		if v == "" && (k == "RedrivePolicy" || k == "RedriveAllowPolicy" || k == "Policy" || k == "KmsMasterKeyId") {
			delete(attrs, k)
			if k == "KmsMasterKeyId" {
				delete(attrs, "KmsDataKeyReusePeriodSeconds")
			}
			continue
		}
		attrs[k] = v
	}
	if attrs["KmsMasterKeyId"] != "" {
		if given["SqsManagedSseEnabled"] == "true" {
			return kInvalidAttributeValue.new("KmsMasterKeyId and SqsManagedSseEnabled=true are exclusive: a queue is encrypted by one of them.")
		}
		attrs["SqsManagedSseEnabled"] = "false"
		if attrs["KmsDataKeyReusePeriodSeconds"] == "" {
			attrs["KmsDataKeyReusePeriodSeconds"] = "300"
		}
	}
	return nil
}

func getQueueAttributes(rc *request, in *getQueueAttributesInput) (any, error) {
	s := rc.s
	q, err := s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	all := slices.Contains(in.AttributeNames, "All")
	for _, n := range in.AttributeNames {
		if n != "All" && n != "FifoQueue" && !slices.Contains(settable, n) && !slices.Contains(readOnly, n) {
			return nil, kInvalidAttributeName.new("Unknown Attribute %s.", n)
		}
	}
	want := func(n string) bool { return all || slices.Contains(in.AttributeNames, n) }
	out := make(map[string]string)
	q.mu.Lock()
	for k, v := range q.attrs {
		if want(k) {
			out[k] = v
		}
	}
	created, modified := q.created, q.modified
	q.mu.Unlock()
	if want("ApproximateNumberOfMessages") || want("ApproximateNumberOfMessagesNotVisible") || want("ApproximateNumberOfMessagesDelayed") {
		st := q.sub.Stats()
		set := func(k string, n int) {
			if want(k) {
				out[k] = strconv.Itoa(n)
			}
		}
		set("ApproximateNumberOfMessages", q.visible(s.clock.Now()))
		set("ApproximateNumberOfMessagesNotVisible", st.InFlight)
		set("ApproximateNumberOfMessagesDelayed", st.Delayed)
	}
	if want("CreatedTimestamp") {
		out["CreatedTimestamp"] = strconv.FormatInt(created.Unix(), 10)
	}
	if want("LastModifiedTimestamp") {
		out["LastModifiedTimestamp"] = strconv.FormatInt(modified.Unix(), 10)
	}
	if want("QueueArn") {
		out["QueueArn"] = s.arn(q.name)
	}
	return attributesOutput{out}, nil
}

func setQueueAttributes(rc *request, in *setQueueAttributesInput) (any, error) {
	s := rc.s
	q, err := s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	if len(in.Attributes) == 0 {
		return nil, kMissingParameter.new("The request must contain the parameter Attributes.")
	}
	given := make(map[string]string, len(in.Attributes))
	for k, v := range in.Attributes {
		nv, err := normalizeAttribute(k, v, q.fifo)
		if err != nil {
			return nil, err
		}
		given[k] = nv
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues[q.name] != q {
		return nil, kQueueDoesNotExist.new("The specified queue does not exist.")
	}
	q.mu.Lock()
	old := q.attrs
	attrs := maps.Clone(old)
	q.mu.Unlock()
	if err := s.applyLocked(q.name, attrs, given); err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.attrs, q.st, q.modified = attrs, parseSettings(attrs), s.clock.Now()
	q.mu.Unlock()
	if err := s.saveLocked(); err != nil {
		q.mu.Lock()
		q.attrs, q.st = old, parseSettings(old)
		q.mu.Unlock()
		return nil, err
	}
	return struct{}{}, nil
}

func tagQueue(rc *request, in *tagQueueInput) (any, error) {
	return rc.s.retag(in.QueueURL, func(tags map[string]string) error {
		if len(in.Tags) == 0 {
			return kMissingParameter.new("The request must contain the parameter Tags.")
		}
		maps.Copy(tags, in.Tags)
		if len(tags) > maxTags {
			return kInvalidParameterValue.new("A queue has at most %d tags.", maxTags)
		}
		return nil
	})
}

func untagQueue(rc *request, in *untagQueueInput) (any, error) {
	return rc.s.retag(in.QueueURL, func(tags map[string]string) error {
		if len(in.TagKeys) == 0 {
			return kMissingParameter.new("The request must contain the parameter TagKeys.")
		}
		for _, k := range in.TagKeys {
			delete(tags, k)
		}
		return nil
	})
}

// retag changes a queue's tags with change, and keeps them.
func (s *Server) retag(url *string, change func(map[string]string) error) (any, error) {
	q, err := s.queueOf(url)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q.mu.Lock()
	old := q.tags
	tags := maps.Clone(old)
	if tags == nil {
		tags = make(map[string]string)
	}
	err = change(tags)
	if err == nil {
		q.tags = tags
	}
	q.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := s.saveLocked(); err != nil {
		q.mu.Lock()
		q.tags = old
		q.mu.Unlock()
		return nil, err
	}
	return struct{}{}, nil
}

func listQueueTags(rc *request, in *queueInput) (any, error) {
	q, err := rc.s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return listQueueTagsOutput{maps.Clone(q.tags)}, nil
}
