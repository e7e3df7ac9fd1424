package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
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
		to := backend.Publisher[string](b)
		crash := true
		relay, err := o.NewRelay(wrap(to, func(_ string, publish func() error) error {
			if err := publish(); err != nil {
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
		b, _ := brokertest.New[string](t)
		relay, err := o.NewRelay(wrap(backend.Publisher[string](b), func(string, func() error) error {
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

// TestARefusedRowIsMovedAside: a row whose publish the backend refuses for
// good (a topic name it does not take) or whose payload does not decode
// is moved to the dead-row table with its error, and the rows after it
// are published; a transient failure still stops the batch there, to be
// retried in order. A dead row can be requeued, or discarded.
func TestARefusedRowIsMovedAside(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx := context.Background()
		type order struct{ N int }
		o, err := outbox.New[order](d.db, d.dialect, queue.JSONCodec[order](), outbox.WithTablePrefix(d.prefix))
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		b, _ := brokertest.New[order](t)
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		if err := o.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := o.Enqueue(ctx, tx, "orders..x", order{1}); err != nil { // a name the broker refuses
				return err
			}
			if _, err := tx.ExecContext(ctx, rebind(d, "INSERT INTO "+d.prefix+" (topic, payload, dedup_id, enqueued_at) VALUES ('orders', ?, 'bad-json', 0)"), []byte("{not json")); err != nil {
				return err
			}
			_, err := o.Enqueue(ctx, tx, "orders", order{3})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		down := true // the broker is down, then back: a transient failure
		to := backend.Publisher[order](b)
		relay, err := o.NewRelay(wrap(to, func(payload order, publish func() error) error {
			if down && payload.N == 3 {
				return errors.New("connection refused")
			}
			return publish()
		}))
		if err != nil {
			t.Fatal(err)
		}
		if n, err := relay.RunOnce(ctx); n != 0 || err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("RunOnce with the broker down: %d, %v", n, err)
		}
		if st := relay.Stats(); st.DeadRows != 2 || st.Published != 0 || st.Failures != 1 {
			t.Fatalf("stats %+v: want the two bad rows moved aside and the good one's failure", st)
		}
		down = false
		if n, err := relay.RunOnce(ctx); n != 1 || err != nil {
			t.Fatalf("RunOnce: %d, %v; want the good row", n, err)
		}
		if ds := sub.TryPoll(10); len(ds) != 1 || ds[0].Payload.N != 3 {
			t.Fatalf("delivered %+v", ds)
		}
		dead, err := o.DeadRows(ctx, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 2 || dead[0].Topic != "orders..x" || !strings.Contains(dead[0].Error, "empty dot-separated segment") ||
			dead[1].DedupID != "bad-json" || !strings.Contains(dead[1].Error, "decode the payload") || string(dead[1].Payload) != "{not json" {
			t.Fatalf("dead rows %+v", dead)
		}
		if n, err := o.DeadRowCount(ctx); n != 2 || err != nil {
			t.Fatalf("DeadRowCount: %d, %v", n, err)
		}
		if page, err := o.DeadRows(ctx, dead[0].ID, 10); err != nil || len(page) != 1 || page[0].ID != dead[1].ID {
			t.Fatalf("the page after the first: %+v, %v", page, err)
		}
		// The JSON row fixed by hand in the table, then requeued: published.
		if _, err := d.db.ExecContext(ctx, rebind(d, "UPDATE "+d.prefix+"_dead SET payload = ? WHERE id = ?"), []byte(`{"N":2}`), dead[1].ID); err != nil {
			t.Fatal(err)
		}
		if n, err := o.RequeueDeadRows(ctx, dead[1].ID, 12345); n != 1 || err != nil {
			t.Fatalf("RequeueDeadRows: %d, %v", n, err)
		}
		if n, err := relay.RunOnce(ctx); n != 1 || err != nil {
			t.Fatalf("RunOnce after the requeue: %d, %v", n, err)
		}
		if ds := sub.TryPoll(10); len(ds) != 1 || ds[0].Payload.N != 2 || ds[0].Headers.Get(outbox.HeaderDedupID) != "bad-json" {
			t.Fatalf("delivered %+v", ds)
		}
		if n, err := o.DiscardDeadRows(ctx, dead[0].ID, dead[1].ID); n != 1 || err != nil {
			t.Fatalf("DiscardDeadRows: %d, %v", n, err)
		}
		if n, err := o.DeadRowCount(ctx); n != 0 || err != nil {
			t.Fatalf("DeadRowCount: %d, %v", n, err)
		}
		if _, err := o.DeadRows(ctx, 0, 0); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Fatalf("DeadRows limit 0: %v", err)
		}
	})
}

// TestRelayAwaitQuiet: a test waits for a running relay to be at rest,
// after a commit, after its poll interval passes on a mock clock, and
// after a failure, without a sleep.
func TestRelayAwaitQuiet(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		b, mock := brokertest.New[string](t)
		o := open(t, d, outbox.WithClock(mock))
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		to := backend.Publisher[string](b)
		var fail atomic.Bool
		relay, err := o.NewRelay(wrap(to, func(_ string, publish func() error) error {
			if fail.Load() {
				return errors.New("broker unreachable")
			}
			return publish()
		}), outbox.WithPollInterval(time.Minute), outbox.WithRetry(queue.RetryPolicy{Initial: time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		if err := relay.AwaitQuiet(canceledCtx()); !errors.Is(err, context.Canceled) {
			t.Fatalf("AwaitQuiet with no Run: %v", err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relay.Run(runCtx) }()
		defer func() { stop(); <-done }()
		quiet := func(what string, published uint64) {
			t.Helper()
			if err := relay.AwaitQuiet(ctx); err != nil {
				t.Fatal(err)
			}
			if st := relay.Stats(); st.Published != published {
				t.Fatalf("%s: %+v, want %d published", what, st, published)
			}
		}
		quiet("at rest", 0)
		for i := range 20 { // each commit is relayed when AwaitQuiet returns
			if err := o.InTx(ctx, func(tx *sql.Tx) error {
				_, err := o.Enqueue(ctx, tx, "orders", fmt.Sprint("order-", i))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			quiet("after a commit", uint64(i+1))
		}
		// A commit no Wake follows (another process's) waits for the poll.
		if _, err := d.db.ExecContext(ctx, rebind(d, "INSERT INTO "+d.prefix+" (topic, payload, dedup_id, enqueued_at) VALUES ('orders', ?, 'other', 0)"), []byte("other")); err != nil {
			t.Fatal(err)
		}
		mock.Add(time.Minute - time.Nanosecond)
		quiet("short of the poll interval", 20)
		mock.Add(time.Nanosecond)
		quiet("at the poll interval", 21)
		fail.Store(true)
		if err := o.InTx(ctx, func(tx *sql.Tx) error {
			_, err := o.Enqueue(ctx, tx, "orders", "late")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		quiet("a failure", 21)
		if st := relay.Stats(); st.Failures != 1 {
			t.Fatalf("%+v, want one failure", st)
		}
		fail.Store(false)
		mock.Add(time.Second)
		quiet("the retry", 22)
		if n := len(sub.TryPoll(100)); n != 22 {
			t.Fatalf("%d delivered, want 22", n)
		}
	})
}

func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestEnqueueRefusesWhatTheRelayCannotPublish: once the outbox knows the
// publisher its rows go to (its relay's, or WithCheck), a row that
// publisher refuses for good is refused at Enqueue, in the caller's
// transaction, and nothing is written; what it takes (a TTL, from the
// publish) is carried through.
func TestEnqueueRefusesWhatTheRelayCannotPublish(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx := context.Background()
		b, mock := brokertest.New[string](t)
		o := open(t, d, outbox.WithClock(mock))
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		relay, err := o.NewRelay(b)
		if err != nil {
			t.Fatal(err)
		}
		for name, enqueue := range map[string]func(tx *sql.Tx) error{
			"a topic with an empty segment": func(tx *sql.Tx) error { _, err := o.Enqueue(ctx, tx, "orders..x", "x"); return err },
			"a topic with a space":          func(tx *sql.Tx) error { _, err := o.Enqueue(ctx, tx, "or ders", "x"); return err },
			"a dedup ID too long": func(tx *sql.Tx) error {
				_, err := o.Enqueue(ctx, tx, "orders", "x", queue.WithDedupID(strings.Repeat("d", 1025)))
				return err
			},
		} {
			if err := o.InTx(ctx, enqueue); !errors.Is(err, queue.ErrInvalidArgument) {
				t.Errorf("%s: %v, want it refused as an invalid argument", name, err)
			}
		}
		if err := o.InTx(ctx, func(tx *sql.Tx) error {
			_, err := o.Enqueue(ctx, tx, "orders", "expires", queue.WithTTL(time.Minute))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if n, err := relay.RunOnce(ctx); n != 1 || err != nil {
			t.Fatalf("RunOnce: %d, %v; want the one row written", n, err)
		}
		mock.Add(time.Minute)
		if ds := sub.TryPoll(10); len(ds) != 0 {
			t.Fatalf("delivered %+v, want it expired a minute after the publish", ds)
		}
		if dls := b.DeadLetters(); len(dls) != 1 || dls[0].Reason != queue.ReasonExpired {
			t.Fatalf("dead letters %+v, want the message expired", dls)
		}
	})
}

// TestMigrateAddsWhatAnOlderTableLacks: a table made by an earlier
// version, without ttl_ns, gains it, and Migrate again changes nothing.
func TestMigrateAddsWhatAnOlderTableLacks(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx := context.Background()
		id := "INTEGER"
		if d.dialect == outbox.Postgres {
			id = "BIGSERIAL"
		}
		if _, err := d.db.Exec(`CREATE TABLE ` + d.prefix + ` (id ` + id + ` PRIMARY KEY, topic TEXT NOT NULL, payload BYTEA NOT NULL,
	msg_key TEXT NOT NULL DEFAULT '', priority SMALLINT NOT NULL DEFAULT 0, headers TEXT NOT NULL DEFAULT '',
	delay_ns BIGINT NOT NULL DEFAULT 0, dedup_id TEXT NOT NULL DEFAULT '', enqueued_at BIGINT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if _, err := d.db.Exec(rebind(d, `INSERT INTO `+d.prefix+` (topic, payload, dedup_id, enqueued_at) VALUES ('orders', ?, 'old', 0)`), []byte("old")); err != nil {
			t.Fatal(err)
		}
		o := open(t, d) // Migrate
		if err := o.Migrate(ctx); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		b, _ := brokertest.New[string](t)
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		relay, err := o.NewRelay(b)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := relay.RunOnce(ctx); n != 1 || err != nil {
			t.Fatalf("RunOnce over the older table: %d, %v", n, err)
		}
		if ds := sub.TryPoll(10); len(ds) != 1 || ds[0].Payload != "old" {
			t.Fatalf("delivered %+v", ds)
		}
	})
}
