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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
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

// leasebusImpl is pgleasebus with its worker pool.
type leasebusImpl struct {
	pool   *pgxpool.Pool
	schema string
	bus    *pgleasebus.Bus
	sub    *pgleasebus.Subscription[Job]
	pub    *pgleasebus.Publisher[Job]
}

func openLeasebus(ctx context.Context, pool *pgxpool.Pool, schema string) (*leasebusImpl, error) {
	if err := dropSchema(pool, schema); err != nil {
		return nil, err
	}
	bus, err := pgleasebus.Open(ctx, pool, pgleasebus.WithSchema(schema))
	if err != nil {
		return nil, err
	}
	l := &leasebusImpl{pool: pool, schema: schema, bus: bus}
	if err := bus.CreateTopic(ctx, "jobs"); err != nil {
		l.Close()
		return nil, err
	}
	if l.sub, err = pgleasebus.Subscribe(ctx, bus, "jobs", "workers", queue.JSONCodec[Job]()); err != nil {
		l.Close()
		return nil, err
	}
	if l.pub, err = pgleasebus.NewPublisher(bus, queue.JSONCodec[Job]()); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *leasebusImpl) Name() string { return "leasebus" }

func (l *leasebusImpl) InsertBatches(ctx context.Context, n, batch int) error {
	jobs := make([]Job, batch)
	return chunks(n, batch, func(from, to int) error {
		for i := from; i < to; i++ {
			jobs[i-from] = Job{N: i}
		}
		_, err := l.pub.PublishBatch(ctx, "jobs", jobs[:to-from])
		return err
	})
}

func (l *leasebusImpl) InsertEach(ctx context.Context, n, conc int) error {
	return fanIn(n, conc, func(i int) error {
		return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			_, err := l.pub.PublishTx(ctx, tx, "jobs", Job{N: i})
			return err
		})
	})
}

func (l *leasebusImpl) Load(ctx context.Context, n int) error { return l.InsertBatches(ctx, n, 1000) }

// run runs a pool of workers with h until done is closed.
func (l *leasebusImpl) run(ctx context.Context, workers int, h poller.Handler[Job], done <-chan struct{}) error {
	p, err := poller.New(l.sub, h, poller.WithWorkers(workers), poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	stop()
	if err := <-ran; err != nil {
		return err
	}
	return ctx.Err()
}

func (l *leasebusImpl) Drain(ctx context.Context, n, workers int) error {
	var left atomic.Int64
	left.Store(int64(n))
	done := make(chan struct{})
	h := func(context.Context, queue.Delivery[Job]) error { return nil }
	p, err := poller.New(l.sub, h, poller.WithWorkers(workers), poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		poller.WithObserver(func(ev poller.Event[Job]) {
			if ev.Outcome == poller.OutcomeAcked && left.Add(-1) == 0 {
				close(done)
			}
		}))
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	stop()
	if err := <-ran; err != nil {
		return err
	}
	return ctx.Err()
}

// DrainHand works off n jobs with a hand-written loop in place of the
// pool: workers goroutines, each leasing up to floorBatch (TryPoll, or a
// Poll when there is nothing) and acking what it leased in one AckBatch,
// as the floor does. It is what the engine's calls cost without the
// pool.
func (l *leasebusImpl) DrainHand(ctx context.Context, n, workers int) error {
	var left atomic.Int64
	left.Store(int64(n))
	return fanIn(workers, workers, func(int) error {
		ids := make([]lease.ID, 0, floorBatch)
		for left.Load() > 0 {
			ds := l.sub.TryPoll(floorBatch)
			ids = ids[:0]
			for _, d := range ds {
				ids = append(ids, d.LeaseID)
			}
			if len(ids) == 0 {
				continue // the others hold the rest: it is theirs to ack
			}
			if err := l.sub.AckBatch(ids); err != nil {
				return err
			}
			left.Add(-int64(len(ids)))
		}
		return ctx.Err()
	})
}

func (l *leasebusImpl) Latency(ctx context.Context, n, workers int, gap time.Duration) ([]time.Duration, error) {
	started := make(chan time.Duration, n)
	h := func(_ context.Context, d queue.Delivery[Job]) error {
		started <- time.Duration(time.Now().UnixNano() - d.Payload.At)
		return nil
	}
	done := make(chan struct{})
	ran := make(chan error, 1)
	go func() { ran <- l.run(ctx, workers, h, done) }()
	out, err := latencies(ctx, n, gap, func(j Job) error { _, err := l.pub.Publish(ctx, "jobs", j); return err }, started)
	close(done)
	return out, errors.Join(err, <-ran)
}

func (l *leasebusImpl) Count(ctx context.Context) (int, error) {
	st, err := l.sub.Stats(ctx)
	return st.Visible + st.Delayed + st.InFlight + st.HeldBack, err
}

func (l *leasebusImpl) Clear(ctx context.Context) error {
	_, err := l.sub.Purge(ctx)
	return err
}

func (l *leasebusImpl) Close() error {
	if l.sub != nil {
		l.sub.Close()
	}
	l.bus.Close()
	return dropSchema(l.pool, l.schema)
}

// riverImpl is River: an insert-only client for the inserts, and a
// client with MaxWorkers workers, its defaults otherwise, for the work.
// Tuned, its fetches are as frequent as River allows (FetchCooldown and
// FetchPollInterval at their minimum, 1ms): by default a client fetches
// at most every 100ms, so 8 workers work at most 80 jobs a second.
type riverImpl struct {
	pool   *pgxpool.Pool
	schema string
	tuned  bool
	insert *river.Client[pgx.Tx]
	quiet  *slog.Logger
}

func openRiver(ctx context.Context, pool *pgxpool.Pool, schema string, tuned bool) (*riverImpl, error) {
	if err := dropSchema(pool, schema); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quiet})
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: quiet})
	if err != nil {
		return nil, err
	}
	return &riverImpl{pool: pool, schema: schema, tuned: tuned, insert: client, quiet: quiet}, nil
}

func (r *riverImpl) Name() string {
	if r.tuned {
		return "river-tuned"
	}
	return "river"
}

func (r *riverImpl) InsertBatches(ctx context.Context, n, batch int) error {
	params := make([]river.InsertManyParams, batch)
	return chunks(n, batch, func(from, to int) error {
		for i := from; i < to; i++ {
			params[i-from] = river.InsertManyParams{Args: Job{N: i}}
		}
		_, err := r.insert.InsertManyFast(ctx, params[:to-from])
		return err
	})
}

func (r *riverImpl) InsertEach(ctx context.Context, n, conc int) error {
	return fanIn(n, conc, func(i int) error {
		return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			_, err := r.insert.InsertTx(ctx, tx, Job{N: i}, nil)
			return err
		})
	})
}

func (r *riverImpl) Load(ctx context.Context, n int) error { return r.InsertBatches(ctx, n, 1000) }

// work starts a client of workers workers on h, and returns it and a
// channel of its completed jobs.
func (r *riverImpl) work(ctx context.Context, workers, events int, h func(context.Context, *river.Job[Job]) error) (*river.Client[pgx.Tx], <-chan *river.Event, func(), error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(h))
	cfg := &river.Config{
		Schema: r.schema, Logger: r.quiet, Workers: ws,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
	}
	if r.tuned {
		cfg.FetchCooldown, cfg.FetchPollInterval = river.FetchCooldownMin, river.FetchPollIntervalMin
	}
	client, err := river.NewClient(riverpgxv5.New(r.pool), cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	completed, cancel := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: events + 16})
	if err := client.Start(ctx); err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return client, completed, cancel, nil
}

func (r *riverImpl) Drain(ctx context.Context, n, workers int) error {
	client, completed, cancel, err := r.work(ctx, workers, n, func(context.Context, *river.Job[Job]) error { return nil })
	if err != nil {
		return err
	}
	defer cancel()
	for range n {
		select {
		case <-completed:
		case <-ctx.Done():
			client.Stop(context.Background())
			return ctx.Err()
		}
	}
	return errors.Join(client.Stop(ctx), r.clear(ctx))
}

// clear deletes the completed jobs River keeps (for a day, by default),
// so that the next workload starts from an empty table as the others do.
func (r *riverImpl) clear(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, "DELETE FROM "+r.schema+".river_job")
	return err
}

func (r *riverImpl) Latency(ctx context.Context, n, workers int, gap time.Duration) ([]time.Duration, error) {
	started := make(chan time.Duration, n)
	client, _, cancel, err := r.work(ctx, workers, 0, func(_ context.Context, j *river.Job[Job]) error {
		started <- time.Duration(time.Now().UnixNano() - j.Args.At)
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer cancel()
	out, err := latencies(ctx, n, gap, func(j Job) error { _, err := client.Insert(ctx, j, nil); return err }, started)
	return out, errors.Join(err, client.Stop(ctx), r.clear(ctx))
}

func (r *riverImpl) Count(ctx context.Context) (int, error) {
	var n int
	err := r.pool.QueryRow(ctx, "SELECT count(*) FROM "+r.schema+".river_job WHERE state <> 'completed'").Scan(&n)
	return n, err
}

func (r *riverImpl) Clear(ctx context.Context) error { return r.clear(ctx) }

func (r *riverImpl) Close() error { return dropSchema(r.pool, r.schema) }

// floorBatch is how many jobs one lease of the floor takes, and its
// DELETE settles.
const floorBatch = 10

// floorImpl is the floor: one table, a lease taken by UPDATE ... FOR
// UPDATE SKIP LOCKED of a batch, and a DELETE of the batch once its
// handlers returned; no attempts limit, dead letters, keys or wake-up
// across processes. Its workers share one fetch loop per worker, woken in
// the process by a channel at each insert.
type floorImpl struct {
	pool   *pgxpool.Pool
	schema string
	wake   chan struct{}
}

func openFloor(ctx context.Context, pool *pgxpool.Pool, schema string) (*floorImpl, error) {
	if err := dropSchema(pool, schema); err != nil {
		return nil, err
	}
	for _, q := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE TABLE " + schema + ".jobs (id bigserial PRIMARY KEY, leased_until bigint NOT NULL DEFAULT 0, payload jsonb NOT NULL)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return nil, err
		}
	}
	return &floorImpl{pool: pool, schema: schema, wake: make(chan struct{}, 1)}, nil
}

func (f *floorImpl) Name() string { return "floor" }

func (f *floorImpl) insertSQL() string {
	return "INSERT INTO " + f.schema + ".jobs (payload) SELECT unnest($1::jsonb[])"
}

func encode(jobs []Job) ([][]byte, error) {
	out := make([][]byte, len(jobs))
	for i, j := range jobs {
		b, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (f *floorImpl) InsertBatches(ctx context.Context, n, batch int) error {
	jobs := make([]Job, batch)
	return chunks(n, batch, func(from, to int) error {
		for i := from; i < to; i++ {
			jobs[i-from] = Job{N: i}
		}
		payloads, err := encode(jobs[:to-from])
		if err != nil {
			return err
		}
		_, err = f.pool.Exec(ctx, f.insertSQL(), payloads)
		return err
	})
}

func (f *floorImpl) insertOne(ctx context.Context, tx pgx.Tx, j Job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+f.schema+".jobs (payload) VALUES ($1)", b)
	return err
}

func (f *floorImpl) InsertEach(ctx context.Context, n, conc int) error {
	return fanIn(n, conc, func(i int) error {
		return pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return f.insertOne(ctx, tx, Job{N: i}) })
	})
}

func (f *floorImpl) Load(ctx context.Context, n int) error { return f.InsertBatches(ctx, n, 1000) }

// work runs workers loops, each leasing up to batch jobs, handling each
// and deleting the batch (then telling settled how many), until ctx ends.
func (f *floorImpl) work(ctx context.Context, workers, batch int, handle func(Job), settled func(int)) error {
	lease := "UPDATE " + f.schema + ".jobs SET leased_until = $1 WHERE id IN (SELECT id FROM " + f.schema +
		".jobs WHERE leased_until < $2 ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED) RETURNING id, payload"
	del := "DELETE FROM " + f.schema + ".jobs WHERE id = ANY($1)"
	return fanIn(workers, workers, func(int) error {
		ids := make([]int64, 0, batch)
		for ctx.Err() == nil {
			now := time.Now()
			rows, err := f.pool.Query(ctx, lease, now.Add(time.Minute).UnixNano(), now.UnixNano(), batch)
			if err != nil {
				return ignoreDone(ctx, err)
			}
			ids = ids[:0]
			var jobs []Job
			for rows.Next() {
				var id int64
				var j Job
				if err := rows.Scan(&id, &j); err != nil {
					rows.Close()
					return err
				}
				ids, jobs = append(ids, id), append(jobs, j)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return ignoreDone(ctx, err)
			}
			if len(ids) == 0 {
				select {
				case <-f.wake:
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
				continue
			}
			for _, j := range jobs {
				handle(j)
			}
			if _, err := f.pool.Exec(context.WithoutCancel(ctx), del, ids); err != nil {
				return err
			}
			settled(len(ids))
		}
		return nil
	})
}

func ignoreDone(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (f *floorImpl) Drain(ctx context.Context, n, workers int) error {
	var left atomic.Int64
	left.Store(int64(n))
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	err := f.work(workCtx, workers, floorBatch, func(Job) {}, func(n int) {
		if left.Add(-int64(n)) == 0 {
			stop()
		}
	})
	if left.Load() > 0 {
		return errors.Join(err, fmt.Errorf("floor: %d left", left.Load()))
	}
	return err
}

func (f *floorImpl) Latency(ctx context.Context, n, workers int, gap time.Duration) ([]time.Duration, error) {
	started := make(chan time.Duration, n)
	workCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- f.work(workCtx, workers, 1, func(j Job) { started <- time.Duration(time.Now().UnixNano() - j.At) }, func(int) {})
	}()
	out, err := latencies(ctx, n, gap, func(j Job) error {
		err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return f.insertOne(ctx, tx, j) })
		for range workers { // wake every idle worker, as a NOTIFY would
			select {
			case f.wake <- struct{}{}:
			default:
			}
		}
		return err
	}, started)
	stop()
	return out, errors.Join(err, <-ran)
}

func (f *floorImpl) Count(ctx context.Context) (int, error) {
	var n int
	err := f.pool.QueryRow(ctx, "SELECT count(*) FROM "+f.schema+".jobs").Scan(&n)
	return n, err
}

func (f *floorImpl) Clear(ctx context.Context) error {
	_, err := f.pool.Exec(ctx, "DELETE FROM "+f.schema+".jobs")
	return err
}

func (f *floorImpl) Close() error { return dropSchema(f.pool, f.schema) }
