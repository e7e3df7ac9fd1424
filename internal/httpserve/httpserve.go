// Package httpserve makes the HTTP servers the core module's programs
// start (the leasebus command's console, the examples' consoles), with
// every stage of a connection bounded.
package httpserve

import (
	"net/http"
	"time"
)

// New returns a server for h whose every stage of a connection is
// bounded: a client that stalls in its headers or its body, reads its
// answer too slowly or idles loses the connection.
func New(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
}
