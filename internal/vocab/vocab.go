// Package vocab holds the words that every backend must spell alike, so
// that a dead letter reads the same from memory, from a durable broker's
// journal (which replays it byte for byte) and from JetStream.
package vocab

// LeaseExpired is the LastError of a message whose lease expired.
const LeaseExpired = "lease expired"
