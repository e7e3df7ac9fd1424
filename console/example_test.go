package console_test

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// requireUser is the host's own authentication: here HTTP basic auth
// against one fixed user, compared in constant time. The console stores
// no users; it trusts whatever middleware the host puts in front of it.
func requireUser(user, password string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="queues"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// The console mounted under /ops/queues on the host's mux, behind the
// host's authentication.
func Example() {
	b, err := broker.New[string]()
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := b.CreateTopic("orders"); err != nil {
		panic(err)
	}
	if _, err := b.Subscribe("orders", "billing"); err != nil {
		panic(err)
	}

	c, err := console.New(b, console.WithPrefix("/ops/queues"))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/queues/", requireUser("oncall", "s3cret", c))
	srv := httptest.NewServer(mux) // in a service: http.ListenAndServe(addr, mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/ops/queues/")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("without a password:", resp.StatusCode)

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ops/queues/api/overview", nil)
	req.SetBasicAuth("oncall", "s3cret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("with it:", resp.StatusCode, resp.Header.Get("Content-Type"))
	// Output:
	// without a password: 401
	// with it: 200 application/json; charset=utf-8
}

// An on-call setup: the history recorded while the service runs, and the
// pool reporting its running handlers to the Workers page.
func Example_history() {
	b, err := broker.New[string]()
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := b.CreateTopic("orders"); err != nil {
		panic(err)
	}
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		panic(err)
	}
	workers := poller.NewRegistry()
	pool, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error { return nil },
		poller.WithWorkers(4), poller.WithRegistry(workers, "billing"))
	if err != nil {
		panic(err)
	}
	c, err := console.New(b, console.WithWorkers(workers), console.WithHistory(time.Minute, 24*60))
	if err != nil {
		panic(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go c.Record(ctx) // a point a minute for a day, until ctx ends
	go pool.Run(ctx)
	srv := httptest.NewServer(c) // in a service: mounted on the host's mux
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/workers")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("workers page:", resp.StatusCode)
	// Output:
	// workers page: 200
}
