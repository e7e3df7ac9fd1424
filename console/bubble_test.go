package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
)

// Record inside a testing/synctest bubble, on the real clock the bubble
// makes virtual: a point every minute at the minute, exact with no
// waiting loop (synctest.Wait says when Record has taken its sample), the
// console read in process with no socket.
func TestRecordInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := brokertest.NewReal[string](t)
		sub := brokertest.Subscribe(t, b, "orders", "billing")
		c, err := console.New(b, console.WithHistory(time.Minute, 10))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Record(ctx) }()
		synctest.Wait() // Record has taken its first point, at 0
		for minute := 1; minute <= 3; minute++ {
			brokertest.Publish(t, b, "orders", "a", "b")
			ds := sub.TryPoll(1)
			if len(ds) != 1 {
				t.Fatalf("minute %d: polled %d", minute, len(ds))
			}
			if err := sub.Ack(ds[0].LeaseID); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Minute)
			synctest.Wait() // Record has taken the minute's point
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Record: %v", err)
		}

		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/history?topic=orders&name=billing", nil))
		var v console.HistoryView
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || len(v.Series) != 1 {
			t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
		}
		ps := v.Series[0].Points
		if len(ps) != 4 {
			t.Fatalf("%d points, want 4 (at 0 and each minute): %+v", len(ps), ps)
		}
		for i, p := range ps {
			if !p.At.Equal(start.Add(time.Duration(i) * time.Minute)) {
				t.Errorf("point %d at %v, want %v", i, p.At, start.Add(time.Duration(i)*time.Minute))
			}
			if i > 0 && (p.Published != 2 || p.Acked != 1 || p.Depth != int64(i)) {
				t.Errorf("point %d: %+v, want 2 published, 1 acked, depth %d", i, p, i)
			}
		}
	})
}
