// Command batchjob embeds a broker in a batch job: it enqueues a file's
// worth of work items, drains them with a worker pool until the queue is
// idle, prints a report, and exits non-zero if anything was dead-lettered.
//
//	go run ./examples/batchjob                      # examples/batchjob/orders.csv
//	go run ./examples/batchjob -input lines.csv -workers 8
//
// Each line is "sku,quantity,unit_price_cents"; blank lines and lines
// starting with '#' are skipped. A malformed line is dead-lettered at once
// (no retry will fix it) and reported with its line number.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"

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
	Processed int
	Total     int64 // sum of quantity × unit price, in cents
	Failed    []queue.DeadLetter[item]
}

func main() {
	input := flag.String("input", "examples/batchjob/orders.csv", "CSV file of order lines")
	workers := flag.Int("workers", 4, "concurrent workers")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	f, err := os.Open(*input)
	if err != nil {
		fmt.Fprintln(os.Stderr, "batchjob:", err)
		os.Exit(2)
	}
	defer f.Close()
	r, err := run(ctx, f, *workers)
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
func run(ctx context.Context, in io.Reader, workers int) (report, error) {
	var r report
	b, err := broker.New[item](broker.WithMaxAttempts(3))
	if err != nil {
		return r, err
	}
	defer b.Close()
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
		if _, err := b.Publish(ctx, "orders", item{Line: n, Text: text}); err != nil {
			return r, err
		}
		r.Items++
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
		processed.Add(1)
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
	pool, err := poller.New(sub, handle, poller.WithWorkers(workers), poller.WithObserver(idle))
	if err != nil {
		return r, err
	}
	if r.Items == 0 {
		stopPool()
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
	for _, dl := range r.Failed {
		fmt.Fprintf(w, "  failed: %s\n", dl.LastError)
	}
}
