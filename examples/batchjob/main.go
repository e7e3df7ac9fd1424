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
// enqueued with a dedup ID (its line number), in batches
// (broker.WithDedupIDs): if the job is killed, running it again with the
// same -state enqueues nothing twice and processes only what was not done
// (a line being worked on at the kill is done again). The IDs are kept for
// -horizon (default 30 days): the job's own horizon, past which a rerun
// starts over; an input over -max-items lines fails loudly rather than
// enqueue anything twice. Remove DIR to start over.
//
// The pool runs until the queue is idle (poller.RunUntilIdle): every item
// acked or dead-lettered, nothing delayed or in flight.
//
// A job with -state that failed on a line can always finish:
//
//   - fix the line in the input and run again: a line that was dead-lettered
//     and reads differently now is put back with its corrected text
//     (Broker.RedriveWith; publishing it again would be dropped, since its
//     dedup ID names the first publish);
//   - or run again with -discard-failed: every dead letter is printed with
//     its error, then discarded (Broker.DiscardDeadLetters), and the job
//     exits 0.
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
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"

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
	Corrected int   // dead-lettered lines put back because the input changed (with -state)
	Failed    []queue.DeadLetter[item]
	Discarded []queue.DeadLetter[item] // with -discard-failed: what failed, settled for good
}

// config is how a run goes.
type config struct {
	workers  int
	state    string        // directory of a durable queue; "" for memory
	horizon  time.Duration // how long a durable queue remembers what it enqueued
	maxItems int           // the most items a run may hold (queue and dedup IDs)
	discard  bool          // discard what failed, after printing why
	sync     broker.SyncMode
	clock    clock.Clock // nil: the real one
	// Hooks for tests: after each enqueued batch (with the count so far),
	// after each item is processed (with the count so far), and after each
	// ack that returned nil.
	enqueued func(n int)
	done     func(it item, n int)
	acked    func(it item)
}

// defaults fills in what a test's config leaves zero.
func (c config) defaults() config {
	if c.horizon == 0 {
		c.horizon = 30 * 24 * time.Hour
	}
	if c.maxItems == 0 {
		c.maxItems = 1_000_000
	}
	return c
}

// enqueueBatch is how many lines go in one PublishBatch.
const enqueueBatch = 1000

func main() {
	input := flag.String("input", "examples/batchjob/orders.csv", "CSV file of order lines")
	workers := flag.Int("workers", 4, "concurrent workers")
	state := flag.String("state", "", "keep the queue in this directory, to resume after a crash")
	horizon := flag.Duration("horizon", 30*24*time.Hour, "with -state: how long a rerun recognises lines enqueued before")
	maxItems := flag.Int("max-items", 1_000_000, "the most lines a run may hold")
	discard := flag.Bool("discard-failed", false, "discard the lines that failed (after printing why), so the job finishes")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	f, err := os.Open(*input)
	if err != nil {
		fmt.Fprintln(os.Stderr, "batchjob:", err)
		os.Exit(2)
	}
	defer f.Close()
	r, err := run(ctx, f, config{workers: *workers, state: *state, horizon: *horizon, maxItems: *maxItems, discard: *discard})
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
	cfg = cfg.defaults()
	var r report
	opts := []broker.Option{broker.WithSubscriptionDefaults(broker.WithMaxAttempts(3), broker.WithMaxQueue(cfg.maxItems))}
	if cfg.clock != nil {
		opts = append(opts, broker.WithClock(cfg.clock))
	}
	var b *broker.Broker[item]
	var err error
	if cfg.state == "" {
		b, err = broker.New[item](opts...)
	} else { // every line's dedup ID is remembered for the job's horizon
		opts = append(opts, broker.WithDedupWindow(cfg.horizon), broker.WithDedupLimit(cfg.maxItems), broker.WithSync(cfg.sync))
		b, err = broker.Open(cfg.state, queue.JSONCodec[item](), opts...)
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
	// The lines an earlier run dead-lettered: if the input now reads
	// differently there, the line was fixed.
	failed := map[int]string{}
	for _, dl := range b.DeadLetters() {
		failed[dl.Message.Payload.Line] = dl.Message.Payload.Text
	}
	fixed := map[int]string{}
	if err := enqueue(ctx, b, in, cfg.state != "", start, &r, cfg.enqueued, func(it item) {
		if was, ok := failed[it.Line]; ok && was != it.Text {
			fixed[it.Line] = it.Text
		}
	}); err != nil {
		return r, err
	}
	if len(fixed) > 0 {
		n, err := b.RedriveWith(func(dl queue.DeadLetter[item]) (item, bool) {
			text, ok := fixed[dl.Message.Payload.Line]
			return item{Line: dl.Message.Payload.Line, Text: text}, ok
		})
		r.Corrected = n
		if err != nil {
			return r, err
		}
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
			cfg.done(d.Payload, int(n))
		}
		return nil
	}
	popts := []poller.Option{poller.WithWorkers(cfg.workers)}
	if cfg.acked != nil {
		popts = append(popts, poller.WithObserver(func(ev poller.Event[item]) {
			if ev.Outcome == poller.OutcomeAcked {
				cfg.acked(ev.Delivery.Payload)
			}
		}))
	}
	pool, err := poller.New(sub, handle, popts...)
	if err != nil {
		return r, err
	}
	// Every item acked or dead-lettered, nothing delayed or in flight: done.
	// (Or ctx ended: the pool drained, and the report says how far it got.)
	err = pool.RunUntilIdle(ctx)
	r.Processed, r.Total = int(processed.Load()), total.Load()
	r.Failed = b.DeadLetters()
	if err == nil && cfg.discard && len(r.Failed) > 0 {
		// The report records why each was given up; then they are settled.
		chosen := map[uuid.UUID]bool{}
		for _, dl := range r.Failed {
			chosen[dl.Message.ID] = true
		}
		if _, err := b.DiscardDeadLetters(func(dl queue.DeadLetter[item]) bool { return chosen[dl.Message.ID] }); err != nil {
			return r, err
		}
		r.Discarded, r.Failed = r.Failed, nil
	}
	return r, err
}

// enqueue publishes every item of in, in batches; with dedup, each under
// its line number as dedup ID, counting in r.Earlier those an earlier run
// had enqueued. read sees each item as it is read.
func enqueue(ctx context.Context, b *broker.Broker[item], in io.Reader, dedup bool, start time.Time, r *report, enqueued func(int), read func(item)) error {
	var items []item
	var ids []string
	flush := func() error {
		var opts []broker.PublishOption
		if dedup {
			opts = append(opts, broker.WithDedupIDs(ids))
		}
		ms, err := b.PublishBatch(ctx, "orders", items, opts...)
		if err != nil {
			return err
		}
		r.Items += len(ms)
		for _, m := range ms {
			if m.PublishedAt.Before(start) { // a duplicate: the message of an earlier run
				r.Earlier++
			}
		}
		items, ids = items[:0], ids[:0]
		if enqueued != nil {
			enqueued(r.Items)
		}
		return nil
	}
	sc := bufio.NewScanner(in)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		items = append(items, item{Line: n, Text: text})
		read(items[len(items)-1])
		ids = append(ids, strconv.Itoa(n))
		if len(items) == enqueueBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(items) > 0 {
		return flush()
	}
	return nil
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
	if r.Corrected > 0 {
		fmt.Fprintf(w, "  corrected: %d lines that failed before were fixed in the input and put back\n", r.Corrected)
	}
	for _, dl := range r.Failed {
		fmt.Fprintf(w, "  failed: %s\n", dl.LastError)
	}
	if len(r.Failed) > 0 {
		fmt.Fprintln(w, "  to finish: fix these lines and run again, or run again with -discard-failed")
	}
	for _, dl := range r.Discarded {
		fmt.Fprintf(w, "  discarded: %s\n", dl.LastError)
	}
}
