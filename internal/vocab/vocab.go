// Package vocab holds the words that every backend must spell alike, so
// that a dead letter reads the same from memory, from a durable broker's
// journal (which replays it byte for byte) and from JetStream.
package vocab

// LeaseExpired is the LastError of a message whose lease expired.
const LeaseExpired = "lease expired"

// HeaderPrefix begins the name of every header below.
const HeaderPrefix = "leasebus-dead-letter-"

// Headers that a dead letter carries when it travels as a message: to a
// broker's dead-letter topic, or in JetStream's dead-letter stream.
const (
	HeaderReason       = "leasebus-dead-letter-reason"       // queue.Reason.String()
	HeaderAttempts     = "leasebus-dead-letter-attempts"     // decimal
	HeaderLastError    = "leasebus-dead-letter-last-error"   // may be empty
	HeaderSubscription = "leasebus-dead-letter-subscription" // the source subscription
	HeaderTopic        = "leasebus-dead-letter-topic"        // the source topic (or pattern)
	HeaderMessageID    = "leasebus-dead-letter-message-id"   // the original message ID
	HeaderAt           = "leasebus-dead-letter-at"           // RFC 3339 with nanoseconds
)
