package natsleasebus_test

// An older server is refused at Open, with the version it needs.

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/natsleasebus"
)

// versionDialer's connections show the client a server of another
// version: they rewrite the version in every INFO the server sends (it
// sends more than one), from and to of one length.
type versionDialer struct{ from, to []byte }

func (d versionDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, hangGuard)
	if err != nil {
		return nil, err
	}
	return &versionConn{Conn: c, d: d}, nil
}

type versionConn struct {
	net.Conn
	d       versionDialer
	pending []byte // read from the server, rewritten, not yet returned
}

func (c *versionConn) Read(p []byte) (int, error) {
	for {
		// What may still become from is held back; protocol lines end in
		// CRLF, which from does not hold, so the rest of it is coming.
		ready := len(c.pending)
		for k := min(len(c.d.from)-1, len(c.pending)); k > 0; k-- {
			if bytes.HasPrefix(c.d.from, c.pending[len(c.pending)-k:]) {
				ready = len(c.pending) - k
				break
			}
		}
		if ready > 0 {
			n := copy(p, c.pending[:ready])
			c.pending = c.pending[n:]
			return n, nil
		}
		buf := make([]byte, 4096)
		n, err := c.Conn.Read(buf)
		c.pending = bytes.ReplaceAll(append(c.pending, buf[:n]...), c.d.from, c.d.to)
		if n == 0 && err != nil {
			return 0, err
		}
	}
}

func TestOpenRefusesAnOldServer(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	for _, tc := range []struct {
		version string
		opts    []natsleasebus.Option
		want    string // in the error; "" for success
	}{
		{"2.9.10", nil, "nats-server 2.9.10 is too old: natsleasebus needs 2.10.0 or newer"},
		{"2.11.4", []natsleasebus.Option{natsleasebus.WithDelays()}, "nats-server 2.11.4 is too old for WithDelays: it needs 2.12.0 or newer"},
		{"2.11.4", nil, ""},
	} {
		t.Run(tc.version, func(t *testing.T) {
			from := []byte(`"version":"` + server.VERSION + `"`)
			nc, err := nats.Connect(srv.srv.ClientURL(), nats.SetCustomDialer(versionDialer{from, []byte(`"version":"` + tc.version + `"`)}))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if got := nc.ConnectedServerVersion(); got != tc.version {
				t.Fatalf("the client sees server %s, want %s", got, tc.version)
			}
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			_, err = natsleasebus.Open(ctx, nc, append(tc.opts, natsleasebus.WithMemoryStorage(), natsleasebus.WithStream("V"+strings.ReplaceAll(tc.version, ".", "_")), natsleasebus.WithSubjectPrefix("v"+strings.ReplaceAll(tc.version, ".", "_")))...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Open = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, natsleasebus.ErrUnsupported)):
				t.Fatalf("Open = %v, want an error matching ErrUnsupported saying %q", err, tc.want)
			}
		})
	}
}

// A server older than 2.11 cannot pause a consumer: the console's pause
// says so, with the version it needs, and changes nothing.
func TestConsolePauseNeedsServer211(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	from := []byte(`"version":"` + server.VERSION + `"`)
	to := []byte(`"version":"` + "2.10.9" + `"`)
	if len(from) != len(to) {
		t.Skipf("the embedded server's version %q is not as long as 2.10.9", server.VERSION)
	}
	nc, err := nats.Connect(srv.srv.ClientURL(), nats.SetCustomDialer(versionDialer{from, to}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	bus := open(t, nc)
	ctx := context.Background()
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	be, err := natsleasebus.ConsoleBackend[string](bus)
	if err != nil {
		t.Fatal(err)
	}
	pz, ok := be.(console.Pauser)
	if !ok {
		t.Fatal("the backend does not pause")
	}
	err = pz.Pause(ctx, "orders", "billing")
	if !errors.Is(err, natsleasebus.ErrUnsupported) || !strings.Contains(err.Error(), "nats-server 2.10.9 cannot pause a consumer: it needs 2.11.0 or newer") {
		t.Fatalf("Pause on 2.10.9: %v", err)
	}
	info, err := sub.Consumer().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Paused {
		t.Error("paused anyway")
	}
}
