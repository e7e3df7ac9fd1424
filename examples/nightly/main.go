// Command nightly runs a job every night: a scheduler publishes one
// "roll up yesterday" message a night to a durable queue, and a worker
// pool in the same process does the rollups.
//
//	go run ./examples/nightly                          # 02:00 Europe/Berlin, until Ctrl-C
//	go run ./examples/nightly -cron '*/2 * * * * *'    # every two seconds, to watch it
//	go run ./examples/nightly -state /tmp/nightly      # survives restarts
//	go run ./examples/nightly -now                     # and a rollup at once
//
// Each night is published once, with a dedup ID naming its slot
// (schedule.Fire.DedupID), whatever happens to the process: with -state
// the queue (DIR/queue) and the scheduler's last slot (DIR/schedules.json)
// are kept, so a process killed between publishing a night and saving it
// publishes that night again on restart, and the queue drops it; a process
// that was down over nights rolls up each night it missed when it comes
// back, up to a week of them (schedule.MissedEach). A rollup that fails is
// retried by the pool, and dead-lettered after three attempts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

// rollup is the work of one night: the day to roll up.
type rollup struct {
	Day string // 2006-01-02, in the schedule's zone
}

// config is how the app runs.
type config struct {
	cron  string         // when a night's rollup is published
	loc   *time.Location // the cron's zone
	state string         // directory to keep the queue and the schedule in; "" for memory
	clock clock.Clock    // nil: the real one
	out   io.Writer
	// roll does one rollup; nil prints it.
	roll func(ctx context.Context, r rollup) error
}

// app is the broker, the scheduler and the pool of one process.
type app struct {
	b     *broker.Broker[rollup]
	sub   *broker.Subscription[rollup]
	sched *schedule.Scheduler
	pool  *poller.Poller[rollup]
}

func main() {
	cronExpr := flag.String("cron", "0 2 * * *", "when the rollup runs (cron, 5 or 6 fields)")
	tz := flag.String("tz", "Europe/Berlin", "the cron's time zone")
	state := flag.String("state", "", "keep the queue and the schedule in this directory")
	now := flag.Bool("now", false, "also run a rollup at once")
	flag.Parse()
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nightly:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	a, err := start(config{cron: *cronExpr, loc: loc, state: *state, out: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nightly:", err)
		os.Exit(2)
	}
	if *now {
		if _, err := a.sched.Trigger(ctx, "rollup"); err != nil {
			fmt.Fprintln(os.Stderr, "nightly:", err)
		}
	}
	st := a.sched.Status()[0]
	fmt.Printf("rollup %q in %s; next at %s\n", st.Spec, loc, st.NextFire.In(loc).Format(time.RFC3339))
	if err := a.run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "nightly:", err)
		os.Exit(1)
	}
}

// start opens the queue and sets up the schedule and the pool.
func start(cfg config) (*app, error) {
	if cfg.roll == nil {
		cfg.roll = func(_ context.Context, r rollup) error {
			fmt.Fprintf(cfg.out, "rolled up %s\n", r.Day)
			return nil
		}
	}
	opts := []broker.Option{
		// A night's dedup ID is remembered for two days: longer than any
		// restart that could repeat it.
		broker.WithDedupWindow(48 * time.Hour),
		broker.WithSubscriptionDefaults(broker.WithMaxAttempts(3), broker.WithVisibilityTimeout(10*time.Minute)),
	}
	var sopts []schedule.Option
	if cfg.clock != nil {
		opts = append(opts, broker.WithClock(cfg.clock))
		sopts = append(sopts, schedule.WithClock(cfg.clock))
	}
	var b *broker.Broker[rollup]
	var err error
	if cfg.state == "" {
		b, err = broker.New[rollup](opts...)
	} else {
		if err := os.MkdirAll(cfg.state, 0o755); err != nil {
			return nil, err
		}
		b, err = broker.Open(filepath.Join(cfg.state, "queue"), queue.JSONCodec[rollup](), opts...)
		if err == nil {
			var store *schedule.FileStore
			store, err = schedule.NewFileStore(filepath.Join(cfg.state, "schedules.json"))
			sopts = append(sopts, schedule.WithStore(store))
		}
	}
	if err != nil {
		return nil, err
	}
	a, err := setup(b, cfg, sopts)
	if err != nil {
		b.Close()
		return nil, err
	}
	return a, nil
}

func setup(b *broker.Broker[rollup], cfg config, sopts []schedule.Option) (*app, error) {
	if err := b.CreateTopic("rollups"); err != nil {
		return nil, err
	}
	sub, err := b.Subscribe("rollups", "workers")
	if errors.Is(err, broker.ErrAlreadySubscribed) { // a durable queue, opened again
		sub, err = b.Subscription("rollups", "workers")
	}
	if err != nil {
		return nil, err
	}
	sched, err := schedule.New(sopts...)
	if err != nil {
		return nil, err
	}
	// The night that just ended is the day to roll up.
	job := schedule.Publish(b, "rollups", func(f schedule.Fire) rollup {
		return rollup{Day: f.Slot.In(cfg.loc).AddDate(0, 0, -1).Format(time.DateOnly)}
	})
	err = sched.Add("rollup", schedule.CronIn(cfg.loc, cfg.cron), job,
		schedule.WithMissed(schedule.MissedEach), schedule.WithCatchUpLimit(7))
	if err != nil {
		return nil, err
	}
	pool, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[rollup]) error {
		return cfg.roll(ctx, d.Payload)
	})
	if err != nil {
		return nil, err
	}
	return &app{b: b, sub: sub, sched: sched, pool: pool}, nil
}

// run runs the scheduler and the pool until ctx ends, then closes the
// queue.
func (a *app) run(ctx context.Context) error {
	defer a.b.Close()
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() { serr = a.sched.Run(ctx) })
	perr := a.pool.Run(ctx)
	wg.Wait()
	return errors.Join(serr, perr)
}
