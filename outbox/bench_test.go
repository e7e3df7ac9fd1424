package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/outbox"
)

// benchDatabases are the databases of a benchmark, each with an orders
// table standing for the application's own.
func benchDatabases(b *testing.B) []database {
	dbs := databases(b)
	for _, d := range dbs {
		q := "CREATE TABLE " + d.prefix + "_effects (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"
		if d.dialect == outbox.Postgres {
			q = "CREATE TABLE " + d.prefix + "_effects (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)"
		}
		if _, err := d.db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	return dbs
}

// BenchmarkEnqueue: a transaction that inserts the application's row,
// alone (plain) and with a message enqueued beside it (outbox).
func BenchmarkEnqueue(b *testing.B) {
	for _, d := range benchDatabases(b) {
		o := open(b, d)
		insert := rebind(d, "INSERT INTO "+d.prefix+"_effects (body) VALUES (?)")
		for _, withOutbox := range []bool{false, true} {
			name := map[bool]string{false: "plain", true: "outbox"}[withOutbox]
			b.Run(d.name+"/"+name, func(b *testing.B) {
				ctx := context.Background()
				for b.Loop() {
					tx, err := d.db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := tx.ExecContext(ctx, insert, `{"order":1}`); err != nil {
						b.Fatal(err)
					}
					if withOutbox {
						if _, err := o.Enqueue(ctx, tx, "orders", `{"order":1}`); err != nil {
							b.Fatal(err)
						}
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkRelay: the relay's throughput to an in-memory broker, by batch
// size, over rows committed before the timer starts.
func BenchmarkRelay(b *testing.B) {
	for _, d := range benchDatabases(b) {
		o := open(b, d)
		for _, batch := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", d.name, batch), func(b *testing.B) {
				ctx := context.Background()
				br, err := broker.New[string](broker.WithSubscriptionDefaults(broker.WithMaxQueue(1 << 30)))
				if err != nil {
					b.Fatal(err)
				}
				defer br.Close()
				if err := br.CreateTopic("orders"); err != nil {
					b.Fatal(err)
				}
				if _, err := br.Subscribe("orders", "billing"); err != nil {
					b.Fatal(err)
				}
				relay, err := o.NewRelay(br, outbox.WithBatch(batch))
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < b.N; i += 1000 {
					if err := o.InTx(ctx, func(tx *sql.Tx) error {
						for j := i; j < i+1000 && j < b.N; j++ {
							if _, err := o.Enqueue(ctx, tx, "orders", `{"order":1}`); err != nil {
								return err
							}
						}
						return nil
					}); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				n, err := relay.RunOnce(ctx)
				b.StopTimer()
				if err != nil || n != b.N {
					b.Fatalf("relayed %d of %d: %v", n, b.N, err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkPrune: a Prune that finds nothing old enough, over an inbox of
// 100,000 records, with the inbox's index on processed_at and without
// it: the index is what keeps a periodic Prune from reading the table.
func BenchmarkPrune(b *testing.B) {
	for _, d := range benchDatabases(b) {
		o := open(b, d)
		ctx := context.Background()
		now := time.Now().UnixNano()
		insert := rebind(d, "INSERT INTO "+d.prefix+"_inbox (message_id, processed_at) VALUES (?, ?)")
		for i := 0; i < 100_000; i += 1000 {
			tx, err := d.db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			for j := i; j < i+1000; j++ {
				if _, err := tx.ExecContext(ctx, insert, fmt.Sprint("m", j), now); err != nil {
					b.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		if d.dialect == outbox.Postgres {
			if _, err := d.db.Exec("ANALYZE " + d.prefix + "_inbox"); err != nil {
				b.Fatal(err)
			}
		}
		for _, index := range []bool{true, false} {
			if !index {
				if _, err := d.db.Exec("DROP INDEX " + d.prefix + "_inbox_processed_at"); err != nil {
					b.Fatal(err)
				}
			}
			b.Run(fmt.Sprintf("%s/index=%v", d.name, index), func(b *testing.B) {
				for b.Loop() {
					if n, err := o.Prune(ctx, time.Hour); err != nil || n != 0 {
						b.Fatal(n, err)
					}
				}
			})
		}
	}
}
