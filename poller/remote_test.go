package poller_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
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

// A pool over a remote source leases up to two batches beyond its workers
// by default, a batch at a time, so that the next Poll's round trip
// overlaps the work: with 2 workers and batches of 3, two Polls of 3, and
// then, the workers busy and a batch waiting, no Poll for the 2 leases of
// room left (a Poll waits for a batch of room); over any other source one
// lease per worker. WithMaxOutstanding, given, holds over either.
func TestRemoteSourcePrefetchesTwoBatches(t *testing.T) {
	const workers, batch = 2, 3
	for _, tc := range []struct {
		name string
		src  func(remote) poller.Source[string]
		opts []poller.Option
		want int // leases held while both handlers run
	}{
		{"remote", func(r remote) poller.Source[string] { return saysRemote{r, true} }, nil, 2 * batch},
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

// countsPolls is a remote source that records how many each Poll asked
// for.
type countsPolls struct {
	saysRemote
	mu   sync.Mutex
	asks []int
}

func (s *countsPolls) Poll(ctx context.Context, n int) ([]queue.Delivery[string], error) {
	s.mu.Lock()
	s.asks = append(s.asks, n)
	s.mu.Unlock()
	return s.saysRemote.Poll(ctx, n)
}

func (s *countsPolls) polls() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.asks)
}

// Over a remote source, once the workers are busy and a batch waits, the
// pool polls a batch at a time: the leases freed one by one by settles
// wait for a batch of room, and one Poll asks for it, not a Poll each.
func TestRemoteSourcePollsABatchAtATime(t *testing.T) {
	const workers, batch = 2, 3
	mock, b, sub := newBroker(t)
	for i := range 20 {
		publish(t, b, fmt.Sprint(i))
	}
	src := &countsPolls{saysRemote: saysRemote{remote{sub}, true}}
	calls := make(chan handlerCall, 20)
	p, err := poller.New[string](src, blockingHandler(calls), poller.WithClock(mock), poller.WithWorkers(workers), poller.WithBatch(batch))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, p)
	defer func() { // stop, letting every handler that runs or starts return
		r.cancel()
		for !r.returned() {
			select {
			case c := <-calls:
				c.done <- nil
			case <-r.done:
			}
		}
	}()
	first := []handlerCall{recv(t, calls), recv(t, calls)}
	eventually(t, func() bool { return p.Stats().InFlight == 2*batch })
	awaitQuiet(t, p)
	if got := src.polls(); !slices.Equal(got, []int{batch, batch}) {
		t.Fatalf("Polls asked for %v, want two batches", got)
	}
	// One settle frees a lease: 5 held, a batch waiting beyond the
	// workers; no Poll for the room of 3 but the one of a batch.
	first[0].done <- nil
	recv(t, calls).done <- nil // the next queued starts; it returns too
	eventually(t, func() bool { return len(src.polls()) == 3 })
	awaitQuiet(t, p)
	if got := src.polls(); !slices.Equal(got, []int{batch, batch, batch}) {
		t.Fatalf("Polls asked for %v, want a third of a batch", got)
	}
	first[1].done <- nil
}
