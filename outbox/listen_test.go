package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/outbox"
)

// TestListenWakesTheRelay (Postgres): a relay that polls once an hour on
// a clock that does not move publishes a message another process (another
// *sql.DB) committed, woken by the NOTIFY that Enqueue sent.
func TestListenWakesTheRelay(t *testing.T) {
	each(t, func(t *testing.T, d database) {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		b, mock := brokertest.New[string](t)
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		o := open(t, d, outbox.WithClock(mock))
		if d.dialect != outbox.Postgres {
			if err := o.Listen(ctx); !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("Listen on SQLite: %v", err)
			}
			return
		}
		relay, err := o.NewRelay(b, outbox.WithPollInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := o.Listen(runCtx); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() { _ = relay.Run(runCtx) })
		defer func() { stop(); wg.Wait() }()

		other, err := sql.Open("pgx", os.Getenv(pgEnv))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		o2, err := outbox.New[string](other, outbox.Postgres, nil, outbox.WithTablePrefix(d.prefix))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"first", "second"} {
			tx, err := other.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := o2.Enqueue(ctx, tx, "orders", p); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil { // no Wake: another process
				t.Fatal(err)
			}
			ds, err := sub.Poll(ctx, 1)
			if err != nil || len(ds) != 1 || ds[0].Payload != p {
				t.Fatalf("Poll: %+v, %v; want %q", ds, err, p)
			}
			if err := sub.Ack(ds[0].LeaseID); err != nil {
				t.Fatal(err)
			}
		}
	})
}
