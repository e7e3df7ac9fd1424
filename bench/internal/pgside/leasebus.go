package pgside

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

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
