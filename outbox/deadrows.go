package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// DeadRow is a row the relay moved aside, to the dead-row table
// (prefix_dead): its publish was refused for good (backend.Permanent: a
// topic name or a dedup ID the backend does not take, an option it cannot
// carry, a message too large), or its payload or headers did not decode.
// The rows after it went on. A dead row stays until RequeueDeadRows puts
// it back or DiscardDeadRows deletes it; the console shows them
// (console.WithOutbox). It is backend.DeadRow.
type DeadRow = backend.DeadRow

// DeadRows returns up to limit dead rows whose ID is above after, in ID
// order: pass the last one's ID to read the next page. limit >= 1.
func (o *Outbox[T]) DeadRows(ctx context.Context, after int64, limit int) ([]DeadRow, error) {
	if limit < 1 {
		return nil, invalid("DeadRows: limit %d, must be >= 1", limit)
	}
	rs, err := o.db.QueryContext(ctx, o.sql.deadList, after, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: dead rows: %w", err)
	}
	defer rs.Close()
	var out []DeadRow
	for rs.Next() {
		var (
			d                            DeadRow
			headers                      string
			prio, delay, at, ttl, deadAt int64
		)
		if err := rs.Scan(&d.ID, &d.Topic, &d.Payload, &d.Key, &prio, &headers, &delay, &d.DedupID, &at, &ttl, &d.Error, &deadAt); err != nil {
			return nil, fmt.Errorf("outbox: dead rows: %w", err)
		}
		if headers != "" {
			_ = json.Unmarshal([]byte(headers), &d.Headers) // a row may be dead for its headers: Error says so
		}
		d.Priority, d.Delay, d.TTL = queue.Priority(prio), time.Duration(delay), time.Duration(ttl)
		d.EnqueuedAt, d.DeadAt = time.Unix(0, at), time.Unix(0, deadAt)
		out = append(out, d)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: dead rows: %w", err)
	}
	return out, nil
}

// DeadRowCount returns how many dead rows there are.
func (o *Outbox[T]) DeadRowCount(ctx context.Context) (int64, error) {
	var n int64
	if err := o.db.QueryRowContext(ctx, o.sql.deadCount).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: dead rows: %w", err)
	}
	return n, nil
}

// RequeueDeadRows puts the dead rows with these IDs back in the outbox, in
// ID order, as new rows (after every row there now) with their dedup IDs,
// deletes them from the dead-row table, and wakes the relay; an ID that is
// not a dead row is passed over. It returns how many it put back. Requeue
// once what refused them is fixed (the topic made, the publisher changed),
// or the relay moves them aside again.
func (o *Outbox[T]) RequeueDeadRows(ctx context.Context, ids ...int64) (int64, error) {
	n, err := o.moveDead(ctx, "requeue", ids, true)
	if n > 0 {
		o.Wake()
	}
	return n, err
}

// DiscardDeadRows deletes the dead rows with these IDs for good and returns
// how many it deleted; an ID that is not a dead row is passed over.
func (o *Outbox[T]) DiscardDeadRows(ctx context.Context, ids ...int64) (int64, error) {
	return o.moveDead(ctx, "discard", ids, false)
}

// moveDead deletes the dead rows with ids, copying them back to the
// outbox first if requeue, in one transaction, a chunk of IDs a statement.
func (o *Outbox[T]) moveDead(ctx context.Context, op string, ids []int64, requeue bool) (n int64, err error) {
	if len(ids) == 0 {
		return 0, nil
	}
	err = o.InTx(ctx, func(tx *sql.Tx) error {
		for rest := ids; len(rest) > 0; {
			chunk := make([]any, 0, min(len(rest), deleteChunk))
			for _, id := range rest[:cap(chunk)] {
				chunk = append(chunk, id)
			}
			rest = rest[len(chunk):]
			if requeue {
				if _, err := tx.ExecContext(ctx, o.sql.requeue(len(chunk)), chunk...); err != nil {
					return err
				}
				if o.sql.notify != "" {
					if _, err := tx.ExecContext(ctx, o.sql.notify, o.sql.channel); err != nil {
						return err
					}
				}
			}
			res, err := tx.ExecContext(ctx, o.sql.deadDelete(len(chunk)), chunk...)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: %s dead rows: %w", op, err)
	}
	return n, nil
}
