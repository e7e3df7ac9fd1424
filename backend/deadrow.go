package backend

import (
	"time"

	"github.com/leasebus/leasebus/queue"
)

// DeadRow is a row a transactional outbox's relay moved aside (the outbox
// module's dead-row table): its publish was refused for good (Permanent),
// or its payload or headers did not decode, and the rows after it went on.
// It stays until it is requeued or discarded. Declared here so that the
// console shows an outbox's dead rows without importing the outbox.
type DeadRow struct {
	ID         int64 // the row's ID in the outbox
	Topic      string
	Payload    []byte // as the outbox's codec encoded it
	Key        string
	Priority   queue.Priority
	Headers    map[string]string // nil if none, or if they did not decode
	Delay      time.Duration
	DedupID    string
	TTL        time.Duration // from the publish; 0: none
	EnqueuedAt time.Time
	Error      string    // why it was moved aside
	DeadAt     time.Time // when, on the outbox's clock
}
