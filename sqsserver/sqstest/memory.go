package sqstest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/sqsserver"
)

// memoryHost is the endpoint of a server started by StartInMemory: a
// name no socket listens on, as no request leaves the process.
const memoryHost = "sqstest.invalid"

// StartInMemory starts a server on the real clock whose clients reach it
// through an in-memory transport: a call runs the server's handler in
// the caller's goroutine, with no socket, no connection and no goroutine
// of the HTTP stack. It is the form for a test inside testing/synctest:
// the bubble makes the real clock virtual, and it can see every
// goroutine, the server's long polls included, as waiting (a socket's
// read it cannot see). Client and SNS are set; HTTP is nil, URL is
// "http://sqstest.invalid" and Clock is nil (time is the bubble's). A
// call whose context ends has ended on the server when it returns, as
// the handler ran in its goroutine. opts come after WithClock; the server
// is closed when the test ends, and a failing start fails the test.
//
//	synctest.Test(t, func(t *testing.T) {
//		srv := sqstest.StartInMemory(t)
//		url := srv.CreateQueue(t, "jobs", nil)
//		... a pool over sqsleasebus.Subscribe(ctx, srv.Client, url, nil) ...
//		time.Sleep(time.Minute) // a minute of the bubble's time, at once
//		synctest.Wait()         // every goroutine waits: the server's too
//	})
func StartInMemory(tb testing.TB, opts ...sqsserver.Option) *Server {
	tb.Helper()
	s, err := sqsserver.New(append([]sqsserver.Option{sqsserver.WithClock(clock.New())}, opts...)...)
	if err != nil {
		tb.Fatalf("sqstest: %v", err)
	}
	hc := &http.Client{Transport: inMemory{s}}
	url := "http://" + memoryHost
	srv := &Server{Server: s, URL: url, Client: NewClient(url, hc), SNS: NewSNSClient(url, hc)}
	tb.Cleanup(srv.Close)
	return srv
}

// inMemory is an http.RoundTripper that serves each request with h in
// the caller's goroutine.
type inMemory struct{ h http.Handler }

func (m inMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	in := r.Clone(r.Context()) // a server's view of the request: Host, RequestURI, a body
	in.Host = r.URL.Host
	in.RequestURI = r.URL.RequestURI()
	in.RemoteAddr = "127.0.0.1:1"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, in)
	if r.Body != nil {
		r.Body.Close() // a RoundTripper closes the body, as a transport does
	}
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}
