// Command signups runs a web app's background jobs on the PostgreSQL it
// already has, with leasebus's worker pool: each signup inserts its user
// and publishes its welcome mail in one transaction (PublishTx), so a
// signup that rolls back sends no mail and a mail is never sent for a user
// who was not stored; a pool of workers sends them, retrying failures with
// backoff and dead-lettering the one that always fails. The handler and
// the pool are exactly what runs on the in-memory broker.
//
// It needs a database: DATABASE_URL, a PostgreSQL URL such as
// postgres://user@127.0.0.1:5432/app. Its tables go in a schema of their
// own (leasebus_example), dropped at the end. With -console ADDR it then
// serves the console over the bus at ADDR until interrupted.
//
//	DATABASE_URL=postgres://... go run ./examples/signups
//	DATABASE_URL=postgres://... go run ./examples/signups -console 127.0.0.1:8080
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Welcome is the job: a welcome mail to a new user.
type Welcome struct {
	UserID int64  `json:"userId"`
	Email  string `json:"email"`
}

// schema holds the example's tables, the bus's and its users table.
const schema = "leasebus_example"

func main() {
	addr := flag.String("console", "", "after the run, serve the console at this address until interrupted")
	flag.Parse()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		log.Fatal("set DATABASE_URL to a PostgreSQL URL, such as postgres://user@127.0.0.1:5432/app")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var then func(context.Context, *pgleasebus.Bus) error
	if *addr != "" {
		then = func(ctx context.Context, bus *pgleasebus.Bus) error {
			return serveConsole(ctx, bus, *addr, os.Stdout, nil)
		}
	}
	if err := run(ctx, url, 30, os.Stdout, then); err != nil {
		log.Fatal(err)
	}
}

// signup stores a user and publishes its welcome mail in one transaction;
// fail rolls it back after the publish, and then neither happened.
func signup(ctx context.Context, pool *pgxpool.Pool, pub *pgleasebus.Publisher[Welcome], email string, fail bool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, "INSERT INTO "+schema+".users (email) VALUES ($1) RETURNING id", email).Scan(&id); err != nil {
			return err
		}
		if _, err := pub.PublishTx(ctx, tx, "signups", Welcome{UserID: id, Email: email}); err != nil {
			return err
		}
		if fail {
			return errors.New("the signup form failed its last check") // rolls back the user and the mail
		}
		return nil
	})
}

// run signs up users users on the database at url (one of them rolled
// back) and works off their mails, writing a report to out; then, if then
// is not nil, it calls then with the bus before it cleans up.
func run(ctx context.Context, url string, users int, out io.Writer, then func(context.Context, *pgleasebus.Bus) error) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	work, cancel := context.WithTimeout(ctx, time.Minute) // the work's bound; then is not bound by it
	defer cancel()
	if _, err := pool.Exec(work, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
		return err
	}
	defer pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE")
	if _, err := pool.Exec(work, "CREATE TABLE IF NOT EXISTS "+schema+".users (id bigserial PRIMARY KEY, email text NOT NULL)"); err != nil {
		return err
	}
	bus, err := pgleasebus.Open(work, pool, pgleasebus.WithSchema(schema))
	if err != nil {
		return err
	}
	defer bus.Close()
	if err := bus.CreateTopic(work, "signups"); err != nil {
		return err
	}
	sub, err := pgleasebus.Subscribe(work, bus, "signups", "welcome-mail", queue.JSONCodec[Welcome](),
		pgleasebus.WithVisibilityTimeout(5*time.Second),
		pgleasebus.WithMaxAttempts(3),
		pgleasebus.WithRetry(queue.RetryPolicy{Initial: 50 * time.Millisecond}))
	if err != nil {
		return err
	}
	defer sub.Close()
	pub, err := pgleasebus.NewPublisher(bus, queue.JSONCodec[Welcome]())
	if err != nil {
		return err
	}

	mails := 0
	for i := 1; i <= users; i++ {
		email := fmt.Sprintf("user%d@example.com", i)
		if i == 7 {
			email = "bounce@invalid" // every attempt fails: dead-lettered
		}
		err := signup(work, pool, pub, email, i == 3)
		switch {
		case i == 3 && err != nil:
			fmt.Fprintln(out, "signup 3 rolled back: no user, no mail")
		case err != nil:
			return err
		default:
			mails++
		}
	}

	var settled atomic.Int64
	all := make(chan struct{})
	handler := func(ctx context.Context, d queue.Delivery[Welcome]) error {
		switch {
		case d.Payload.Email == "bounce@invalid":
			return errors.New("mailbox does not exist")
		case d.Payload.UserID%4 == 0 && d.Attempt == 1:
			return errors.New("smtp: try again later") // retried after the backoff
		}
		return nil
	}
	p, err := poller.New(sub, handler,
		poller.WithWorkers(4),
		poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		poller.WithObserver(func(ev poller.Event[Welcome]) {
			final := ev.Outcome == poller.OutcomeAcked || ev.Outcome == poller.OutcomeDeadLettered
			if final && settled.Add(1) == int64(mails) {
				close(all)
			}
		}))
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(work)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	select {
	case <-all:
	case <-work.Done():
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	if err := work.Err(); err != nil {
		return fmt.Errorf("not every mail settled: %w", err)
	}
	var stored int
	if err := pool.QueryRow(work, "SELECT count(*) FROM "+schema+".users").Scan(&stored); err != nil {
		return err
	}
	st := p.Stats()
	fmt.Fprintf(out, "%d users stored, %d mails: %d sent, %d retries, %d dead-lettered\n", stored, mails, st.Acked, st.Retried, st.DeadLettered)
	dls, err := pgleasebus.DeadLetters(work, bus, queue.JSONCodec[Welcome]())
	if err != nil {
		return err
	}
	for _, dl := range dls {
		fmt.Fprintf(out, "dead letter: mail to %s after %d attempts (%v): %s\n", dl.Message.Payload.Email, dl.Attempts, dl.Reason, dl.LastError)
	}
	if then != nil {
		return then(ctx, bus)
	}
	return nil
}

// serveConsole serves the console over bus at addr until ctx is done,
// calling ready (if not nil) with its URL once it listens.
func serveConsole(ctx context.Context, bus *pgleasebus.Bus, addr string, out io.Writer, ready func(url string)) error {
	be, err := pgleasebus.ConsoleBackend(bus, queue.JSONCodec[Welcome]())
	if err != nil {
		return err
	}
	c, err := console.NewFor(be, console.WithTitle("signups · leasebus on PostgreSQL"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go c.Record(ctx)
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
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
