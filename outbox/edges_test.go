package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/outbox"
	"github.com/leasebus/leasebus/queue"
)

// TestInboxRunsAnEffectOnceAcrossTheWindow: a row published, then
// published again after the backend's dedup window (the relay failed
// after the publish and came back later) is two messages with two IDs;
// the inbox keys on the row's dedup ID, which both carry, so Handler runs
// the effect once.
func TestInboxRunsAnEffectOnceAcrossTheWindow(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx := context.Background()
		b, mock := brokertest.New[string](t, broker.WithDedupWindow(time.Minute))
		o := open(t, d, outbox.WithClock(mock))
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		effects := d.prefix + "_effects"
		if _, err := d.db.Exec("CREATE TABLE " + effects + " (order_id TEXT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		h := o.Handler(func(ctx context.Context, tx *sql.Tx, dl queue.Delivery[string]) error {
			_, err := tx.ExecContext(ctx, rebind(d, "INSERT INTO "+effects+" (order_id) VALUES (?)"), dl.Payload)
			return err
		})
		if err := o.InTx(ctx, func(tx *sql.Tx) error {
			_, err := o.Enqueue(ctx, tx, "orders", "order-1")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		to := outbox.ToBroker(b)
		crash := true
		relay, err := o.NewRelay(outbox.PublisherFunc[string](func(ctx context.Context, m outbox.Message[string]) error {
			if err := to.Publish(ctx, m); err != nil {
				return err
			}
			if crash {
				crash = false
				return errors.New("crashed after the publish")
			}
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := relay.RunOnce(ctx); err == nil {
			t.Fatal("the first batch did not fail")
		}
		handle := func() {
			t.Helper()
			ds := sub.TryPoll(10)
			if len(ds) != 1 {
				t.Fatalf("polled %d, want 1", len(ds))
			}
			if err := h(ctx, ds[0]); err != nil {
				t.Fatal(err)
			}
			if err := sub.Ack(ds[0].LeaseID); err != nil {
				t.Fatal(err)
			}
		}
		handle()
		mock.Add(2 * time.Minute) // past the dedup window
		if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("RunOnce after the window: %d, %v", n, err)
		}
		handle() // a new message ID: the broker no longer knew the dedup ID
		var n int
		if err := d.db.QueryRow("SELECT count(*) FROM " + effects).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("%d effects of one row published twice, want 1", n)
		}
	})
}

// TestBatchAboveTheParameterLimit: a batch larger than the statement
// parameters a database takes (SQLite 32,766; Postgres 65,535) deletes
// what it published in statements that fit, so it publishes each row once
// rather than failing its delete and publishing them all again.
func TestBatchAboveTheParameterLimit(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx := context.Background()
		o := open(t, d)
		rows := 33_000
		fill := `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
INSERT INTO ` + d.prefix + ` (topic, payload, dedup_id, enqueued_at) SELECT 'orders', CAST('x' AS BLOB), 'row-' || n, 0 FROM g`
		if d.dialect == outbox.Postgres {
			rows = 66_000
			fill = `INSERT INTO ` + d.prefix + ` (topic, payload, dedup_id, enqueued_at) SELECT 'orders', '\x78'::bytea, 'row-' || n, 0 FROM generate_series(1, ?) AS n`
		}
		if _, err := d.db.ExecContext(ctx, rebind(d, fill), rows); err != nil {
			t.Fatal(err)
		}
		var published int
		relay, err := o.NewRelay(outbox.PublisherFunc[string](func(context.Context, outbox.Message[string]) error {
			published++
			return nil
		}), outbox.WithBatch(rows+7_000))
		if err != nil {
			t.Fatal(err)
		}
		if n, err := relay.RunOnce(ctx); err != nil || n != rows {
			t.Fatalf("RunOnce: %d, %v; want %d", n, err, rows)
		}
		if n, err := relay.RunOnce(ctx); err != nil || n != 0 {
			t.Fatalf("RunOnce again: %d, %v; want nothing left", n, err)
		}
		if published != rows {
			t.Fatalf("published %d for %d rows", published, rows)
		}
	})
}
