package natsleasebus_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/natsleasebus"
)

// The defaults and names the package documents, which the tests check
// against what the server holds.
const (
	defaultStream                     = "LEASEBUS"               // Open's stream (WithStream)
	defaultDeadLettersPerSubscription = 10_000                   // WithDeadLetterLimits' PerSubscription
	defaultDeadLetterDuplicates       = 10 * time.Minute         // the dead letters' stream's duplicate window
	headerRedrivenFrom                = "Leasebus-Redriven-From" // internal: never shown to a consumer
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The nats client's and server's process-wide helpers.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).logRejectedTLSConns"),
		// A stream's source-consumer setup that the embedded server had
		// begun when it shut down (seen once in CI, not of this package).
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"),
	)
}

// hangGuard bounds every wait, so that a bug fails a test rather than
// hanging it. It is never a timing assertion.
const hangGuard = 30 * time.Second

// embedded is a nats-server with JetStream, in process, storing in dir.
type embedded struct {
	srv  *server.Server
	dir  string
	port int
}

// startServer starts an embedded server with JetStream on dir and port (-1:
// a random one), and shuts it down when the test ends.
func startServer(tb testing.TB, dir string, port int) *embedded {
	tb.Helper()
	return startServerWith(tb, dir, port, nil)
}

// startServerWith is startServer with the options adjusted by adjust (nil:
// none).
func startServerWith(tb testing.TB, dir string, port int, adjust func(*server.Options)) *embedded {
	tb.Helper()
	o := &server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	}
	if adjust != nil {
		adjust(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		tb.Fatalf("nats server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(hangGuard) {
		s.Shutdown()
		tb.Fatal("nats server not ready")
	}
	e := &embedded{srv: s, dir: dir, port: s.Addr().(*net.TCPAddr).Port}
	tb.Cleanup(e.stop)
	return e
}

func (e *embedded) stop() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// connect connects to e, reconnecting for ever, and closes the
// connection when the test ends.
func connect(tb testing.TB, url string) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// open opens a bus on nc.
func open(tb testing.TB, nc *nats.Conn, opts ...natsleasebus.Option) *natsleasebus.Bus {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	b, err := natsleasebus.Open(ctx, nc, opts...)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	return b
}
