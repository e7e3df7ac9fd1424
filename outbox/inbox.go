package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// TxHandler handles a delivery inside a transaction of the outbox's
// database: its effects are the rows it writes with tx (and the messages
// it enqueues with tx, Enqueue).
type TxHandler[T any] func(ctx context.Context, tx *sql.Tx, d queue.Delivery[T]) error

// Handler returns a poller.Handler that runs h in a transaction which
// also records the message in the inbox table, and commits the two
// together: a delivery of a message already recorded (the handler's
// commit went through, the ack did not: a crash, an expired lease) is
// acked without running h again, so h's effects happen once. A message a
// relay published is recorded by its row's dedup ID (the HeaderDedupID
// header), which every publish of the row carries, so a row published
// again after the backend's dedup window (a relay down longer than it) is
// still handled once; any other message, by its message ID. If h returns
// an error the transaction rolls back, nothing is recorded, and the
// error goes to the pool (a retry). Concurrent deliveries of one message
// (after a lease expired) take turns on the inbox row: the second sees
// the first's commit, or runs h itself if the first rolled back.
//
// The inbox keeps an ID until Prune removes it; keep IDs longer than a
// message can be redelivered (its attempts times its lease and backoff).
func (o *Outbox[T]) Handler(h TxHandler[T]) poller.Handler[T] {
	return func(ctx context.Context, d queue.Delivery[T]) (err error) {
		tx, err := o.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("outbox: inbox: begin: %w", err)
		}
		defer rollbackOnPanic(tx)
		res, err := tx.ExecContext(ctx, o.sql.inboxMark, inboxKey(d.Message), o.clk.Now().UnixNano())
		if err != nil {
			return joinRollback(fmt.Errorf("outbox: inbox: %w", err), tx)
		}
		if n, err := res.RowsAffected(); err != nil {
			return joinRollback(fmt.Errorf("outbox: inbox: %w", err), tx)
		} else if n == 0 { // done before: ack
			return rollback(tx)
		}
		if err := h(ctx, tx, d); err != nil {
			return joinRollback(err, tx)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("outbox: inbox: commit: %w", err)
		}
		o.Wake() // h may have enqueued
		return nil
	}
}

// inboxKey is what the inbox records of m: the dedup ID of the outbox row
// it was published from, or its message ID. The two never collide: a
// dedup ID is recorded with a prefix a UUID's text never has.
func inboxKey[T any](m queue.Message[T]) string {
	if id, ok := m.Headers.Lookup(HeaderDedupID); ok {
		return "dedup:" + id
	}
	return m.ID.String()
}

func joinRollback(err error, tx *sql.Tx) error {
	if rerr := rollback(tx); rerr != nil {
		return fmt.Errorf("%w (and %v)", err, rerr)
	}
	return err
}

// Prune deletes the inbox's records older than age (on the outbox's
// clock) and returns how many. age > 0.
func (o *Outbox[T]) Prune(ctx context.Context, age time.Duration) (int64, error) {
	if age <= 0 {
		return 0, invalid("Prune(%v): age must be > 0", age)
	}
	res, err := o.db.ExecContext(ctx, o.sql.inboxPrune, o.clk.Now().UnixNano()-int64(age)) // no overflow: now is after 1970
	if err != nil {
		return 0, fmt.Errorf("outbox: prune: %w", err)
	}
	return res.RowsAffected()
}
