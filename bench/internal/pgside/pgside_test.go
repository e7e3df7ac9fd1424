package pgside

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The database: LEASEBUS_TEST_POSTGRES, as the other modules' tests take
// it (.ci/run starts a cluster); without it everything here skips.
func testPool(tb testing.TB) *pgxpool.Pool {
	url := os.Getenv("LEASEBUS_TEST_POSTGRES")
	if url == "" {
		tb.Skip("set LEASEBUS_TEST_POSTGRES to a PostgreSQL URL (bash .ci/run starts one)")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

func impls(tb testing.TB) []Impl {
	ctx := context.Background()
	is, err := Open(ctx, testPool(tb), fmt.Sprintf("pgside%d", os.Getpid()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for _, i := range is {
			if err := i.Close(); err != nil {
				tb.Error(err)
			}
		}
	})
	return is
}

// TestImpls checks that each implementation does what it is measured
// doing: every job inserted is worked, once the drain returns.
func TestImpls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, impl := range impls(t) {
		t.Run(impl.Name(), func(t *testing.T) {
			left := func(want int) {
				t.Helper()
				if n, err := impl.Count(ctx); err != nil || n != want {
					t.Fatalf("%d jobs left, want %d (%v)", n, want, err)
				}
			}
			if err := impl.InsertBatches(ctx, 250, 100); err != nil {
				t.Fatal(err)
			}
			if err := impl.InsertEach(ctx, 50, 4); err != nil {
				t.Fatal(err)
			}
			left(300)
			if err := impl.Drain(ctx, 300, 4); err != nil {
				t.Fatal(err)
			}
			left(0)
			if l, ok := impl.(*leasebusImpl); ok {
				if err := l.InsertBatches(ctx, 100, 30); err != nil {
					t.Fatal(err)
				}
				if err := l.DrainHand(ctx, 100, 4); err != nil {
					t.Fatal(err)
				}
				left(0)
			}
			ls, err := impl.Latency(ctx, 20, 4, time.Millisecond)
			if err != nil || len(ls) != 20 {
				t.Fatalf("latency: %d, %v", len(ls), err)
			}
			left(0)
		})
	}
}

// jobs is how many jobs a benchmark's operation inserts or drains:
// 100,000 (LEASEBUS_PGSIDE_JOBS to change it; 2,000 with -short).
func jobs(tb testing.TB) int {
	if s := os.Getenv("LEASEBUS_PGSIDE_JOBS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			tb.Fatalf("LEASEBUS_PGSIDE_JOBS=%q", s)
		}
		return n
	}
	if testing.Short() {
		return 2000
	}
	return 100_000
}

const workers = 8

func perSecond(b *testing.B, n int, elapsed time.Duration) {
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "jobs/s")
}

// BenchmarkInsertBatches inserts the jobs in batches of 1,000: one
// statement each (River: InsertManyFast, a COPY).
func BenchmarkInsertBatches(b *testing.B) {
	ctx := context.Background()
	n := jobs(b)
	for _, impl := range impls(b) {
		b.Run(impl.Name(), func(b *testing.B) {
			var elapsed time.Duration
			for b.Loop() {
				start := time.Now()
				if err := impl.InsertBatches(ctx, n, 1000); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
				b.StopTimer()
				if err := impl.Clear(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			perSecond(b, n, elapsed)
		})
	}
}

// BenchmarkInsertEach inserts a tenth of the jobs one per transaction,
// from 8 goroutines.
func BenchmarkInsertEach(b *testing.B) {
	ctx := context.Background()
	n := jobs(b) / 10
	for _, impl := range impls(b) {
		b.Run(impl.Name(), func(b *testing.B) {
			var elapsed time.Duration
			for b.Loop() {
				start := time.Now()
				if err := impl.InsertEach(ctx, n, workers); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
				b.StopTimer()
				if err := impl.Clear(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			perSecond(b, n, elapsed)
		})
	}
}

// BenchmarkDrain works off the jobs, inserted before the timer starts,
// with 8 workers and a handler that does nothing. River with its defaults
// works at most 80 jobs a second with 8 workers (a fetch every 100ms at
// most), so it drains at most 4,000: its rate is the same, in a minute.
func BenchmarkDrain(b *testing.B) {
	ctx := context.Background()
	for _, impl := range impls(b) {
		n := jobs(b)
		if impl.Name() == "river" {
			n = min(n, 4000)
		}
		b.Run(impl.Name(), func(b *testing.B) {
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				if err := impl.Load(ctx, n); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if err := impl.Drain(ctx, n, workers); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
			}
			perSecond(b, n, elapsed)
		})
		if l, ok := impl.(*leasebusImpl); ok {
			b.Run("leasebus-hand", func(b *testing.B) {
				var elapsed time.Duration
				for b.Loop() {
					b.StopTimer()
					if err := impl.Load(ctx, n); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					start := time.Now()
					if err := l.DrainHand(ctx, n, workers); err != nil {
						b.Fatal(err)
					}
					elapsed += time.Since(start)
				}
				perSecond(b, n, elapsed)
			})
		}
	}
}

// BenchmarkLatency inserts 500 jobs one at a time, one every 20ms (a
// rate every implementation keeps up with), to 8 idle workers, and
// reports the wait from each insert's commit to its handler's start: its
// median and 99th percentile.
func BenchmarkLatency(b *testing.B) {
	ctx := context.Background()
	n := 500
	if testing.Short() {
		n = 50
	}
	for _, impl := range impls(b) {
		b.Run(impl.Name(), func(b *testing.B) {
			var p50, p99 time.Duration
			for b.Loop() {
				ls, err := impl.Latency(ctx, n, workers, 20*time.Millisecond)
				if err != nil {
					b.Fatal(err)
				}
				p50 += ls[len(ls)/2]
				p99 += ls[len(ls)*99/100]
			}
			b.ReportMetric(float64(p50.Microseconds())/float64(b.N), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds())/float64(b.N), "p99-µs")
		})
	}
}
