package pgside

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
