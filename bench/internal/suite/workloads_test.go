package suite

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

// isShort reports short mode: go test -short, or BENCH_SHORT=1.
func isShort() bool { return testing.Short() || os.Getenv("BENCH_SHORT") != "" }

// poolSize is how many distinct payloads the workloads cycle through.
const poolSize = 1 << 18

var pool = sync.OnceValue(func() [][]byte {
	buf := make([]byte, poolSize*PayloadSize)
	ps := make([][]byte, poolSize)
	for i := range ps {
		p := buf[i*PayloadSize : (i+1)*PayloadSize : (i+1)*PayloadSize]
		binary.LittleEndian.PutUint64(p, uint64(i))
		ps[i] = p
	}
	return ps
})

// payload returns the i-th payload: 64 bytes that start with i (mod poolSize).
func payload(i int) []byte { return pool()[i%poolSize] }

// index returns the number a payload starts with.
func index(p []byte) int { return int(binary.LittleEndian.Uint64(p)) }

// recorder sees every payload a consumer of subscription sub takes; nil in
// benchmarks. It may be called from several goroutines.
type recorder func(sub int, p []byte)

func (r recorder) fn(sub int) func([]byte) {
	if r == nil {
		return nil
	}
	return func(p []byte) { r(sub, p) }
}

// phase is one workload run: the system it needs, an untimed prepare and
// the timed work. work returns latency samples for W4, else nil.
type phase struct {
	setup   Setup
	prepare func(ctx context.Context, sys System) error
	work    func(ctx context.Context, sys System) ([]time.Duration, error)
	// deliveries is how many messages the timed work moves (the divisor of
	// every per-message number).
	deliveries int
}

// runTimeout bounds one run, so a lost message fails the run instead of
// hanging it.
const runTimeout = 5 * time.Minute

func publishN(ctx context.Context, sys System, from, n int) error {
	for i := from; i < from+n; i++ {
		if err := sys.Publish(ctx, payload(i)); err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
	}
	return nil
}

// prefill builds a backlog of n messages, untimed: in one transaction for
// a Prefiller, else from 4 publishers at once (mempubsub batches them).
func prefill(ctx context.Context, sys System, n int) error {
	if p, ok := sys.(Prefiller); ok {
		return p.Prefill(ctx, n, payload)
	}
	const pubs = 4
	var g group
	for p := range pubs {
		from, to := p*n/pubs, (p+1)*n/pubs
		g.go_(func() error { return publishN(ctx, sys, from, to-from) })
	}
	return g.wait()
}

// drain takes n messages with consumer c in batches of batch.
func drain(ctx context.Context, c Consumer, n, batch int, fn func([]byte)) error {
	for got := 0; got < n; {
		k, err := c.Take(ctx, min(batch, n-got), fn)
		got += k
		if err != nil {
			return fmt.Errorf("took %d of %d: %w", got, n, err)
		}
	}
	return nil
}

// group runs goroutines and keeps the first error.
type group struct {
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

func (g *group) go_(f func() error) {
	g.wg.Go(func() {
		if err := f(); err != nil {
			g.once.Do(func() { g.err = err })
		}
	})
}

func (g *group) wait() error { g.wg.Wait(); return g.err }

// w1: publish n, then one consumer drains with batch 10, acking each.
func w1(n int, rec recorder) phase {
	return phase{
		setup:      Setup{Subs: 1, Capacity: n},
		deliveries: n,
		work: func(ctx context.Context, sys System) ([]time.Duration, error) {
			if err := publishN(ctx, sys, 0, n); err != nil {
				return nil, err
			}
			return nil, drain(ctx, sys.Consumer(0), n, 10, rec.fn(0))
		},
	}
}

// w2: pubs publishers and cons consumers on one subscription, n messages
// end to end; consumers take batches of 10.
func w2(n, pubs, cons int, rec recorder) phase {
	return phase{
		setup:      Setup{Subs: 1, Capacity: n},
		deliveries: n,
		work: func(ctx context.Context, sys System) ([]time.Duration, error) {
			cctx, stop := context.WithCancel(ctx)
			defer stop()
			var taken atomic.Int64
			var g group
			for p := range pubs {
				from, to := p*n/pubs, (p+1)*n/pubs
				g.go_(func() error { return publishN(ctx, sys, from, to-from) })
			}
			for range cons {
				c := sys.Consumer(0)
				g.go_(func() error {
					for {
						k, err := c.Take(cctx, 10, rec.fn(0))
						if taken.Add(int64(k)) >= int64(n) {
							stop()
						}
						if err != nil {
							if cctx.Err() != nil && ctx.Err() == nil {
								return nil // all taken: the run is over
							}
							return fmt.Errorf("took %d of %d: %w", taken.Load(), n, err)
						}
					}
				})
			}
			return nil, g.wait()
		},
	}
}

// w3: fan-out to subs subscriptions, n deliveries in all; one consumer per
// subscription drains concurrently with the publisher.
func w3(n, subs int, rec recorder) phase {
	per := n / subs
	return phase{
		setup:      Setup{Subs: subs, Capacity: per},
		deliveries: per * subs,
		work: func(ctx context.Context, sys System) ([]time.Duration, error) {
			var g group
			g.go_(func() error { return publishN(ctx, sys, 0, per) })
			for s := range subs {
				c := sys.Consumer(s)
				g.go_(func() error { return drain(ctx, c, per, 10, rec.fn(s)) })
			}
			return nil, g.wait()
		},
	}
}

// w4Gap is how long the publisher waits (spinning) after a round trip, so
// that the consumer is back in its receive, parked, before the next publish.
const w4Gap = 20 * time.Microsecond

// w4: n round trips, publish → receive, with the consumer parked in Take.
// A sample is from just before Publish to the consumer holding the payload.
func w4(n int, rec recorder) phase {
	return phase{
		setup:      Setup{Subs: 1, Capacity: 1},
		deliveries: n,
		work: func(ctx context.Context, sys System) ([]time.Duration, error) {
			cctx, stop := context.WithCancel(ctx)
			defer stop()
			got := make(chan time.Time)
			var warm atomic.Bool // the warm-up round trip is done: record
			c := sys.Consumer(0)
			cerr := make(chan error, 1)
			go func() {
				for {
					var at time.Time
					_, err := c.Take(cctx, 1, func(p []byte) {
						at = time.Now()
						if rec != nil && warm.Load() {
							rec(0, p)
						}
					})
					if err != nil {
						cerr <- err
						return
					}
					select {
					case got <- at:
					case <-cctx.Done():
					}
				}
			}()
			// One round trip not sampled nor recorded, then the gap every
			// round leaves, so that the consumer is parked in Take before
			// the first sample as before every other.
			if err := sys.Publish(ctx, payload(0)); err != nil {
				return nil, err
			}
			select {
			case <-got:
			case err := <-cerr:
				return nil, fmt.Errorf("warm-up round trip: %w", err)
			}
			warm.Store(true)
			for t := time.Now(); time.Since(t) < w4Gap; {
			}
			samples := make([]time.Duration, n)
			for i := range n {
				t0 := time.Now()
				if err := sys.Publish(ctx, payload(i)); err != nil {
					return nil, err
				}
				select {
				case t1 := <-got:
					samples[i] = t1.Sub(t0)
				case err := <-cerr:
					return nil, fmt.Errorf("round trip %d: %w", i, err)
				}
				for t := time.Now(); time.Since(t) < w4Gap; {
				}
			}
			stop()
			if err := <-cerr; !errors.Is(err, context.Canceled) {
				return nil, err
			}
			return samples, nil
		},
	}
}

// depth: a backlog of depth messages, then ops rounds of publish 1, take 1
// (the oldest, for a FIFO), ack it.
func depth(depth, ops int, rec recorder) phase {
	return phase{
		setup:      Setup{Subs: 1, Capacity: depth + 1},
		deliveries: ops,
		prepare:    func(ctx context.Context, sys System) error { return prefill(ctx, sys, depth) },
		work: func(ctx context.Context, sys System) ([]time.Duration, error) {
			c := sys.Consumer(0)
			fn := rec.fn(0)
			for i := range ops {
				if err := sys.Publish(ctx, payload(depth+i)); err != nil {
					return nil, err
				}
				if _, err := c.Take(ctx, 1, fn); err != nil {
					return nil, fmt.Errorf("op %d: %w", i, err)
				}
			}
			return nil, nil
		},
	}
}

// expiry: n messages leased and left to expire on a mock clock; the timed
// part redelivers (the sweep included) and acks all n, batch 10.
func expiry(n int, rec recorder) phase {
	mock := clock.NewMock()
	const vis = time.Second
	return phase{
		setup:      Setup{Subs: 1, Capacity: n, Clock: mock, Visibility: vis},
		deliveries: n,
		prepare: func(ctx context.Context, sys System) error {
			if err := publishN(ctx, sys, 0, n); err != nil {
				return err
			}
			l, ok := sys.Consumer(0).(Leaser)
			if !ok {
				return errors.New("the consumer cannot lease without acking")
			}
			for leased := 0; leased < n; {
				k, err := l.Lease(min(1000, n-leased))
				if err != nil {
					return err
				}
				if k == 0 {
					return fmt.Errorf("leased %d of %d", leased, n)
				}
				leased += k
			}
			mock.Add(2 * vis)
			return nil
		},
		work: func(ctx context.Context, sys System) ([]time.Duration, error) {
			return nil, drain(ctx, sys.Consumer(0), n, 10, rec.fn(0))
		},
	}
}

// subsScale: n deliveries over subs subscriptions: n/subs rounds of publish
// 1, then take 1 and ack it on every subscription.
func subsScale(n, subs int, rec recorder) phase {
	per := n / subs
	return phase{
		setup:      Setup{Subs: subs, Capacity: 1},
		deliveries: per * subs,
		work: func(ctx context.Context, sys System) ([]time.Duration, error) {
			cs := make([]Consumer, subs)
			fns := make([]func([]byte), subs)
			for s := range cs {
				cs[s] = sys.Consumer(s)
				fns[s] = rec.fn(s)
			}
			for i := range per {
				if err := sys.Publish(ctx, payload(i)); err != nil {
					return nil, err
				}
				for s, c := range cs {
					if _, err := c.Take(ctx, 1, fns[s]); err != nil {
						return nil, fmt.Errorf("round %d, subscription %d: %w", i, s, err)
					}
				}
			}
			return nil, nil
		},
	}
}

// phaseFor builds workload w with n messages for a run.
func phaseFor(w Workload, n int, rec recorder) phase {
	switch w.Bench {
	case W1.Bench:
		return w1(n, rec)
	case W2.Bench:
		return w2(n, 4, 4, rec)
	case W3.Bench:
		return w3(n, w.Param, rec)
	case W4.Bench:
		return w4(n, rec)
	case Exp.Bench:
		return expiry(n, rec)
	case S1.Bench, S10.Bench, S100.Bench:
		return subsScale(n, w.Param, rec)
	}
	if w.Kind == Throughput && w.Param > 0 { // Depth
		return depth(w.Param, n, rec)
	}
	panic("no phase for workload " + w.Bench)
}

// runOnce builds a system, prepares it and runs the work: the untimed
// skeleton that the tests use and the benchmarks time.
func runOnce(impl Impl, ph phase, timed func(work func() error) error) (samples []time.Duration, err error) {
	sys, err := impl.New(ph.setup)
	if err != nil {
		return nil, fmt.Errorf("new: %w", err)
	}
	defer func() {
		if cerr := sys.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if ph.prepare != nil {
		if err := ph.prepare(ctx, sys); err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
	}
	err = timed(func() error {
		var err error
		samples, err = ph.work(ctx, sys)
		return err
	})
	return samples, err
}

// heldBytes publishes n messages to a fresh system and returns the bytes
// it holds for them: the Go heap in use plus goroutine stacks, after GC,
// less the same before (the payloads are allocated beforehand and not
// counted), or the store's own size for a System outside the Go heap.
func heldBytes(impl Impl, n int) (held int64, how string, err error) {
	pool()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	sys, err := impl.New(Setup{Subs: 1, Capacity: n})
	if err != nil {
		return 0, "", err
	}
	defer sys.Close()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	if err := prefill(ctx, sys, n); err != nil {
		return 0, "", err
	}
	if h, ok := sys.(HeldBytes); ok {
		held, how, err := h.HeldBytes()
		return held, how, err
	}
	// Goroutines a System spawned (watermill's, one per queued message)
	// may still be starting: read until two readings after a collection
	// agree, a bounded number of times.
	inUse := func(m *runtime.MemStats) uint64 { return m.HeapInuse + m.StackInuse }
	runtime.GC()
	runtime.ReadMemStats(&after)
	for range 100 {
		runtime.Gosched()
		runtime.GC()
		last := inUse(&after)
		runtime.ReadMemStats(&after)
		if inUse(&after) == last {
			break
		}
	}
	runtime.KeepAlive(sys)
	held = int64(inUse(&after)) - int64(inUse(&before))
	return held, "Go heap in use + stacks", nil
}

// percentile returns the p-th percentile (0..100] of sorted samples, by
// nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func sortedCopy(s []time.Duration) []time.Duration {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
