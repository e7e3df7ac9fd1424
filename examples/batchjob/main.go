// Command batchjob embeds a broker in a batch job: it enqueues a file's
// worth of work items, drains them with a worker pool until the queue is
// idle, prints a report, and exits non-zero if anything was dead-lettered.
//
//	go run ./examples/batchjob                      # examples/batchjob/orders.csv
//	go run ./examples/batchjob -input lines.csv -workers 8
//	go run ./examples/batchjob -state /tmp/orders.q # resumable: see below
//
// Each line is "sku,quantity,unit_price_cents"; blank lines and lines
// starting with '#' are skipped. A malformed line is dead-lettered at once
// (no retry will fix it) and reported with its line number.
//
// With -state DIR the queue is kept in DIR (broker.Open) and each line is
// published with a dedup ID: if the job is killed, running it again with
// the same -state publishes nothing twice and processes only what was not
// done (a line being worked on at the kill is done again). Remove DIR to
// start over.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// item is one line of the input.
type item struct {
	Line int
	Text string
}

// report is what a run did.
type report struct {
	Items     int
	Earlier   int // items an earlier run had published already (with -state)
	Processed int
	Total     int64 // sum of quantity × unit price, in cents
	Failed    []queue.DeadLetter[item]
}

// config is how a run goes.
type config struct {
	workers int
	state   string      // directory of a durable queue; "" for memory
	done    func(n int) // called after each processed item with the count so far (tests stop a run with it)
}

func main() {
	input := flag.String("input", "examples/batchjob/orders.csv", "CSV file of order lines")
	workers := flag.Int("workers", 4, "concurrent workers")
	state := flag.String("state", "", "keep the queue in this directory, to resume after a crash")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	f, err := os.Open(*input)
	if err != nil {
		fmt.Fprintln(os.Stderr, "batchjob:", err)
		os.Exit(2)
	}
	defer f.Close()
	r, err := run(ctx, f, config{workers: *workers, state: *state})
	printReport(os.Stdout, r)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "batchjob:", err)
		os.Exit(2)
	case len(r.Failed) > 0:
		os.Exit(1)
	}
}

// run enqueues every item of in and processes them with a pool until the
// queue is idle.
func run(ctx context.Context, in io.Reader, cfg config) (report, error) {
	var r report
	opts := []broker.Option{broker.WithMaxAttempts(3)}
	var b *broker.Broker[item]
	var err error
	if cfg.state == "" {
		b, err = broker.New[item](opts...)
	} else { // every line's dedup ID is remembered for a day, however long the input
		opts = append(opts, broker.WithDedupWindow(24*time.Hour), broker.WithDedupLimit(math.MaxInt))
		b, err = broker.Open(cfg.state, broker.JSONCodec[item]{}, opts...)
	}
	if err != nil {
		return r, err
	}
	defer b.Close()
	start := b.Clock().Now()
	if err := b.CreateTopic("orders"); err != nil {
		return r, err
	}
	sub, err := b.Subscribe("orders", "price")
	if err != nil {
		return r, err
	}

	sc := bufio.NewScanner(in)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var opts []broker.PublishOption
		if cfg.state != "" {
			opts = append(opts, broker.WithDedupID(strconv.Itoa(n)))
		}
		m, err := b.Publish(ctx, "orders", item{Line: n, Text: text}, opts...)
		if err != nil {
			return r, err
		}
		r.Items++
		if m.PublishedAt.Before(start) { // a duplicate: the message of an earlier run
			r.Earlier++
		}
	}
	if err := sc.Err(); err != nil {
		return r, err
	}

	var total atomic.Int64
	var processed atomic.Int64
	handle := func(_ context.Context, d queue.Delivery[item]) error {
		cents, err := price(d.Payload.Text)
		if err != nil {
			return poller.GiveUp(fmt.Errorf("line %d: %w", d.Payload.Line, err))
		}
		total.Add(cents)
		n := processed.Add(1)
		if cfg.done != nil {
			cfg.done(int(n))
		}
		return nil
	}
	// Stop the pool once the subscription holds nothing: every item is
	// acked or dead-lettered.
	poolCtx, stopPool := context.WithCancel(ctx)
	defer stopPool()
	idle := func(poller.Event[item]) {
		if st := sub.Stats(); st.Visible+st.Delayed+st.InFlight+st.HeldBack == 0 {
			stopPool()
		}
	}
	pool, err := poller.New(sub, handle, poller.WithWorkers(cfg.workers), poller.WithObserver(idle))
	if err != nil {
		return r, err
	}
	if st := sub.Stats(); st.Visible+st.Delayed+st.InFlight+st.HeldBack == 0 {
		stopPool() // nothing to do (an empty input, or a finished job run again)
	}
	if err := pool.Run(poolCtx); err != nil {
		return r, err
	}
	r.Processed, r.Total = int(processed.Load()), total.Load()
	r.Failed = b.DeadLetters()
	return r, ctx.Err()
}

var errMalformed = errors.New("malformed line")

// price parses "sku,quantity,unit_price_cents" and returns the line total.
func price(line string) (int64, error) {
	f := strings.Split(line, ",")
	if len(f) != 3 || f[0] == "" {
		return 0, fmt.Errorf("%w: want sku,quantity,unit_price_cents, got %q", errMalformed, line)
	}
	qty, err1 := strconv.ParseInt(f[1], 10, 64)
	unit, err2 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil || qty < 1 || unit < 0 {
		return 0, fmt.Errorf("%w: %q", errMalformed, line)
	}
	return qty * unit, nil
}

func printReport(w io.Writer, r report) {
	fmt.Fprintf(w, "items %d, processed %d, dead-lettered %d, total $%d.%02d\n",
		r.Items, r.Processed, len(r.Failed), r.Total/100, r.Total%100)
	if r.Earlier > 0 {
		fmt.Fprintf(w, "  resumed: %d items were published by an earlier run (processed and total count this run)\n", r.Earlier)
	}
	for _, dl := range r.Failed {
		fmt.Fprintf(w, "  failed: %s\n", dl.LastError)
	}
}
