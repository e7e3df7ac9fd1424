package pgside

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

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
