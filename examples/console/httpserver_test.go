package main

import (
	"net/http"
	"testing"
)

// Every stage of a connection to the program's HTTP server is bounded, so
// a client that sends its headers or body a byte at a time, reads slowly
// or idles cannot hold a connection (and its goroutine) for ever.
func TestHTTPServerBoundsEveryStage(t *testing.T) {
	srv := httpServer(http.NotFoundHandler())
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
