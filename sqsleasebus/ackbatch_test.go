package sqsleasebus_test

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// gate is an HTTP transport that holds the first DeleteMessage until
// released, and counts the delete requests by action.
type gate struct {
	next    http.RoundTripper
	once    sync.Once
	held    chan struct{}
	release chan struct{}
	single  atomic.Int32
	batches atomic.Int32
}

func (g *gate) RoundTrip(r *http.Request) (*http.Response, error) {
	switch target := r.Header.Get("X-Amz-Target"); {
	case strings.HasSuffix(target, ".DeleteMessage"):
		g.single.Add(1)
		g.once.Do(func() { close(g.held); <-g.release })
	case strings.HasSuffix(target, ".DeleteMessageBatch"):
		g.batches.Add(1)
	}
	return g.next.RoundTrip(r)
}

// Acks made while a delete is in flight go together: with the first held
// until 39 more wait, the 40 take one DeleteMessage and 4 batches (10,
// 10, 10, 9), each Ack returns nil, and the queue is empty.
func TestAcksCoalesce(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "acks", nil)
	g := &gate{next: srv.HTTP.Client().Transport, held: make(chan struct{}), release: make(chan struct{})}
	client := sqstest.NewClient(srv.URL, &http.Client{Transport: g})
	ctx := context.Background()
	sub, err := sqsleasebus.Subscribe[string](ctx, client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := sqsleasebus.NewPublisher[string](client, nil)
	if err != nil {
		t.Fatal(err)
	}
	payloads := make([]string, 40)
	for i := range payloads {
		payloads[i] = "m"
	}
	if _, err := pub.PublishBatch(ctx, topicOf(url), payloads); err != nil {
		t.Fatal(err)
	}
	ds := pollAllNoAck(t, sub, 40)
	errs := make(chan error, len(ds))
	go func() { errs <- sub.Ack(ds[0].LeaseID) }()
	<-g.held
	for _, d := range ds[1:] {
		go func() { errs <- sub.Ack(d.LeaseID) }()
	}
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for sqsleasebus.AcksWaiting(sub) < 39 {
		if time.Now().After(deadline) {
			t.Fatalf("%d Acks wait, want 39", sqsleasebus.AcksWaiting(sub))
		}
		runtime.Gosched()
	}
	close(g.release)
	for range ds {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s, b := g.single.Load(), g.batches.Load(); s != 1 || b != 4 {
		t.Fatalf("%d DeleteMessage and %d DeleteMessageBatch, want 1 and 4", s, b)
	}
	if v, f := counts(t, srv, url); v != "0" || f != "0" {
		t.Fatalf("%s visible, %s in flight after the Acks", v, f)
	}
}

// pollAllNoAck polls sub until it holds n deliveries.
func pollAllNoAck(t *testing.T, sub *sqsleasebus.Subscription[string], n int) (out []queue.Delivery[string]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(out) < n {
		ds, err := sub.Poll(ctx, n-len(out))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds...)
	}
	return out
}
