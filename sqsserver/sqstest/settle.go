package sqstest

import (
	"net/http"
	"strconv"
	"sync"
)

// requestHeader carries the number that ties a client's request to the
// server's handling of it.
const requestHeader = "X-Sqstest-Request"

// tracker makes a request that its client gives up on (its context ends
// while a long poll waits) end on the server before the client's call
// returns. Over a real connection the server learns of it only when it
// reads the closed connection, later: a receive that the test cancelled
// could meanwhile still take a message that a following clock move made
// visible, and hide it for its visibility timeout, which on a mock clock
// that nobody moves is forever. With the tracker, a cancelled Poll has let
// go of the queue when it returns, as an in-process one has.
type tracker struct {
	mu    sync.Mutex
	next  uint64
	state map[uint64]*request // sent and not known to have ended
}

// A request is one client request as the tracker sees it.
type request struct {
	ended   chan struct{} // closed when the server's handler returns; nil until it starts
	dropped bool          // the client gave up before the server started it
}

func newTracker() *tracker { return &tracker{state: map[uint64]*request{}} }

// client returns an HTTP client that numbers its requests for the tracker.
func (t *tracker) client(inner *http.Client) *http.Client {
	c := *inner
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = roundTripper(func(r *http.Request) (*http.Response, error) {
		id := t.sent()
		r = r.Clone(r.Context())
		r.Header.Set(requestHeader, strconv.FormatUint(id, 10))
		resp, err := base.RoundTrip(r)
		if err != nil {
			t.abandon(id)
			return nil, err
		}
		t.forget(id)
		return resp, nil
	})
	return &c
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (t *tracker) sent() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.state[t.next] = &request{}
	return t.next
}

// forget drops a request answered: the server's handler has written its
// response, and its end (if not yet seen) needs no waiting for.
func (t *tracker) forget(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.state[id]; ok && r.ended == nil {
		delete(t.state, id)
	}
}

// abandon waits, for a request its client gave up on, until the server's
// handler has returned; one the server has not started is marked so that
// it never starts.
func (t *tracker) abandon(id uint64) {
	t.mu.Lock()
	r, ok := t.state[id]
	switch {
	case !ok: // ended already
		t.mu.Unlock()
		return
	case r.ended == nil:
		r.dropped = true
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	<-r.ended // the server's handler sees its context end as the connection closes
}

// handler wraps the server's handler to tell the tracker when each
// numbered request starts and ends. A request without a number (another
// client's) passes through.
func (t *tracker) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.Header.Get(requestHeader), 10, 64)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		t.mu.Lock()
		req, ok := t.state[id]
		switch {
		case !ok: // not this tracker's
			t.mu.Unlock()
			next.ServeHTTP(w, r)
			return
		case req.dropped:
			delete(t.state, id)
			t.mu.Unlock()
			http.Error(w, "sqstest: the client gave up on this request", http.StatusServiceUnavailable)
			return
		}
		req.ended = make(chan struct{})
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			delete(t.state, id)
			t.mu.Unlock()
			close(req.ended)
		}()
		next.ServeHTTP(w, r)
	})
}
