// Command leasebus-sqs serves the SQS JSON and query protocols over leasebus, for the
// test suites of any language: start it, point an SQS client at it, and
// move its clock over HTTP instead of sleeping.
//
//	go run github.com/leasebus/leasebus/sqsserver/cmd/leasebus-sqs -mock-clock
//	curl -X POST 'localhost:9324/leasebus/clock?advance=30s'
//
// Flags:
//
//	-addr host:port   where to listen (default :9324, ElasticMQ's port)
//	-dir DIR          keep queues and messages in DIR (default: in memory)
//	-mock-clock       run on a mock clock that only /leasebus/clock moves
//	-mock-start T     the mock clock's start, RFC 3339 (default: now, to the millisecond)
//	-region R         the region in queue ARNs (default us-east-1)
//	-account ID       the 12-digit account in queue URLs and ARNs (default 000000000000)
//	-base-url URL     the scheme and host of queue URLs (default: each request's Host)
//	-access-key ID    accept only this access key (repeat for more; default: any)
//	-console          serve leasebus's console at /leasebus/console/ (its queues, a peek, pause, purge)
//	-log              log one line per SQS request to stderr (protocol, action, status, error, time taken)
//
// It prints "leasebus-sqs listening on ADDR" once it serves, and stops on
// SIGINT or SIGTERM: long polls end, a durable directory keeps everything.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/sqsserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "leasebus-sqs:", err)
		os.Exit(2)
	}
}

// keys is the repeatable -access-key flag.
type keys []string

// String returns the keys given, comma-separated (flag.Value).
func (k *keys) String() string { return strings.Join(*k, ",") }

// Set adds a key (flag.Value).
func (k *keys) Set(v string) error { *k = append(*k, v); return nil }

// run serves until ctx ends. It writes the listening line to out once the
// listener is open.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("leasebus-sqs", flag.ContinueOnError)
	fs.SetOutput(errOut)
	addr := fs.String("addr", ":9324", "host:port to listen on")
	dir := fs.String("dir", "", "keep queues and messages in this directory (default: in memory)")
	mock := fs.Bool("mock-clock", false, "run on a mock clock that POST /leasebus/clock moves")
	mockStart := fs.String("mock-start", "", "the mock clock's start time, RFC 3339 (default: now)")
	region := fs.String("region", "us-east-1", "the region in queue ARNs")
	account := fs.String("account", "000000000000", "the account ID in queue URLs and ARNs")
	baseURL := fs.String("base-url", "", "scheme and host of queue URLs (default: each request's Host)")
	withConsole := fs.Bool("console", false, "serve the console at /leasebus/console/ on the same port")
	logRequests := fs.Bool("log", false, "log one line per SQS request to stderr")
	var access keys
	fs.Var(&access, "access-key", "accept only this access key ID (repeatable; default: any)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *mockStart != "" && !*mock {
		return errors.New("-mock-start needs -mock-clock")
	}
	opts := []sqsserver.Option{sqsserver.WithRegion(*region), sqsserver.WithAccountID(*account)}
	if *mock {
		m := clock.NewMock()
		start := time.Now().Truncate(time.Millisecond)
		if *mockStart != "" {
			t, err := time.Parse(time.RFC3339Nano, *mockStart)
			if err != nil {
				return fmt.Errorf("-mock-start: %w", err)
			}
			start = t
		}
		m.Set(start)
		opts = append(opts, sqsserver.WithClock(m))
	}
	if *dir != "" {
		opts = append(opts, sqsserver.WithDir(*dir))
	}
	if *baseURL != "" {
		opts = append(opts, sqsserver.WithBaseURL(*baseURL))
	}
	if len(access) > 0 {
		opts = append(opts, sqsserver.WithAccessKeys(access...))
	}
	if *withConsole {
		opts = append(opts, sqsserver.WithConsole())
	}
	if *logRequests {
		opts = append(opts, sqsserver.WithLogger(slog.New(slog.NewTextHandler(errOut, nil))))
	}
	srv, err := sqsserver.New(opts...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return errors.Join(err, srv.Close())
	}
	// Long polls see the base context end on shutdown, so they answer at once.
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	hs := &http.Server{
		Handler:     srv,
		BaseContext: func(net.Listener) context.Context { return base },
		// A client that stalls in its headers or its body loses the
		// connection. ReadTimeout runs from a request's first byte to the
		// end of its handler's wait too (net/http ends the request's
		// context when it passes), so it must exceed the longest long
		// poll, 20 s; no WriteTimeout, for the same reason.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(out, "leasebus-sqs listening on %s\n", ln.Addr())
	if *withConsole {
		fmt.Fprintf(out, "console: http://%s/leasebus/console/\n", ln.Addr())
	}
	select {
	case err := <-served:
		return errors.Join(err, srv.Close())
	case <-ctx.Done():
	}
	// Stop accepting, end the long polls (through their context), let the
	// requests in progress finish, and only then close the queues they use.
	cancel()
	shutdown, done := context.WithTimeout(context.Background(), shutdownTimeout)
	defer done()
	err = hs.Shutdown(shutdown)
	if served := <-served; !errors.Is(served, http.ErrServerClosed) {
		err = errors.Join(err, served)
	}
	return errors.Join(err, srv.Close())
}

// shutdownTimeout bounds how long a shutdown waits for requests in
// progress (a long poll ends at once; a send or a receive takes
// milliseconds, a slow client's body up to the ReadTimeout).
const shutdownTimeout = 5 * time.Second
