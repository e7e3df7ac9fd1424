package suite

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// tally counts what every subscription took, by payload index.
type tally struct {
	mu   sync.Mutex
	seen []map[int]int // per subscription: index → times taken
}

func newTally(subs int) *tally {
	t := &tally{seen: make([]map[int]int, subs)}
	for i := range t.seen {
		t.seen[i] = map[int]int{}
	}
	return t
}

func (t *tally) rec(sub int, p []byte) {
	if len(p) != PayloadSize {
		panic(fmt.Sprintf("payload of %d bytes", len(p)))
	}
	t.mu.Lock()
	t.seen[sub][index(p)]++
	t.mu.Unlock()
}

// exactlyOnce checks that every subscription took indexes from..from+n-1,
// each once, and nothing else.
func (t *tally) exactlyOnce(tb testing.TB, from, n int) {
	tb.Helper()
	for s, seen := range t.seen {
		if len(seen) != n {
			tb.Errorf("subscription %d: took %d distinct messages, want %d", s, len(seen), n)
		}
		for i := from; i < from+n; i++ {
			if seen[i] != 1 {
				tb.Errorf("subscription %d: message %d taken %d times, want 1", s, i, seen[i])
				return
			}
		}
	}
}

// atMostOnce checks that every subscription took n messages, none twice.
func (t *tally) atMostOnce(tb testing.TB, n int) {
	tb.Helper()
	for s, seen := range t.seen {
		total := 0
		for i, k := range seen {
			if k != 1 {
				tb.Errorf("subscription %d: message %d taken %d times", s, i, k)
			}
			total += k
		}
		if total != n {
			tb.Errorf("subscription %d: took %d, want %d", s, total, n)
		}
	}
}

func run(t *testing.T, impl Impl, ph phase) []time.Duration {
	t.Helper()
	samples, err := runOnce(impl, ph, func(work func() error) error { return work() })
	if err != nil {
		t.Fatal(err)
	}
	return samples
}

// TestAdapters runs every workload small on every implementation and
// checks what was delivered: the adapters are what the benchmarks measure,
// so they must move every message, once.
func TestAdapters(t *testing.T) {
	for _, impl := range append(slices.Clone(Impls), ContractFloors...) {
		t.Run(impl.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("W1", func(t *testing.T) {
				tl := newTally(1)
				run(t, impl, w1(500, tl.rec))
				tl.exactlyOnce(t, 0, 500)
			})
			t.Run("W2", func(t *testing.T) {
				tl := newTally(1)
				run(t, impl, w2(1000, 4, 4, tl.rec))
				tl.exactlyOnce(t, 0, 1000)
			})
			t.Run("W3", func(t *testing.T) {
				tl := newTally(10)
				run(t, impl, w3(1000, 10, tl.rec))
				tl.exactlyOnce(t, 0, 100)
			})
			t.Run("W4", func(t *testing.T) {
				n := min(impl.Messages(W4, true), 5)
				tl := newTally(1)
				samples := run(t, impl, w4(n, tl.rec))
				tl.exactlyOnce(t, 0, n)
				for i, s := range samples {
					if s <= 0 {
						t.Errorf("sample %d: %v", i, s)
					}
				}
			})
			t.Run("Depth", func(t *testing.T) {
				tl := newTally(1)
				run(t, impl, depth(100, 200, tl.rec))
				tl.atMostOnce(t, 200)
			})
			t.Run("Subs", func(t *testing.T) {
				if impl.Name == MemPubSub.Name {
					t.Skip("a round trip can wait out the driver's 250 ms poll sleep; Depth and W1 cover the adapter")
				}
				tl := newTally(5)
				run(t, impl, subsScale(100, 5, tl.rec))
				tl.exactlyOnce(t, 0, 20)
			})
			t.Run("Expiry", func(t *testing.T) {
				if why := impl.Skip(Exp, true); why != "" {
					t.Skip(why)
				}
				tl := newTally(1)
				run(t, impl, expiry(300, tl.rec))
				tl.exactlyOnce(t, 0, 300)
			})
			t.Run("Mem", func(t *testing.T) {
				held, how, err := heldBytes(impl, 2000)
				if err != nil {
					t.Fatal(err)
				}
				if how == "" {
					t.Error("no description of what was measured")
				}
				t.Logf("%d B held for 2000 messages (%s)", held, how)
			})
		})
	}
}

func TestPercentile(t *testing.T) {
	s := make([]time.Duration, 100)
	for i := range s {
		s[i] = time.Duration(100 - i)
	}
	s = sortedCopy(s)
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {90, 90}, {99, 99}, {100, 100}, {1, 1}} {
		if got := percentile(s, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("empty: %v", got)
	}
}

func TestImplsCoverEveryWorkload(t *testing.T) {
	names := map[string]bool{}
	for _, impl := range Impls {
		if names[impl.Name] {
			t.Errorf("two implementations named %q", impl.Name)
		}
		names[impl.Name] = true
		for _, w := range Workloads {
			if impl.Skip(w, false) == "" && impl.Messages(w, false) == 0 {
				t.Errorf("%s runs %s with no messages in full mode", impl.Name, w.Bench)
			}
		}
	}
	if !names[FloorName] {
		t.Errorf("no floor %q", FloorName)
	}
	for _, w := range Workloads {
		if w.Kind == Throughput {
			phaseFor(w, 10, nil) // panics if a workload has no phase
		}
	}
}
