package natsleasebus

import (
	"strings"

	"github.com/leasebus/leasebus/backend"
)

// validToken checks a subscription name, or one segment of a topic:
// letters, digits and dashes, so that it is one subject token and fits a
// consumer name.
func validToken(kind, s string) error {
	if s == "" {
		return backend.Invalid("%s name is empty", kind)
	}
	for _, r := range s {
		if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return backend.Invalid("%s name %q: only letters, digits and '-' are allowed", kind, s)
		}
	}
	return nil
}

// validTopic checks a topic: dot-separated segments (orders.eu.created),
// each one subject token (validToken). With pattern, the topic of a
// subscription, a segment may also be '*' (exactly one segment), and the
// last one '>' or '#' (one or more), as in the broker.
func validTopic(topic string, pattern bool) error {
	if topic == "" {
		return backend.Invalid("topic name is empty")
	}
	segs := strings.Split(topic, ".")
	for i, seg := range segs {
		switch {
		case pattern && seg == "*":
		case pattern && (seg == ">" || seg == "#"):
			if i != len(segs)-1 {
				return backend.Invalid("pattern %q: %q must be the last segment", topic, seg)
			}
		case strings.ContainsAny(seg, "*>#") && !pattern:
			return backend.Invalid("topic %q: wildcards are for Subscribe; publish to a topic", topic)
		default:
			if err := validToken("topic", seg); err != nil {
				return backend.Invalid("topic %q: segment %q: only letters, digits and '-' are allowed", topic, seg)
			}
		}
	}
	return nil
}

// normalTopic writes a pattern's '#' as '>'.
func normalTopic(topic string) string {
	if strings.HasSuffix(topic, "#") {
		return topic[:len(topic)-1] + ">"
	}
	return topic
}

// escapeTopic writes a topic's wildcards as characters a consumer name or
// a published subject can hold: '*' as '+', '>' as '#'.
func escapeTopic(topic string) string {
	return strings.NewReplacer("*", "+", ">", "#").Replace(topic)
}

// Subject returns the subject of topic: PREFIX.topic.TOPIC, a filter with
// wildcards for a pattern.
func (b *Bus) Subject(topic string) string { return b.cfg.prefix + ".topic." + normalTopic(topic) }

// topicOf returns the topic of a message's subject, false if the subject
// is not a topic's.
func (b *Bus) topicOf(subject string) (string, bool) {
	return strings.CutPrefix(subject, b.cfg.prefix+".topic.")
}

// subscriptionSubject is the subject of the messages meant for the
// subscription name of topic alone (a redriven dead letter): its consumer
// filters on it beside the topic's subject.
func (b *Bus) subscriptionSubject(topic, name string) string {
	return b.cfg.prefix + ".sub." + durableName(topic, name)
}

// durableName is the name of the consumer of the subscription name of
// topic: the topic's segments joined by '_' (wildcards escaped), then '_'
// and the name ("orders_billing", "orders_+_billing" for "orders.*").
// Neither segments nor names hold '_', so it names one subscription.
func durableName(topic, name string) string {
	return strings.ReplaceAll(escapeTopic(normalTopic(topic)), ".", "_") + "_" + name
}

// DeadLetterSubject returns the subject the subscription name of topic
// dead-letters to: PREFIX.dlq.TOPIC.NAME, a pattern's wildcards escaped
// ('*' as '+', '>' as '#').
func (b *Bus) DeadLetterSubject(topic, name string) string {
	return b.cfg.prefix + ".dlq." + escapeTopic(normalTopic(topic)) + "." + name
}
