// Command workerpool is leasebus's main example: a webhook delivery service
// embedded in one process. It shows fan-out (an audit subscription sees
// every webhook), priorities (payment webhooks first), a flaky endpoint
// retried with backoff, a poison webhook dead-lettered and then redriven
// once "fixed", slow deliveries keeping their leases past the visibility
// timeout, and graceful shutdown on Ctrl-C. It prints a live
// progress line and a summary, and finishes by itself in a few seconds.
//
//	go run ./examples/workerpool
//	go run ./examples/workerpool -webhooks 2000 -workers 16
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/internal/httpserve"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// webhook is one HTTP callback to deliver.
type webhook struct {
	N     int
	URL   string
	Event string
}

// config sizes a run.
type config struct {
	Webhooks   int           // how many to publish
	Workers    int           // concurrent deliveries
	Visibility time.Duration // lease per delivery
	Work       time.Duration // time one delivery takes
	Slow       time.Duration // time a slow delivery takes (> Visibility)
	FlakyPct   int           // % of webhooks whose first attempt fails
	Console    string        // serve the console here while it runs, and after until Ctrl-C ("": none)
}

// summary is what a run did.
type summary struct {
	Published, Delivered, Retried, DeadLettered, Redriven, Audited int
	Slow                                                           int // deliveries that outlived the visibility timeout, their leases held by the pool
	Lost                                                           int // settles the broker refused: a lease lapsed under its handler
	Elapsed                                                        time.Duration
}

func main() {
	cfg := config{Visibility: 400 * time.Millisecond, Work: 5 * time.Millisecond, Slow: time.Second, FlakyPct: 10}
	flag.IntVar(&cfg.Webhooks, "webhooks", 400, "webhooks to deliver")
	flag.IntVar(&cfg.Workers, "workers", 8, "concurrent deliveries")
	flag.StringVar(&cfg.Console, "console", "", "serve leasebus's console on this address (such as 127.0.0.1:8080) while it runs, and after until Ctrl-C")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	s, err := run(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workerpool:", err)
		os.Exit(1)
	}
	printSummary(os.Stdout, s)
}

// endpoint stands in for the remote servers: a few are flaky on the first
// attempt, one is broken until it is fixed, and some are slow.
type endpoint struct {
	cfg   config
	fixed atomic.Bool  // the poison webhook's endpoint has been repaired
	slow  atomic.Int64 // slow deliveries that completed
}

var errBadGateway = errors.New("502 Bad Gateway")

func (e *endpoint) deliver(ctx context.Context, d queue.Delivery[webhook]) error {
	w := d.Payload
	if w.URL == "https://partner.invalid/hook" && !e.fixed.Load() {
		// No retry will fix a bad URL: dead-letter it at once.
		return poller.GiveUp(fmt.Errorf("webhook %d: no such host %q", w.N, w.URL))
	}
	if d.Attempt == 1 && hash(w.N)%100 < uint32(e.cfg.FlakyPct) {
		return fmt.Errorf("webhook %d: %w", w.N, errBadGateway) // retried after backoff
	}
	work := e.cfg.Work
	if w.N%100 == 50 {
		work = e.cfg.Slow // longer than the visibility timeout: the pool holds the lease
	}
	select {
	case <-time.After(work):
		if work == e.cfg.Slow {
			e.slow.Add(1)
		}
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func hash(n int) uint32 {
	h := fnv.New32a()
	fmt.Fprint(h, n)
	return h.Sum32()
}

// run publishes cfg.Webhooks webhooks and delivers them with a pool until
// every one is delivered (the poison one after its redrive), or ctx ends.
func run(ctx context.Context, cfg config, progress io.Writer) (summary, error) {
	start := time.Now()
	b, deliver, audit, err := setUp(cfg)
	if err != nil {
		return summary{}, err
	}
	defer b.Close()
	if cfg.Console != "" {
		stopConsole, err := serveConsole(cfg.Console, b, progress)
		if err != nil {
			return summary{}, err
		}
		defer stopConsole()
	}

	var s summary
	if s.Published, err = publishAll(ctx, b, cfg.Webhooks); err != nil {
		return s, err
	}

	ep := &endpoint{cfg: cfg}
	c := &counts{settled: make(chan struct{}, 1)}
	pool, err := poller.New(deliver, ep.deliver,
		poller.WithWorkers(cfg.Workers),
		poller.WithBatch(cfg.Workers),
		poller.WithObserver(c.observe),
		poller.WithDrainTimeout(5*time.Second),
	)
	if err != nil {
		return s, err
	}
	poolCtx, stopPool := context.WithCancel(ctx)
	defer stopPool()
	done := make(chan error, 1)
	go func() { done <- pool.Run(poolCtx) }()

	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	report, end := reporter(progress, cfg.Webhooks, c, pool)
	redriven := false
wait:
	for {
		select {
		case <-c.settled:
		case <-tick.C:
			report()
		case <-ctx.Done(): // Ctrl-C: fall through to the drain
			break wait
		}
		if !redriven && c.delivered.Load()+c.dead.Load() == int64(cfg.Webhooks) {
			// Every webhook was delivered or gave up: fix the endpoint and
			// redrive the dead letters.
			ep.fixed.Store(true)
			n, err := b.Redrive(func(dl queue.DeadLetter[webhook]) bool { return dl.Subscription == "deliver" })
			if err != nil {
				return s, err
			}
			s.Redriven, redriven = n, true
		}
		if redriven && c.delivered.Load() == int64(cfg.Webhooks) {
			break
		}
	}
	stopPool() // graceful: running deliveries finish, unstarted leases are released
	if err := <-done; err != nil {
		return s, err
	}
	end()

	s.Audited = audit.Stats().Visible
	s.Delivered, s.Retried = int(c.delivered.Load()), int(c.retried.Load())
	s.DeadLettered, s.Lost, s.Slow = int(c.dead.Load()), int(c.lost.Load()), int(ep.slow.Load())
	s.Elapsed = time.Since(start)
	if cfg.Console != "" && ctx.Err() == nil {
		fmt.Fprintln(progress, "done: the console stays up until Ctrl-C")
		<-ctx.Done()
		return s, nil
	}
	return s, ctx.Err()
}

// serveConsole serves the console over b on addr until the returned stop
// is called.
func serveConsole(addr string, b *broker.Broker[webhook], progress io.Writer) (stop func(), err error) {
	c, err := console.New(b, console.WithTitle("webhooks · leasebus"))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := httpserve.New(c)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln) // ErrServerClosed, once stop closes it
	}()
	ctx, stopRecord := context.WithCancel(context.Background())
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		_ = c.Record(ctx) // the history, until stop
	}()
	fmt.Fprintf(progress, "console: http://%s/\n", ln.Addr())
	return func() {
		_ = srv.Close()
		<-served
		stopRecord()
		<-recorded
	}, nil
}

// setUp makes the broker, its webhooks topic and two subscriptions: the
// pool's, and an audit one that sees every webhook too (fan-out).
func setUp(cfg config) (b *broker.Broker[webhook], deliver, audit *broker.Subscription[webhook], err error) {
	b, err = broker.New[webhook](
		broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(cfg.Visibility), broker.WithMaxAttempts(5), broker.WithRetry(queue.RetryPolicy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: 0.2})),
	)
	if err != nil {
		return nil, nil, nil, err
	}
	if err = b.CreateTopic("webhooks"); err == nil {
		deliver, err = b.Subscribe("webhooks", "deliver")
	}
	if err == nil {
		audit, err = b.Subscribe("webhooks", "audit")
	}
	if err != nil {
		b.Close()
		return nil, nil, nil, err
	}
	return b, deliver, audit, nil
}

// publishAll publishes n webhooks: every tenth a high-priority payment,
// and the middle one to an endpoint that always fails (the poison one).
func publishAll(ctx context.Context, b *broker.Broker[webhook], n int) (int, error) {
	for i := range n {
		w := webhook{N: i, URL: fmt.Sprintf("https://customer-%d.example/hook", i%37), Event: "order.updated"}
		prio := queue.PriorityNormal
		if i%10 == 0 {
			w.Event, prio = "payment.succeeded", queue.PriorityHigh
		}
		if i == n/2 {
			w.URL = "https://partner.invalid/hook"
		}
		if _, err := b.Publish(ctx, "webhooks", w, broker.WithPriority(prio)); err != nil {
			return i, err
		}
	}
	return n, nil
}

// counts are the pool's outcomes so far, as its observer sees them.
type counts struct {
	delivered, retried, dead, lost atomic.Int64
	settled                        chan struct{} // a signal after each outcome
}

func (c *counts) observe(ev poller.Event[webhook]) {
	switch {
	case ev.Outcome == poller.OutcomeSettleFailed && ev.Err == nil:
		c.lost.Add(1) // the broker refused the ack: the message comes back
	case ev.Outcome == poller.OutcomeAcked:
		c.delivered.Add(1)
	case ev.Outcome == poller.OutcomeRetried:
		c.retried.Add(1)
	case ev.Outcome == poller.OutcomeDeadLettered:
		c.dead.Add(1)
	}
	select {
	case c.settled <- struct{}{}:
	default:
	}
}

// reporter returns report, which writes the progress, and end, which
// writes it a last time. On a terminal one line is redrawn in place; into
// a pipe or a file, each report is a line of its own.
func reporter(progress io.Writer, total int, c *counts, pool *poller.Poller[webhook]) (report, end func()) {
	redraw := isTerminal(progress)
	report = func() {
		line := fmt.Sprintf("delivered %4d/%d  retried %3d  dead-lettered %d  in flight %2d",
			c.delivered.Load(), total, c.retried.Load(), c.dead.Load(), pool.Stats().InFlight)
		if redraw {
			fmt.Fprintf(progress, "\r%s ", line)
		} else {
			fmt.Fprintln(progress, line)
		}
	}
	end = func() {
		report()
		if redraw {
			fmt.Fprintln(progress)
		}
	}
	return report, end
}

func printSummary(w io.Writer, s summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "published\tdelivered\tretried\tdead-lettered\tredriven\tslow\tlost leases\taudited\tthroughput\t")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f/s\t\n", s.Published, s.Delivered, s.Retried, s.DeadLettered,
		s.Redriven, s.Slow, s.Lost, s.Audited, float64(s.Delivered)/s.Elapsed.Seconds())
	tw.Flush()
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
