package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/outbox"
	"github.com/leasebus/leasebus/queue"
)

// flaky is a broker's publisher that refuses the calls it is told to,
// and records when each message was published, on the bubble's clock.
type flaky struct {
	*broker.Broker[string]
	start time.Time

	mu     sync.Mutex
	refuse int      // the next calls to refuse
	log    []string // "1s m2", "2s m3 refused"
}

func (f *flaky) Publish(ctx context.Context, topic string, payload string, opts ...queue.PublishOption) (queue.Message[string], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := time.Since(f.start)
	if f.refuse > 0 {
		f.refuse--
		f.log = append(f.log, fmt.Sprintf("%v %s refused", at, payload))
		return queue.Message[string]{}, errors.New("broker unreachable")
	}
	f.log = append(f.log, fmt.Sprintf("%v %s", at, payload))
	return f.Broker.Publish(ctx, topic, payload, opts...)
}

// The relay on SQLite inside a testing/synctest bubble, its poll interval
// and its backoff exact on the real clock the bubble makes virtual: a
// row committed with the relay running is published at the next poll, and
// a refused publish is retried after 1s, then 2s. AwaitQuiet, or
// synctest.Wait, says when it is at rest.
func TestRelayInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(t.TempDir(), "app.db")))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		o, err := outbox.New[string](db, outbox.SQLite, queue.StringCodec())
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := broker.New[string]()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.CreateTopic("orders"); err != nil {
			t.Fatal(err)
		}
		sub, err := b.Subscribe("orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		pub := &flaky{Broker: b, start: time.Now()}
		relay, err := o.NewRelay(pub) // poll every 1s; retry after 1s doubling
		if err != nil {
			t.Fatal(err)
		}
		enqueue := func(payload string) {
			t.Helper()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := o.Enqueue(ctx, tx, "orders", payload); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		enqueue("m1")
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- relay.Run(runCtx) }()
		synctest.Wait() // m1 published at once
		time.Sleep(500 * time.Millisecond)
		enqueue("m2") // no Wake: the next poll, at 1s
		time.Sleep(time.Second)
		pub.mu.Lock()
		pub.refuse = 2
		pub.mu.Unlock()
		enqueue("m3") // at 1.5s: refused at 2s and 3s, published at 5s
		time.Sleep(10 * time.Second)
		if err := relay.AwaitQuiet(ctx); err != nil {
			t.Fatal(err)
		}
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}

		want := []string{"0s m1", "1s m2", "2s m3 refused", "3s m3 refused", "5s m3"}
		pub.mu.Lock()
		defer pub.mu.Unlock()
		if fmt.Sprint(pub.log) != fmt.Sprint(want) {
			t.Fatalf("publishes %q, want %q", pub.log, want)
		}
		if st := sub.Stats(); st.Visible != 3 {
			t.Fatalf("%+v, want the three messages queued once each", st)
		}
	})
}
