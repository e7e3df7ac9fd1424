package pgside

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// TestSoak publishes and drains at full speed for LEASEBUS_PGSIDE_SOAK
// (a duration: 10m for the figures in docs/BENCHMARKS.md), and logs the
// messages table's live and dead tuples and its size every tenth of the
// run: a queue's rows come and go, and what autovacuum does not reclaim
// piles up. With LEASEBUS_PGSIDE_SOAK_DEFAULTS=1 the table's own
// autovacuum settings are reset to the server's defaults first.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("LEASEBUS_PGSIDE_SOAK"))
	if err != nil {
		t.Skip("set LEASEBUS_PGSIDE_SOAK to a duration (10m) to soak")
	}
	pool := testPool(t)
	ctx := context.Background()
	schema := fmt.Sprintf("pgsoak%d", os.Getpid())
	l, err := openLeasebus(ctx, pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if os.Getenv("LEASEBUS_PGSIDE_SOAK_DEFAULTS") != "" {
		if _, err := pool.Exec(ctx, "ALTER TABLE "+schema+`.messages RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
			autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor)`); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var published, acked atomic.Int64
	// Publishers keep a backlog of about 20,000 ahead of the workers.
	pubDone := make(chan error, 2)
	for range 2 {
		go func() {
			jobs := make([]Job, 500)
			for runCtx.Err() == nil {
				if published.Load()-acked.Load() > 20_000 {
					time.Sleep(5 * time.Millisecond) // the backlog is full: let the workers catch up
					continue
				}
				if _, err := l.pub.PublishBatch(runCtx, "jobs", jobs); err != nil && runCtx.Err() == nil {
					pubDone <- err
					return
				}
				published.Add(int64(len(jobs)))
			}
			pubDone <- nil
		}()
	}
	p, err := poller.New(l.sub, func(context.Context, queue.Delivery[Job]) error { return nil },
		poller.WithWorkers(workers), poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		poller.WithObserver(func(ev poller.Event[Job]) {
			if ev.Outcome == poller.OutcomeAcked {
				acked.Add(1)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()

	sample := func(at time.Duration) {
		var live, dead, vacuums, autovacuums, updates, hot int64
		var size, heap int64
		err := pool.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup, vacuum_count, autovacuum_count, n_tup_upd, n_tup_hot_upd,
	pg_total_relation_size(relid), pg_relation_size(relid)
FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'messages'`, schema).Scan(&live, &dead, &vacuums, &autovacuums, &updates, &hot, &size, &heap)
		if err != nil {
			t.Error(err)
			return
		}
		t.Logf("%8v acked %9d  live %7d  dead %7d  autovacuums %3d  HOT updates %3.0f%%  table %6.1f MiB (heap %6.1f MiB)",
			at.Round(time.Second), acked.Load(), live, dead, autovacuums, 100*float64(hot)/float64(max(updates, 1)), float64(size)/(1<<20), float64(heap)/(1<<20))
	}
	start := time.Now()
	tick := time.NewTicker(d / 10)
	defer tick.Stop()
	for runCtx.Err() == nil {
		select {
		case <-tick.C:
			sample(time.Since(start))
		case <-runCtx.Done():
		}
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-pubDone; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d acked in %v: %.0f a second", acked.Load(), d, float64(acked.Load())/d.Seconds())
	sample(time.Since(start))
}
