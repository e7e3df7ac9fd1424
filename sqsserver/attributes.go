package sqsserver

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// settings are a queue's attributes as the server uses them.
type settings struct {
	visibility int // seconds
	delay      int
	maxSize    int
	retention  int
	wait       int
	redrive    *redrivePolicy
	cbd        bool // ContentBasedDeduplication
	groupScope bool // DeduplicationScope messageGroup
}

type redrivePolicy struct {
	DeadLetterTargetArn string `json:"deadLetterTargetArn"`
	MaxReceiveCount     int    `json:"maxReceiveCount"`
}

type redriveAllowPolicy struct {
	RedrivePermission string   `json:"redrivePermission"`
	SourceQueueArns   []string `json:"sourceQueueArns,omitempty"`
}

// The attributes a client may set, and those only read.
var (
	settable = []string{
		"DelaySeconds", "MaximumMessageSize", "MessageRetentionPeriod", "Policy",
		"ReceiveMessageWaitTimeSeconds", "VisibilityTimeout", "RedrivePolicy", "RedriveAllowPolicy",
		"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled",
		"ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit",
	}
	fifoOnly = []string{"ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"}
	readOnly = []string{
		"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
		"ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn",
	}
)

// defaultAttributes are a new queue's attributes.
func defaultAttributes(fifo bool) map[string]string {
	a := map[string]string{
		"VisibilityTimeout":             strconv.Itoa(defaultVis),
		"DelaySeconds":                  "0",
		"MaximumMessageSize":            strconv.Itoa(maxMessageSizeLimit),
		"MessageRetentionPeriod":        "345600",
		"ReceiveMessageWaitTimeSeconds": "0",
		"SqsManagedSseEnabled":          "true",
	}
	if fifo {
		a["FifoQueue"] = "true"
		a["ContentBasedDeduplication"] = "false"
		a["DeduplicationScope"] = "queue"
		a["FifoThroughputLimit"] = "perQueue"
	}
	return a
}

// normalizeAttribute checks one attribute a client sets and returns its
// value as the server keeps and returns it ("" removes an optional one).
// The RedrivePolicy's target and the RedriveAllowPolicy are checked
// against the other queues by the caller.
func normalizeAttribute(name, value string, fifo bool) (string, error) {
	if slices.Contains(readOnly, name) || name == "FifoQueue" {
		return "", kInvalidAttributeName.new("Unknown Attribute %s.", name) // AWS's words for a read-only one too
	}
	if !slices.Contains(settable, name) {
		return "", kInvalidAttributeName.new("Unknown Attribute %s.", name)
	}
	if !fifo && slices.Contains(fifoOnly, name) {
		return "", kInvalidAttributeName.new("Unknown Attribute %s: it applies to FIFO queues only.", name)
	}
	bad := func(reason string) error {
		return kInvalidAttributeValue.new("Invalid value for the parameter %s: %q. Reason: %s", name, value, reason)
	}
	intIn := func(lo, hi int) (string, error) {
		n, err := strconv.Atoi(value)
		if err != nil || n < lo || n > hi {
			return "", bad(fmt.Sprintf("must be an integer from %d to %d.", lo, hi))
		}
		return strconv.Itoa(n), nil
	}
	switch name {
	case "VisibilityTimeout":
		return intIn(0, maxVisibility)
	case "DelaySeconds":
		return intIn(0, maxDelay)
	case "MaximumMessageSize":
		return intIn(1024, maxMessageSizeLimit)
	case "MessageRetentionPeriod":
		return intIn(60, 1_209_600)
	case "ReceiveMessageWaitTimeSeconds":
		return intIn(0, maxWait)
	case "KmsDataKeyReusePeriodSeconds":
		return intIn(60, 86_400)
	case "SqsManagedSseEnabled", "ContentBasedDeduplication":
		if value != "true" && value != "false" {
			return "", bad("must be true or false.")
		}
		return value, nil
	case "DeduplicationScope":
		if value != "queue" && value != "messageGroup" {
			return "", bad("must be queue or messageGroup.")
		}
		return value, nil
	case "FifoThroughputLimit":
		if value != "perQueue" && value != "perMessageGroupId" {
			return "", bad("must be perQueue or perMessageGroupId.")
		}
		return value, nil
	case "Policy":
		if value != "" && !json.Valid([]byte(value)) {
			return "", bad("the policy is not JSON.")
		}
		return value, nil
	case "KmsMasterKeyId":
		return value, nil
	case "RedrivePolicy":
		return normalizeRedrivePolicy(value, bad)
	case "RedriveAllowPolicy":
		return normalizeRedriveAllowPolicy(value, bad)
	}
	return value, nil
}

// normalizeRedrivePolicy checks a RedrivePolicy ("" removes it) and
// returns it as the server keeps it: {"deadLetterTargetArn":…,
// "maxReceiveCount":N}, the count given as a number or a string. bad makes
// the error for a reason.
func normalizeRedrivePolicy(value string, bad func(reason string) error) (string, error) {
	if value == "" {
		return "", nil
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		return "", bad("Redrive policy is not a valid JSON map.")
	}
	arn, _ := raw["deadLetterTargetArn"].(string)
	if arn == "" {
		return "", bad("Redrive policy must name deadLetterTargetArn.")
	}
	var count int
	switch v := raw["maxReceiveCount"].(type) {
	case float64:
		count = int(v)
		if float64(count) != v {
			count = 0
		}
	case string:
		count, _ = strconv.Atoi(v)
	}
	if count < 1 || count > 1000 {
		return "", bad("Value for maxReceiveCount must be an integer from 1 to 1000.")
	}
	b, _ := json.Marshal(redrivePolicy{DeadLetterTargetArn: arn, MaxReceiveCount: count})
	return string(b), nil
}

// normalizeRedriveAllowPolicy checks a RedriveAllowPolicy ("" removes
// it): allowAll, denyAll, or byQueue with 1 to 10 sourceQueueArns.
func normalizeRedriveAllowPolicy(value string, bad func(reason string) error) (string, error) {
	if value == "" {
		return "", nil
	}
	var p redriveAllowPolicy
	if err := json.Unmarshal([]byte(value), &p); err != nil {
		return "", bad("Redrive allow policy is not valid JSON.")
	}
	switch p.RedrivePermission {
	case "allowAll", "denyAll":
		if len(p.SourceQueueArns) > 0 {
			return "", bad("sourceQueueArns is only for redrivePermission byQueue.")
		}
	case "byQueue":
		if len(p.SourceQueueArns) < 1 || len(p.SourceQueueArns) > 10 {
			return "", bad("byQueue takes 1 to 10 sourceQueueArns.")
		}
	default:
		return "", bad("redrivePermission must be allowAll, denyAll or byQueue.")
	}
	b, _ := json.Marshal(p)
	return string(b), nil
}

// parseSettings reads the settings from a queue's kept attributes.
func parseSettings(a map[string]string) settings {
	n := func(k string) int { v, _ := strconv.Atoi(a[k]); return v }
	st := settings{
		visibility: n("VisibilityTimeout"),
		delay:      n("DelaySeconds"),
		maxSize:    n("MaximumMessageSize"),
		retention:  n("MessageRetentionPeriod"),
		wait:       n("ReceiveMessageWaitTimeSeconds"),
		cbd:        a["ContentBasedDeduplication"] == "true",
		groupScope: a["DeduplicationScope"] == "messageGroup",
	}
	if v := a["RedrivePolicy"]; v != "" {
		var p redrivePolicy
		if json.Unmarshal([]byte(v), &p) == nil {
			st.redrive = &p
		}
	}
	return st
}

// allows reports whether a dead-letter queue's RedriveAllowPolicy lets the
// queue with ARN source name it as its target.
func allows(policy, source string) bool {
	if policy == "" {
		return true
	}
	var p redriveAllowPolicy
	if json.Unmarshal([]byte(policy), &p) != nil {
		return true
	}
	switch p.RedrivePermission {
	case "denyAll":
		return false
	case "byQueue":
		return slices.Contains(p.SourceQueueArns, source)
	}
	return true
}

// validQueueName checks an SQS queue name: 1 to 80 characters,
// alphanumerics, hyphens and underscores, and for a FIFO queue the .fifo
// suffix (counted in the 80).
func validQueueName(name string) (fifo bool, err error) {
	base, fifo := strings.CutSuffix(name, ".fifo")
	if name == "" || len(name) > maxQueueName || base == "" || !idRE.MatchString(base) {
		return fifo, kInvalidParameterValue.new("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length (a FIFO queue's name ends with .fifo): %q.", name)
	}
	return fifo, nil
}
