// Command console serves leasebus's console over a broker it fills with a
// small shop: topic "orders" fanned out to subscriptions "billing" and
// "shipping" (and "audit", by the wildcard "*", on every one-word topic). A worker pool
// charges cards on billing; two orders die there, one whose card is
// declined and one whose card has expired. Shipping has a stuck packer
// holding two leases, orders waiting behind them by customer, and orders
// scheduled for later. A new order arrives every few seconds. A schedule
// publishes the daily sales report at 06:00 UTC (its page has Fire now).
// The label printer's pool is stuck on its first label (the Workers page
// shows it, and can cancel it), and the console records each
// subscription's history.
//
//	go run ./examples/console -addr 127.0.0.1:8080
//
// Then open the address it prints: find why an order died, fix its card
// number in the payload, redrive it, and watch billing ack it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/internal/httpserve"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

// order is what the shop publishes.
type order struct {
	Order    int     `json:"order"`
	Customer string  `json:"customer"`
	Card     string  `json:"card"`
	Amount   float64 `json:"amount"`
}

// The cards the payment provider refuses.
const (
	declinedCard = "4000-0000-0000-0002"
	expiredCard  = "4000-0000-0000-0069"
	goodCard     = "4242-4242-4242-4242"
)

var errDeclined = errors.New("card declined")

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve the console on (port 0: any free port)")
	every := flag.Duration("every", 3*time.Second, "how often a new order arrives (0: never)")
	readOnly := flag.Bool("read-only", false, "serve the console without its actions")
	step := flag.Duration("history", time.Minute, "how often the console records a point of history (the charts keep 180)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *every, *step, *readOnly, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "console:", err)
		os.Exit(1)
	}
}

// run serves the console on addr until ctx ends.
func run(ctx context.Context, addr string, every, step time.Duration, readOnly bool, out io.Writer) error {
	shop, err := open(ctx, every, out)
	if err != nil {
		return err
	}
	defer shop.close()
	opts := []console.Option{console.WithTitle("shop · leasebus")}
	if readOnly {
		opts = append(opts, console.WithReadOnly())
	}
	opts = append(opts, console.WithSchedules(shop.sched), console.WithWorkers(shop.workers), console.WithHistory(step, 180))
	c, err := console.New(shop.b, opts...)
	if err != nil {
		return err
	}
	go c.Record(ctx)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := httpserve.New(c)
	fmt.Fprintf(out, "console: http://%s/\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// shop is the broker and the goroutines that work on it.
type shop struct {
	b       *broker.Broker[order]
	sched   *schedule.Scheduler // the daily sales report
	workers *poller.Registry    // the pools, for the Workers page
	cancel  context.CancelFunc
	done    chan struct{}
	jam     chan struct{} // closed when the shop closes: the label printer\'s handler returns
	// events receives what billing's pool does with each delivery, while
	// there is room (tests wait on it).
	events chan poller.Event[order]
}

// open fills a shop and starts its work; what billing does with each
// order is logged to log, one line each.
func open(ctx context.Context, every time.Duration, log io.Writer) (*shop, error) {
	b, err := broker.New[order]()
	if err != nil {
		return nil, err
	}
	s := &shop{b: b, done: make(chan struct{}), jam: make(chan struct{}), events: make(chan poller.Event[order], 256), workers: poller.NewRegistry()}
	if err := s.fill(); err != nil {
		b.Close()
		return nil, err
	}
	billing, err := b.Subscription("orders", "billing")
	if err != nil {
		b.Close()
		return nil, err
	}
	var logMu sync.Mutex
	pool, err := poller.New(billing, charge, poller.WithWorkers(2), poller.WithRegistry(s.workers, "billing"), poller.WithObserver(func(e poller.Event[order]) {
		if line := logLine(e); line != "" {
			logMu.Lock()
			fmt.Fprintln(log, line)
			logMu.Unlock()
		}
		select {
		case s.events <- e:
		default:
		}
	}))
	if err != nil {
		b.Close()
		return nil, err
	}
	printer, err := b.Subscription("labels", "printer")
	if err != nil {
		b.Close()
		return nil, err
	}
	// The label printer jams on its first label: its handler waits until
	// the shop closes, its lease extended all the while, or until an
	// operator cancels the job on the Workers page.
	labels, err := poller.New(printer, func(ctx context.Context, _ queue.Delivery[order]) error {
		select {
		case <-s.jam:
			return errors.New("the printer was switched off")
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, poller.WithRegistry(s.workers, "label-printer"))
	if err != nil {
		b.Close()
		return nil, err
	}
	if s.sched, err = schedule.New(); err == nil {
		err = s.sched.Add("daily-sales-report", schedule.Cron("0 6 * * *"),
			schedule.Publish(b, "reports", func(f schedule.Fire) order {
				return order{Customer: "sales report for " + f.Slot.AddDate(0, 0, -1).Format(time.DateOnly)}
			}))
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go func() {
		defer close(s.done)
		go s.arrive(ctx, every)
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.sched.Run(ctx) })
		wg.Go(func() { _ = labels.Run(ctx) })
		_ = pool.Run(ctx) // until the shop closes
		wg.Wait()
	}()
	return s, nil
}

func (s *shop) close() {
	close(s.jam)
	s.cancel()
	<-s.done
	s.b.Close()
}

// fill makes the topology and the shop's state as the demo opens.
func (s *shop) fill() error {
	b := s.b
	if err := b.CreateTopic("orders"); err != nil {
		return err
	}
	retry := queue.RetryPolicy{Initial: 200 * time.Millisecond, Max: time.Second}
	if _, err := b.Subscribe("orders", "billing", broker.WithMaxAttempts(3), broker.WithRetry(retry)); err != nil {
		return err
	}
	if err := b.CreateTopic("reports"); err != nil {
		return err
	}
	if _, err := b.Subscribe("reports", "reporting"); err != nil {
		return err
	}
	if err := b.CreateTopic("labels"); err != nil {
		return err
	}
	if _, err := b.Subscribe("labels", "printer"); err != nil {
		return err
	}
	shipping, err := b.Subscribe("orders", "shipping", broker.WithVisibilityTimeout(10*time.Minute))
	if err != nil {
		return err
	}
	if _, err := b.Subscribe("*", "audit"); err != nil {
		return err
	}
	ctx := context.Background()
	for i := range 12 {
		o := order{Order: 1001 + i, Customer: fmt.Sprintf("cust-%d", 1+i%4), Card: goodCard, Amount: float64(20 + 7*i)}
		switch o.Order {
		case 1004:
			o.Card = declinedCard
		case 1009:
			o.Card = expiredCard
		}
		if _, err := b.Publish(ctx, "orders", o, broker.WithKey(o.Customer)); err != nil {
			return err
		}
	}
	for i := range 3 {
		o := order{Order: 2001 + i, Customer: "cust-9", Card: goodCard, Amount: 99}
		if _, err := b.Publish(ctx, "orders", o, broker.WithDelay(time.Duration(1+i)*time.Hour)); err != nil {
			return err
		}
	}
	if _, err := b.Publish(ctx, "labels", order{Order: 1001, Customer: "cust-1"}); err != nil {
		return err
	}
	// The stuck packer: two leases it never settles, so their customers'
	// later orders wait behind them.
	_, err = shipping.Poll(ctx, 2)
	return err
}

// charge is billing's handler: the payment provider.
func charge(_ context.Context, d queue.Delivery[order]) error {
	switch d.Payload.Card {
	case declinedCard:
		return errDeclined // retried, then dead-lettered: max-attempts
	case expiredCard:
		return poller.GiveUp(errors.New("card expired")) // dead-lettered at once: rejected
	}
	return nil
}

// logLine says what billing did with one order: "billing: order 1004
// charged", "… failed (attempt 1 of 3): card declined", "… dead-lettered:
// card declined".
func logLine(e poller.Event[order]) string {
	d := e.Delivery
	switch e.Outcome {
	case poller.OutcomeAcked:
		return fmt.Sprintf("billing: order %d charged", d.Payload.Order)
	case poller.OutcomeRetried:
		return fmt.Sprintf("billing: order %d failed (attempt %d of %d): %v", d.Payload.Order, d.Attempt, d.MaxAttempts, e.Err)
	case poller.OutcomeDeadLettered:
		return fmt.Sprintf("billing: order %d dead-lettered: %v", d.Payload.Order, e.Err)
	}
	return ""
}

// arrive publishes a good order every period until ctx ends.
func (s *shop) arrive(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 3001; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		o := order{Order: n, Customer: fmt.Sprintf("cust-%d", n%5), Card: goodCard, Amount: 42}
		if _, err := s.b.Publish(ctx, "orders", o, broker.WithKey(o.Customer)); err != nil {
			return
		}
	}
}
