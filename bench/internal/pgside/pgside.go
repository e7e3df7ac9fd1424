// Package pgside runs the same job workloads on PostgreSQL through
// leasebus's engine (pgleasebus), River (riverqueue/river with its pgx v5
// driver) and a hand-written FOR UPDATE SKIP LOCKED loop, the floor: an
// insert of n jobs in batches and one per transaction, a drain of n jobs
// by w workers with a no-op handler, and the latency from an insert's
// commit to its handler's start. Each implementation keeps its tables in
// a schema of its own.
package pgside

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Job is the payload every implementation carries: a number and the
// instant it was inserted, for the latency.
type Job struct {
	N  int   `json:"n"`
	At int64 `json:"at"` // Unix nanoseconds at the insert
}

// Kind is Job's kind for River.
func (Job) Kind() string { return "bench_job" }

// Impl is one implementation of the workloads. Each method starts from
// an empty queue and leaves one.
type Impl interface {
	Name() string
	// InsertBatches inserts n jobs in batches of batch, one statement or
	// transaction each.
	InsertBatches(ctx context.Context, n, batch int) error
	// InsertEach inserts n jobs one per transaction, from conc goroutines.
	InsertEach(ctx context.Context, n, conc int) error
	// Load inserts n jobs the fastest way it has, outside any
	// measurement; Drain then works them off with workers workers and a
	// no-op handler, returning when every one is settled.
	Load(ctx context.Context, n int) error
	Drain(ctx context.Context, n, workers int) error
	// Latency starts workers workers, inserts n jobs one at a time, every
	// gap, and returns each one's wait from its insert to its handler's
	// start.
	Latency(ctx context.Context, n, workers int, gap time.Duration) ([]time.Duration, error)
	// Count returns the jobs left to work (for the tests).
	Count(ctx context.Context) (int, error)
	// Clear deletes every job, worked or not.
	Clear(ctx context.Context) error
	Close() error
}

// Open returns the implementations, each on a fresh schema of pool's
// database (dropped by Close).
func Open(ctx context.Context, pool *pgxpool.Pool, schemaPrefix string) ([]Impl, error) {
	lb, err := openLeasebus(ctx, pool, schemaPrefix+"_leasebus")
	if err != nil {
		return nil, err
	}
	rv, err := openRiver(ctx, pool, schemaPrefix+"_river", false)
	if err != nil {
		lb.Close()
		return nil, err
	}
	rt, err := openRiver(ctx, pool, schemaPrefix+"_rivertuned", true)
	if err != nil {
		lb.Close()
		rv.Close()
		return nil, err
	}
	fl, err := openFloor(ctx, pool, schemaPrefix+"_floor")
	if err != nil {
		lb.Close()
		rv.Close()
		rt.Close()
		return nil, err
	}
	return []Impl{lb, rv, rt, fl}, nil
}

func dropSchema(pool *pgxpool.Pool, schema string) error {
	_, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	return err
}

// chunks calls f with each batch of [0, n), in order.
func chunks(n, batch int, f func(from, to int) error) error {
	for from := 0; from < n; from += batch {
		if err := f(from, min(from+batch, n)); err != nil {
			return err
		}
	}
	return nil
}

// fanIn runs f(i) for i in [0, n) from conc goroutines.
func fanIn(n, conc int, f func(i int) error) error {
	var next atomic.Int64
	errs := make([]error, conc)
	var wg sync.WaitGroup
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// latencies inserts n jobs with insert, every gap, and returns the waits
// started reports (each job's N once).
func latencies(ctx context.Context, n int, gap time.Duration, insert func(Job) error, started <-chan time.Duration) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for i := range n {
		if err := insert(Job{N: i, At: time.Now().UnixNano()}); err != nil {
			return nil, err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for len(out) < n {
		select {
		case d := <-started:
			out = append(out, d)
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d started: %w", len(out), n, ctx.Err())
		}
	}
	slices.Sort(out)
	return out, nil
}
