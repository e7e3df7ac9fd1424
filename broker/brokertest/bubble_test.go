package brokertest_test

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

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// partner is the fake a user writes first of a slow dependency: it
// records when each call starts, then takes its customer's time on the
// test's clock: a second for a, 1.1s for b, 1.3s for c (so that no two
// customers' calls end at one instant: which of two acks at one instant
// the subscription sees first is the goroutines' order, which no clock
// decides).
type partner struct {
	clk   clock.Clock
	start time.Time

	mu    sync.Mutex
	calls []string // "1.25s b3"
}

var callTime = map[byte]time.Duration{'a': time.Second, 'b': 1100 * time.Millisecond, 'c': 1300 * time.Millisecond}

func (p *partner) Call(ctx context.Context, job string) error {
	p.mu.Lock()
	p.calls = append(p.calls, fmt.Sprintf("%v %s", p.clk.Since(p.start), job))
	p.mu.Unlock()
	select {
	case <-p.clk.After(callTime[job[0]]): // the call takes its time
	case <-ctx.Done():
	}
	return nil
}

// The schedule of a pool paced at 4 starts a second (a bucket of 4, a
// token every 250ms), two jobs in flight per customer (the
// subscription's key concurrency), with twelve jobs of three customers
// published at once, interleaved (a1 b1 c1 a2 b2 c2 ...):
//
//   - at 0: a1 b1 c1 a2, the bucket's four; b2 and c2 at the next two
//     tokens, 250ms and 500ms;
//   - at 750ms every customer has two in flight: the token waits;
//   - at 1s a1 and a2 end: a3 and a4, on two tokens;
//   - b1 ends at 1.1s: b3 at the next token, 1.25s; c1 ends at 1.3s and
//     b2 at 1.35s: c3 (published before b4) at 1.5s, b4 at 1.75s;
//   - c2 ends at 1.8s: c4 at 2s.
var pacedSchedule = []string{
	"0s a1", "0s b1", "0s c1", "0s a2",
	"250ms b2", "500ms c2",
	"1s a3", "1s a4",
	"1.25s b3", "1.5s c3", "1.75s b4",
	"2s c4",
}

// pacedPool subscribes to b, publishes the twelve jobs and returns the
// paced pool over them, its handlers calling p.
func pacedPool(t *testing.T, b *broker.Broker[string], p *partner) (*broker.Subscription[string], *poller.Poller[string]) {
	sub := brokertest.Subscribe(t, b, "jobs", "partner", broker.WithKeyConcurrency(2))
	for i := 1; i <= 4; i++ {
		for _, c := range []string{"a", "b", "c"} {
			if _, err := b.Publish(t.Context(), "jobs", fmt.Sprintf("%s%d", c, i), broker.WithKey(c)); err != nil {
				t.Fatal(err)
			}
		}
	}
	pool, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		return p.Call(ctx, d.Payload)
	}, poller.WithWorkers(8), poller.WithRate(4, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return sub, pool
}

// runPaced runs the paced pool over b inside the caller's bubble, for
// five seconds of the bubble's time, and returns the partner's calls.
func runPaced(t *testing.T, b *broker.Broker[string]) []string {
	clk := clock.New() // the bubble's: virtual
	p := &partner{clk: clk, start: clk.Now()}
	sub, pool := pacedPool(t, b, p)
	brokertest.RunPool(t, pool)
	time.Sleep(5 * time.Second) // the bubble's time: at once
	synctest.Wait()             // every goroutine waits: the pool is at rest
	if st := sub.Stats(); st.Acked != 12 {
		t.Fatalf("%+v, want 12 acked", st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// sameSchedule compares two schedules instant by instant: calls that
// start at one instant start in the goroutines' order, which the schedule
// does not promise.
func sameSchedule(got, want []string) bool {
	key := func(s []string) string {
		s = slices.Clone(s)
		slices.SortStableFunc(s, func(a, b string) int {
			ta, _ := time.ParseDuration(strings.Fields(a)[0])
			tb, _ := time.ParseDuration(strings.Fields(b)[0])
			if ta != tb {
				return int(ta - tb)
			}
			return strings.Compare(a, b)
		})
		return strings.Join(s, "\n")
	}
	return key(got) == key(want)
}

// The test a user writes first, handlers that wait on the clock
// themselves, is exact inside testing/synctest with no helper of
// leasebus's: over the memory broker and over the durable one.
func TestPacedPoolInBubble(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) *broker.Broker[string]
	}{
		{"memory", func(t *testing.T) *broker.Broker[string] { return brokertest.NewReal[string](t) }},
		{"durable", func(t *testing.T) *broker.Broker[string] {
			b, err := broker.Open(t.TempDir(), queue.StringCodec())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if got := runPaced(t, tc.open(t)); !sameSchedule(got, pacedSchedule) {
					t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(pacedSchedule, "\n"))
				}
			})
		})
	}
}
