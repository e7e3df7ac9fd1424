package httpserve

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every stage of a connection to the server New makes is bounded, so
// a client that sends its headers or body a byte at a time, reads slowly
// or idles cannot hold a connection (and its goroutine) for ever.
func TestHTTPServerBoundsEveryStage(t *testing.T) {
	srv := New(http.NotFoundHandler())
	for name, d := range map[string]int64{
		"ReadHeaderTimeout": int64(srv.ReadHeaderTimeout), "ReadTimeout": int64(srv.ReadTimeout),
		"WriteTimeout": int64(srv.WriteTimeout), "IdleTimeout": int64(srv.IdleTimeout),
	} {
		if d <= 0 {
			t.Errorf("%s is not set", name)
		}
	}
	if srv.ReadTimeout < srv.ReadHeaderTimeout {
		t.Errorf("ReadTimeout %v is shorter than ReadHeaderTimeout %v", srv.ReadTimeout, srv.ReadHeaderTimeout)
	}
}

// A client that sends its request line and then stalls in its headers is
// cut off once ReadHeaderTimeout passes (on the real clock: net/http's).
func TestHTTPServerCutsAStalledClient(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out ReadHeaderTimeout")
	}
	srv := New(http.NotFoundHandler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-served
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Slow: a")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The bound on this wait is the failure: a server without the timeout
	// keeps the connection open until the deadline.
	if err := conn.SetReadDeadline(start.Add(srv.ReadHeaderTimeout + time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server held a stalled client's connection for %v", time.Since(start))
	}
}
