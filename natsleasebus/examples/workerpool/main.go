// Command workerpool runs a pool of workers with leasebus's poller on NATS
// JetStream: the same handler and poller code as on the in-memory broker,
// with the subscription coming from the natsleasebus package instead.
//
// It connects to NATS_URL when that is set (the server must have
// JetStream enabled), otherwise it starts an embedded server of its own in
// a temporary directory. It publishes a batch of jobs, works them off
// (some fail once and are retried, one always fails and is dead-lettered)
// and exits when every job is settled. With -console ADDR it then serves
// the console over the bus at ADDR (its subscription, the dead letter, a
// redrive with an edited payload) until interrupted.
//
//	go run ./examples/workerpool
//	go run ./examples/workerpool -console 127.0.0.1:8080
//	NATS_URL=nats://127.0.0.1:4222 go run ./examples/workerpool
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Job is one unit of work.
type Job struct {
	ID    int    `json:"id"`
	Email string `json:"email"`
}

func main() {
	addr := flag.String("console", "", "after the run, serve the console at this address until interrupted")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var then func(context.Context, *natsleasebus.Bus) error
	if *addr != "" {
		then = func(ctx context.Context, bus *natsleasebus.Bus) error {
			return serveConsole(ctx, bus, *addr, os.Stdout, nil)
		}
	}
	if err := run(ctx, os.Getenv("NATS_URL"), 40, os.Stdout, then); err != nil {
		log.Fatal(err)
	}
}

// serveConsole serves the console over bus at addr until ctx is done,
// calling ready (if not nil) with its URL once it listens.
func serveConsole(ctx context.Context, bus *natsleasebus.Bus, addr string, out io.Writer, ready func(url string)) error {
	be, err := natsleasebus.ConsoleBackend[Job](bus)
	if err != nil {
		return err
	}
	c, err := console.NewFor(be, console.WithTitle("jobs · leasebus on JetStream"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go c.Record(ctx) // the history while it serves
	srv := httpServer(c)
	url := "http://" + ln.Addr().String() + "/"
	fmt.Fprintln(out, "console at", url, "(Ctrl-C to stop)")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if ready != nil {
		ready(url)
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.Shutdown(stop)
}

// run publishes jobs jobs and works them off on the server at url (an
// embedded one when url is empty), writing a report to out; then, if
// then is not nil, it calls then with the bus before it cleans up.
func run(ctx context.Context, url string, jobs int, out io.Writer, then func(context.Context, *natsleasebus.Bus) error) error {
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, time.Minute) // the work's bound; then is not bound by it
	defer cancel()
	if url == "" {
		dir, err := os.MkdirTemp("", "leasebus-workerpool-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
		if err != nil {
			return err
		}
		srv.Start()
		defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
		if !srv.ReadyForConnections(10 * time.Second) {
			return errors.New("embedded nats-server not ready")
		}
		url = srv.ClientURL()
		fmt.Fprintln(out, "embedded nats-server with JetStream at", url)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()

	// A stream and names of the example's own, so a shared server is not
	// disturbed; the run's subscription is removed at the end.
	bus, err := natsleasebus.Open(ctx, nc, natsleasebus.WithStream("LEASEBUS_EXAMPLE"), natsleasebus.WithSubjectPrefix("leasebus-example"))
	if err != nil {
		return err
	}
	name := fmt.Sprintf("mailer-%d", time.Now().UnixNano())
	sub, err := natsleasebus.Subscribe[Job](ctx, bus, "jobs", name,
		natsleasebus.WithVisibilityTimeout(2*time.Second),
		natsleasebus.WithMaxAttempts(3),
		natsleasebus.WithRetry(queue.RetryPolicy{Initial: 50 * time.Millisecond}))
	if err != nil {
		return err
	}
	defer sub.Delete(context.WithoutCancel(ctx))

	for i := 1; i <= jobs; i++ {
		if _, err := natsleasebus.Publish(ctx, bus, "jobs", Job{ID: i, Email: fmt.Sprintf("user%d@example.com", i)}); err != nil {
			return err
		}
	}

	// The handler and the poller are exactly what runs on the in-memory
	// broker.
	var settled atomic.Int64
	all := make(chan struct{})
	handler := func(ctx context.Context, d queue.Delivery[Job]) error {
		switch {
		case d.Payload.ID == 13:
			return errors.New("mailbox does not exist") // every attempt: dead-lettered
		case d.Payload.ID%5 == 0 && d.Attempt == 1:
			return errors.New("smtp: try again later") // retried after the backoff
		}
		return nil
	}
	p, err := poller.New(sub, handler,
		poller.WithWorkers(4),
		poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		poller.WithObserver(func(ev poller.Event[Job]) {
			final := ev.Outcome == poller.OutcomeAcked ||
				ev.Outcome == poller.OutcomeDeadLettered // its last attempt failed
			if final && settled.Add(1) == int64(jobs) {
				close(all)
			}
		}))
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	select {
	case <-all:
	case <-ctx.Done():
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("not every job settled: %w", err)
	}

	st := p.Stats()
	fmt.Fprintf(out, "%d jobs: %d acked, %d retries, %d dead-lettered\n", jobs, st.Acked, st.Retried, st.DeadLettered)
	// Those there now: a job's Fail has dead-lettered it before the
	// observer hears of it.
	dls, err := natsleasebus.FetchDeadLetters[Job](ctx, bus, "jobs", name, 0)
	if err != nil {
		return err
	}
	for _, dl := range dls {
		fmt.Fprintf(out, "dead letter: job %d after %d attempts (%s): %s\n", dl.Message.Payload.ID, dl.Attempts, dl.Reason, dl.LastError)
	}
	if then != nil {
		return then(outer, bus)
	}
	return nil
}

// httpServer returns a server for h whose every stage of a connection is
// bounded: a client that stalls in its headers or its body, reads its
// answer too slowly or idles loses the connection.
func httpServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
}
