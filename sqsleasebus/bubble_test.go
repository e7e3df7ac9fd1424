package sqsleasebus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// The test a user writes first, over SQS inside a testing/synctest
// bubble: the server in memory (sqstest.StartInMemory, no socket), a
// FIFO queue with a group per customer (one in flight each), a pool paced
// at 4 starts a second (a bucket of 4), and a partner whose call waits on
// the clock: a second for a, 1.1s for b, 1.3s for c, so that no two
// customers' calls end at one instant. A group's next message, freed by
// an ack, starts at the instant of the ack when a token is there.
//
//   - at 0: a1 b1 c1 (three tokens; each group then has one in flight);
//   - at 1s a1 ends: a2; at 1.1s b1 ends: b2; at 1.3s c1 ends: c2 (the
//     bucket has refilled);
//   - at 2s a2 ends: a3; at 2.2s: b3; at 2.6s: c3.
func TestPacedPoolInBubble(t *testing.T) {
	took := map[byte]time.Duration{'a': time.Second, 'b': 1100 * time.Millisecond, 'c': 1300 * time.Millisecond}
	want := []string{
		"0s a1", "0s b1", "0s c1",
		"1s a2", "1.1s b2", "1.3s c2",
		"2s a3", "2.2s b3", "2.6s c3",
	}
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.StartInMemory(t)
		url := srv.CreateQueue(t, "partner.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		ctx := t.Context()
		sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			for _, c := range []string{"a", "b", "c"} {
				if _, err := pub.Publish(ctx, topicOf(url), fmt.Sprintf("%s%d", c, i), queue.WithKey(c)); err != nil {
					t.Fatal(err)
				}
			}
		}
		clk := clock.New() // the bubble's: virtual
		start := clk.Now()
		var mu sync.Mutex
		var calls []string
		pool, err := poller.New[string](sub, func(ctx context.Context, d queue.Delivery[string]) error {
			mu.Lock()
			calls = append(calls, fmt.Sprintf("%v %s", clk.Since(start), d.Payload))
			mu.Unlock()
			select {
			case <-clk.After(took[d.Payload[0]]):
			case <-ctx.Done():
			}
			return nil
		}, poller.WithWorkers(8), poller.WithRate(4, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		stop := runPool(t, pool)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		got := slices.Clone(calls)
		slices.SortStableFunc(got, func(x, y string) int {
			tx, _ := time.ParseDuration(strings.Fields(x)[0])
			ty, _ := time.ParseDuration(strings.Fields(y)[0])
			return int(tx - ty)
		})
		sortInstant := func(s []string) string { // the order within an instant aside
			out := slices.Clone(s)
			slices.Sort(out)
			return strings.Join(out, ",")
		}
		if len(got) != len(want) || sortInstant(got[:3]) != sortInstant(want[:3]) || !slices.Equal(got[3:], want[3:]) {
			t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if v, f := counts(t, srv, url); v != "0" || f != "0" {
			t.Fatalf("%s visible, %s in flight after the run; want every message deleted", v, f)
		}
	})
}
