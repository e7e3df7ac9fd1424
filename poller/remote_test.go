package poller_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// saysRemote is a source (without the subscription's hooks, as a remote
// one) whose Remote reports what the test says.
type saysRemote struct {
	remote
	is bool
}

func (s saysRemote) Remote() bool { return s.is }

// A pool over a remote source leases two batches beyond its workers by
// default, so that the next Poll's round trip overlaps the work; over any
// other source one lease per worker. WithMaxOutstanding, given, holds
// over either.
func TestRemoteSourcePrefetchesTwoBatches(t *testing.T) {
	const workers, batch = 2, 3
	for _, tc := range []struct {
		name string
		src  func(remote) poller.Source[string]
		opts []poller.Option
		want int // leases held while both handlers run
	}{
		{"remote", func(r remote) poller.Source[string] { return saysRemote{r, true} }, nil, workers + 2*batch},
		{"remote, outstanding given", func(r remote) poller.Source[string] { return saysRemote{r, true} }, []poller.Option{poller.WithMaxOutstanding(3)}, 3},
		{"says not remote", func(r remote) poller.Source[string] { return saysRemote{r, false} }, nil, workers},
		{"no Remote method", func(r remote) poller.Source[string] { return r }, nil, workers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock, b, sub := newBroker(t)
			for i := range 20 {
				publish(t, b, fmt.Sprint(i))
			}
			calls := make(chan handlerCall)
			opts := append([]poller.Option{poller.WithClock(mock), poller.WithWorkers(workers), poller.WithBatch(batch)}, tc.opts...)
			p, err := poller.New(tc.src(remote{sub}), blockingHandler(calls), opts...)
			if err != nil {
				t.Fatal(err)
			}
			r := start(t, p)
			running := []handlerCall{recv(t, calls), recv(t, calls)}
			// A Poll of a source that is not a subscription counts as at
			// rest once called: wait for what it leases, then for rest.
			eventually(t, func() bool { return p.Stats().InFlight >= tc.want })
			awaitQuiet(t, p)
			if st, sst := p.Stats(), sub.Stats(); st.InFlight != tc.want || sst.InFlight != tc.want || st.Running != workers {
				t.Fatalf("pool holds %d (%d running), subscription %d in flight; want %d", st.InFlight, st.Running, sst.InFlight, tc.want)
			}
			// Stop: the prefetched go back unspent, the running finish.
			r.cancel()
			for _, c := range running {
				c.done <- nil
			}
			if err := r.wait(t); err != nil {
				t.Fatal(err)
			}
			if st := sub.Stats(); st.Acked != 2 || st.InFlight != 0 || st.Redelivered != 0 {
				t.Fatalf("subscription stats after the drain %+v", st)
			}
			if st := p.Stats(); st.Released != uint64(tc.want-workers) {
				t.Fatalf("released %d, want %d", st.Released, tc.want-workers)
			}
		})
	}
}

// The default room over a remote source stays within the bound however
// large the batch: a batch of a million is not an error that names an
// option nobody gave.
func TestRemoteSourceHugeBatch(t *testing.T) {
	_, _, sub := newBroker(t)
	h := func(context.Context, queue.Delivery[string]) error { return nil }
	if _, err := poller.New[string](saysRemote{remote{sub}, true}, h, poller.WithWorkers(4), poller.WithBatch(1<<20)); err != nil {
		t.Fatal(err)
	}
	// Workers past the bound are the error, not a room that overflowed.
	_, err := poller.New[string](saysRemote{remote{sub}, true}, h, poller.WithWorkers(math.MaxInt), poller.WithBatch(1<<20))
	if !errors.Is(err, queue.ErrInvalidArgument) || strings.Contains(err.Error(), "-") {
		t.Fatalf("too many workers: %v", err)
	}
}
