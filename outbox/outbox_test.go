package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/outbox"
	"github.com/leasebus/leasebus/queue"
)

// TestRollbackNeverCommitAlways: a message enqueued in a transaction
// that rolls back is never published; one whose transaction commits is,
// once, with what it was enqueued with.
func TestRollbackNeverCommitAlways(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx := context.Background()
		o := open(t, d)
		b, _ := brokertest.New[string](t)
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		relay, err := o.NewRelay(b)
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("the order failed validation")
		err = o.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := o.Enqueue(ctx, tx, "orders", "rolled back"); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InTx: %v", err)
		}
		err = o.InTx(ctx, func(tx *sql.Tx) error {
			_, err := o.Enqueue(ctx, tx, "orders", "committed", queue.WithKey("customer-7"),
				queue.WithPriority(queue.PriorityHigh), queue.WithHeaders(map[string]string{"trace": "abc"}))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("RunOnce: %d, %v; want 1", n, err)
		}
		ds := sub.TryPoll(10)
		if len(ds) != 1 {
			t.Fatalf("delivered %+v, want the committed message alone", ds)
		}
		m := ds[0]
		if m.Payload != "committed" || m.Key != "customer-7" || m.Priority != queue.PriorityHigh || m.Headers.Get("trace") != "abc" {
			t.Fatalf("delivered %+v", m.Message)
		}
		if n, err := relay.RunOnce(ctx); err != nil || n != 0 {
			t.Fatalf("RunOnce again: %d, %v; want nothing left", n, err)
		}
		if st := relay.Stats(); st.Published != 1 || st.Batches != 1 || st.Failures != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestPublishedButNotDeleted: a batch whose publish went through but
// which failed before the delete (as a crash there does) leaves its rows;
// the next batch publishes them again under the same dedup IDs and the
// broker keeps one of each.
func TestPublishedButNotDeleted(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx := context.Background()
		o := open(t, d)
		b, _ := brokertest.New[string](t)
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		for i := range 5 {
			if err := o.InTx(ctx, func(tx *sql.Tx) error {
				_, err := o.Enqueue(ctx, tx, "orders", fmt.Sprint("order-", i))
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		to := backend.Publisher[string](b)
		crashes := 2 // publish row 3, then fail, twice
		relay, err := o.NewRelay(wrap(to, func(payload string, publish func() error) error {
			if err := publish(); err != nil {
				return err
			}
			if payload == "order-3" && crashes > 0 {
				crashes--
				return errors.New("crashed after the publish")
			}
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		if n, err := relay.RunOnce(ctx); err == nil || n != 3 {
			t.Fatalf("first: %d, %v; want 3 deleted and the failure", n, err)
		}
		if n, err := relay.RunOnce(ctx); err == nil || n != 0 {
			t.Fatalf("second: %d, %v; want the failure again, nothing deleted", n, err)
		}
		if n, err := relay.RunOnce(ctx); err != nil || n != 2 {
			t.Fatalf("third: %d, %v; want the last two", n, err)
		}
		var got []string
		for _, dl := range sub.TryPoll(10) {
			got = append(got, dl.Payload)
		}
		if fmt.Sprint(got) != "[order-0 order-1 order-2 order-3 order-4]" {
			t.Fatalf("delivered %v: want each once, in order", got)
		}
		if st := relay.Stats(); st.Published != 5 || st.Failures != 2 || st.LastError == nil {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestOneKeyWaitsForTheOtherCommit (Postgres): a second transaction that
// enqueues with a key another open transaction enqueued with waits for
// its commit, so a key's rows are in commit order, and the relay
// publishes them so. (SQLite runs one write transaction at a time.)
func TestOneKeyWaitsForTheOtherCommit(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		if d.dialect != outbox.Postgres {
			t.Skip("SQLite has one writer at a time: commit order is ID order")
		}
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		o := open(t, d)
		first, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Enqueue(ctx, first, "orders", "first", queue.WithKey("k")); err != nil {
			t.Fatal(err)
		}
		second := make(chan error, 1)
		go func() {
			second <- o.InTx(ctx, func(tx *sql.Tx) error {
				_, err := o.Enqueue(ctx, tx, "orders", "second", queue.WithKey("k"))
				return err
			})
		}()
		// The second waits on the key's lock (a lock not granted).
		for {
			var waiting int
			if err := d.db.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting > 0 {
				break
			}
			select {
			case err := <-second:
				t.Fatalf("the second enqueue of key k did not wait for the first's commit: %v", err)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			default:
			}
		}
		if err := first.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		b, _ := brokertest.New[string](t)
		sub := brokertest.Subscribe(t, b, "orders", "billing", broker.WithKeyConcurrency(2))
		relay, err := o.NewRelay(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := relay.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		ds := sub.TryPoll(10)
		if len(ds) != 2 || ds[0].Payload != "first" || ds[1].Payload != "second" {
			t.Fatalf("delivered %+v", ds)
		}
	})
}

// TestHandlerRunsEachEffectOnce: the inbox handler commits the effect and
// the message's ID together; a second delivery of the message is acked
// without running the effect; a failed handler records nothing.
func TestHandlerRunsEachEffectOnce(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx := context.Background()
		b, mock := brokertest.New[string](t)
		o := open(t, d, outbox.WithClock(mock))
		effects := d.prefix + "_effects"
		if _, err := d.db.Exec("CREATE TABLE " + effects + " (order_id TEXT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		failNext := true
		h := o.Handler(func(ctx context.Context, tx *sql.Tx, dl queue.Delivery[string]) error {
			if _, err := tx.ExecContext(ctx, rebind(d, "INSERT INTO "+effects+" (order_id) VALUES (?)"), dl.Payload); err != nil {
				return err
			}
			if failNext {
				failNext = false
				return errors.New("the card was declined")
			}
			return nil
		})
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		brokertest.Publish(t, b, "orders", "order-1")
		dl := sub.TryPoll(1)[0]
		if err := h(ctx, dl); err == nil || err.Error() != "the card was declined" {
			t.Fatalf("first: %v", err)
		}
		for range 3 { // the handler's commit went through, then the ack was lost, three times
			if err := h(ctx, dl); err != nil {
				t.Fatal(err)
			}
		}
		count := func() int {
			var n int
			if err := d.db.QueryRow("SELECT count(*) FROM " + effects).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		// The inbox keeps the ID until Prune forgets it; then the message
		// would run again: keep IDs longer than redeliveries go on.
		if pruned, err := o.Prune(ctx, time.Hour); err != nil || pruned != 0 {
			t.Fatalf("Prune of an hour, at once: %d, %v", pruned, err)
		}
		mock.Add(time.Hour + time.Nanosecond)
		if pruned, err := o.Prune(ctx, time.Hour); err != nil || pruned != 1 {
			t.Fatalf("Prune of an hour, an hour on: %d, %v", pruned, err)
		}
		if err := h(ctx, dl); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != 2 {
			t.Fatalf("after the prune: %d effects, want 2", n)
		}
	})
}

func TestBadInput(t *testing.T) {
	d := databases(t)[0] // SQLite: every refusal comes before any SQL
	ctx := context.Background()
	if _, err := outbox.New[string](nil, outbox.SQLite, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("nil db: %v", err)
	}
	for _, c := range []struct {
		dialect outbox.Dialect
		opt     outbox.Option
	}{{0, outbox.WithTablePrefix("x")}, {outbox.SQLite, outbox.WithTablePrefix("X; DROP")}, {outbox.SQLite, outbox.WithTablePrefix("")}, {outbox.SQLite, outbox.WithClock(nil)}, {outbox.SQLite, outbox.Option{}}} {
		if _, err := outbox.New[string](d.db, c.dialect, nil, c.opt); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("New(%v): %v", c.dialect, err)
		}
	}
	if _, err := outbox.New[string](d.db, outbox.SQLite, nil, outbox.WithCheck(nil)); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("WithCheck(nil): %v", err)
	}
	b, _ := brokertest.New[string](t)
	o := open(t, d, outbox.WithCheck(b))
	tx, err := d.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for what, f := range map[string]func() error{
		"a topic the broker refuses": func() error { _, err := o.Enqueue(ctx, tx, "orders..x", "x"); return err },
		"a dedup ID too long": func() error {
			_, err := o.Enqueue(ctx, tx, "t", "x", queue.WithDedupID(strings.Repeat("d", queue.MaxDedupID+1)))
			return err
		},
		"WithDedupIDs":   func() error { _, err := o.Enqueue(ctx, tx, "t", "x", queue.WithDedupIDs([]string{"a"})); return err },
		"nil tx":         func() error { _, err := o.Enqueue(ctx, nil, "t", "x"); return err },
		"empty topic":    func() error { _, err := o.Enqueue(ctx, tx, "", "x"); return err },
		"negative delay": func() error { _, err := o.Enqueue(ctx, tx, "t", "x", queue.WithDelay(-1)); return err },
		"zero option":    func() error { _, err := o.Enqueue(ctx, tx, "t", "x", queue.PublishOption{}); return err },
		"nil publisher":  func() error { _, err := o.NewRelay(nil); return err },
		"batch 0":        func() error { _, err := o.NewRelay(b, outbox.WithBatch(0)); return err },
		"poll 0": func() error {
			_, err := o.NewRelay(b, outbox.WithPollInterval(0))
			return err
		},
		"no backoff": func() error {
			_, err := o.NewRelay(b, outbox.WithRetry(queue.RetryPolicy{NoBackoff: true}))
			return err
		},
		"prune 0": func() error { _, err := o.Prune(ctx, 0); return err },
	} {
		if err := f(); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v", what, err)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
}

// TestAPanicRollsBack: a panic in the caller's code inside InTx or
// Handler rolls the transaction back before it goes on: nothing is
// enqueued, and the connection is free for the next transaction.
func TestAPanicRollsBack(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx := context.Background()
		o := open(t, d)
		d.db.SetMaxOpenConns(1) // a transaction left open would hold the one connection
		func() {
			defer func() {
				if v := recover(); v != "boom" {
					t.Fatalf("recovered %v", v)
				}
			}()
			_ = o.InTx(ctx, func(tx *sql.Tx) error {
				if _, err := o.Enqueue(ctx, tx, "orders", "never"); err != nil {
					return err
				}
				panic("boom")
			})
		}()
		b, _ := brokertest.New[string](t)
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		relay, err := o.NewRelay(b)
		if err != nil {
			t.Fatal(err)
		}
		ctx2, cancel := context.WithTimeout(ctx, hangGuard)
		defer cancel()
		if n, err := relay.RunOnce(ctx2); err != nil || n != 0 {
			t.Fatalf("RunOnce after the panic: %d, %v; want nothing enqueued", n, err)
		}
		brokertest.Publish(t, b, "orders", "x")
		h := o.Handler(func(context.Context, *sql.Tx, queue.Delivery[string]) error { panic("boom") })
		func() {
			defer func() { _ = recover() }()
			_ = h(ctx2, sub.TryPoll(1)[0])
		}()
		if err := o.InTx(ctx2, func(tx *sql.Tx) error { return nil }); err != nil {
			t.Fatalf("a transaction after the handler's panic: %v", err)
		}
	})
}
