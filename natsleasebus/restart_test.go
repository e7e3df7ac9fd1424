package natsleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// TestRestart stops and restarts the embedded server (file store) while a
// poller works, and checks that every published message ends acked or
// dead-lettered: no message is lost, none is dead-lettered twice, and none
// is confirmed acked twice. (A handler may run twice for one message: an
// ack lost in the restart means a redelivery — at least once.) One in
// fifteen is published with a delay that outlasts the restart: its
// schedule survives it.
func TestRestart(t *testing.T) {
	const (
		n       = 300
		poison  = 10 // every tenth message always fails
		delayed = 15 // every fifteenth is published with a delay
		delay   = 2 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	srv := startServer(t, dir, -1)
	nc := connect(t, srv.srv.ClientURL())
	bus := open(t, nc, natsleasebus.WithDelays()) // file storage
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "workers",
		natsleasebus.WithVisibilityTimeout(time.Second),
		natsleasebus.WithMaxAttempts(2),
		natsleasebus.WithRetry(queue.RetryPolicy{Initial: 20 * time.Millisecond}),
		natsleasebus.WithPollSlice(50*time.Millisecond),
		natsleasebus.WithSettleTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var firstDue time.Time
	for i := range n {
		var opts []queue.PublishOption
		if i%delayed == 1 {
			opts = append(opts, queue.WithDelay(delay))
		}
		m, err := natsleasebus.Publish(ctx, bus, "orders", fmt.Sprintf("m%03d", i), opts...)
		if err != nil {
			t.Fatal(err)
		}
		if firstDue.IsZero() && len(opts) > 0 {
			firstDue = m.PublishedAt.Add(delay)
		}
	}

	var (
		mu      sync.Mutex
		acked   = map[string]int{} // confirmed acks
		handled = map[string]int{} // handler successes
	)
	progress := make(chan struct{}, 1) // a confirmed ack happened
	isPoison := func(p string) bool {
		i, _ := strconv.Atoi(strings.TrimPrefix(p, "m"))
		return i%poison == 0
	}
	p, err := poller.New(sub, func(_ context.Context, d queue.Delivery[string]) error {
		if isPoison(d.Payload) {
			return errors.New("poison")
		}
		mu.Lock()
		handled[d.Payload]++
		mu.Unlock()
		return nil
	}, poller.WithWorkers(4), poller.WithBatch(4),
		poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		poller.WithObserver(func(ev poller.Event[string]) {
			if ev.Outcome == poller.OutcomeAcked && ev.SourceErr == nil {
				mu.Lock()
				acked[ev.Delivery.Payload]++
				mu.Unlock()
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()

	// Restart once a third of the messages are acked.
	for {
		mu.Lock()
		k := len(acked)
		mu.Unlock()
		if k >= n/3 {
			break
		}
		select {
		case <-progress:
		case <-ctx.Done():
			t.Fatalf("only %d acked before the restart: %v", k, ctx.Err())
		}
	}
	srv.stop()
	restarted := startServer(t, dir, srv.port)
	t.Logf("server restarted on port %d, %v before the first delayed message was due", restarted.port, time.Until(firstDue))

	// Wait (bounded) until every message that can be is handled (the
	// delayed ones came due after the restart) and the consumer has
	// nothing pending or in flight.
	allHandled := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == n-n/poison
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := sub.Consumer().Info(ctx)
		if err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 && allHandled() {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("consumer never drained: %+v, %v", info, err)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	done <- nil // for the deferred stop

	dls, err := natsleasebus.FetchDeadLetters[string](ctx, bus, "orders", "workers", n/poison)
	if err != nil {
		t.Fatalf("dead letters: %v", err)
	}
	// Nothing more than expected arrives later.
	extra, _ := natsleasebus.FetchDeadLetters[string](ctx, bus, "orders", "workers", 0)
	if len(extra) != n/poison {
		t.Fatalf("%d dead letters, want %d", len(extra), n/poison)
	}
	dead := map[string]int{}
	for _, dl := range dls {
		dead[dl.Message.Payload]++
		if dl.Reason != queue.ReasonMaxAttempts || dl.Attempts != 2 || dl.LastError == "" {
			t.Errorf("dead letter %s: %v, %d attempts, %q", dl.Message.Payload, dl.Reason, dl.Attempts, dl.LastError)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var twice, lostAcks int
	for i := range n {
		pl := fmt.Sprintf("m%03d", i)
		switch {
		case isPoison(pl):
			if dead[pl] != 1 || acked[pl] != 0 {
				t.Errorf("%s: dead-lettered %d times, acked %d, want dead-lettered once", pl, dead[pl], acked[pl])
			}
		case acked[pl] > 1 || dead[pl] != 0 || handled[pl] == 0:
			t.Errorf("%s: confirmed acks %d, dead letters %d, handled %d; want one ack", pl, acked[pl], dead[pl], handled[pl])
		case acked[pl] == 0:
			lostAcks++ // the server took the ack but the reply was lost in the restart
		}
		if handled[pl] > 1 {
			twice++
		}
	}
	t.Logf("%d messages: %d acked (confirmed), %d acks unconfirmed by the restart, %d dead-lettered, %d handled twice",
		n, len(acked), lostAcks, len(dead), twice)
}
