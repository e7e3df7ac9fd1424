package backend

// LeaseExpired is the LastError of a message dead-lettered because its
// last lease expired: no consumer reported an error.
const LeaseExpired = "lease expired"

// HeaderPrefix begins the name of every dead-letter header below.
const HeaderPrefix = "leasebus-dead-letter-"

// The headers a dead letter carries when it travels as a message: to a
// broker's dead-letter topic (broker.WithDeadLetterTopic, read back with
// broker.DeadLetterOf) or in JetStream's dead-letter stream. One consumer
// reads both.
const (
	HeaderReason       = HeaderPrefix + "reason"       // queue.Reason.String(), read back by queue.ParseReason
	HeaderAttempts     = HeaderPrefix + "attempts"     // deliveries spent, in decimal
	HeaderLastError    = HeaderPrefix + "last-error"   // the last failure's text; may be empty
	HeaderSubscription = HeaderPrefix + "subscription" // the source subscription
	HeaderTopic        = HeaderPrefix + "topic"        // the source topic (or pattern)
	HeaderMessageID    = HeaderPrefix + "message-id"   // the original message's ID
	HeaderAt           = HeaderPrefix + "at"           // when it was dead-lettered, RFC 3339 with nanoseconds
)
