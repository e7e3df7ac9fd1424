package suite

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks: one per workload family, one sub-benchmark per
// implementation (BenchmarkW2/leasebus). One iteration is one whole run of
// the workload on a fresh system, its setup untimed; run them with
// -benchtime=1x and -count N (cmd/benchtable does). Per-message metrics:
// ns/msg, allocs/msg and B/msg (allocated during the timed part), msgs
// (messages or deliveries per run); W4 adds p50-ns, p90-ns, p99-ns; Mem
// reports held-B/msg.

func BenchmarkW1(b *testing.B)     { benchImpls(b, W1) }
func BenchmarkW2(b *testing.B)     { benchImpls(b, W2) }
func BenchmarkW3(b *testing.B)     { benchImpls(b, W3) }
func BenchmarkW4(b *testing.B)     { benchImpls(b, W4) }
func BenchmarkExpiry(b *testing.B) { benchImpls(b, Exp) }
func BenchmarkMem(b *testing.B)    { benchImpls(b, Mem) }

func BenchmarkDepth(b *testing.B) {
	for _, w := range []Workload{D1e3, D1e5, D1e6} {
		b.Run(w.Bench[len("Depth/"):], func(b *testing.B) { benchImpls(b, w) })
	}
}

func BenchmarkSubs(b *testing.B) {
	for _, w := range []Workload{S1, S10, S100} {
		b.Run(w.Bench[len("Subs/"):], func(b *testing.B) { benchImpls(b, w) })
	}
}

// BenchmarkContractFloor runs the contract floors (ContractFloors) on
// W1–W4: run it beside the table's rows, as in
// -bench 'W1/(leasebus|leasebus-poll|leasefloor)$|ContractFloor/W1'.
func BenchmarkContractFloor(b *testing.B) {
	for _, w := range []Workload{W1, W2, W3, W4} {
		b.Run(w.Bench, func(b *testing.B) { benchList(b, w, ContractFloors) })
	}
}

// runs counts the runs of every impl/workload with a limit (Impl.Runs).
var runs sync.Map

func benchImpls(b *testing.B, w Workload) { benchList(b, w, Impls) }

func benchList(b *testing.B, w Workload, impls []Impl) {
	for _, impl := range impls {
		b.Run(impl.Name, func(b *testing.B) {
			short := isShort()
			if why := impl.Skip(w, short); why != "" {
				b.Skip("n/a: " + why)
			}
			n := impl.Messages(w, short)
			if n == 0 {
				b.Skip("full mode only")
			}
			if most := impl.Runs(w, short); most > 0 {
				c, _ := runs.LoadOrStore(impl.Name+"/"+w.Bench, new(atomic.Int32))
				if int(c.(*atomic.Int32).Add(1)) > most {
					b.Skipf("runs at most %d times per process", most)
				}
			}
			if w.Kind == Memory {
				benchMem(b, impl, n)
				return
			}
			benchRun(b, impl, w, n)
		})
	}
}

func benchRun(b *testing.B, impl Impl, w Workload, n int) {
	// The timer runs from before this function is called: stop it before
	// anything else. The payloads are made by the first run in a process
	// (70 ms of the 150 its W2 took), so pool() before StopTimer charged
	// them to whichever implementation came first: 740 ns/msg against 400
	// in every run after it.
	b.StopTimer()
	pool()
	var before, after runtime.MemStats
	var mallocs, bytes uint64
	var samples []time.Duration
	deliveries := 0
	warmUp(b, impl, w, n)
	for range b.N {
		ph := phaseFor(w, n, nil)
		s, err := runOnce(impl, ph, func(work func() error) error {
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.StartTimer()
			err := work()
			b.StopTimer()
			runtime.ReadMemStats(&after)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		mallocs += after.Mallocs - before.Mallocs
		bytes += after.TotalAlloc - before.TotalAlloc
		samples = append(samples, s...)
		deliveries += ph.deliveries
	}
	d := float64(deliveries)
	b.ReportMetric(float64(mallocs)/d, "allocs/msg")
	b.ReportMetric(float64(bytes)/d, "B/msg")
	b.ReportMetric(float64(deliveries/b.N), "msgs")
	if w.Kind == Latency {
		sorted := sortedCopy(samples)
		var sum time.Duration
		for _, s := range sorted {
			sum += s
		}
		b.ReportMetric(float64(sum.Nanoseconds())/float64(len(sorted)), "ns/msg")
		b.ReportMetric(float64(percentile(sorted, 50).Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(percentile(sorted, 90).Nanoseconds()), "p90-ns")
		b.ReportMetric(float64(percentile(sorted, 99).Nanoseconds()), "p99-ns")
		return
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/d, "ns/msg")
}

// warmed holds the implementation/workload pairs this process has run
// once, untimed (see warmUp).
var warmed sync.Map

// warmUp runs w once on impl, untimed, the first time this process times
// that pair. A process's first run of a workload pays for the heap the Go
// runtime maps from the system (page faults, the first collections that
// size it): with -benchtime 1x it doubled or tripled whichever
// implementation ran first, leasefloor included (measured: W1 on a cold
// process 300-540 ns/msg, warm 105-120), and the others, run after it on
// a warm heap, looked cheaper by comparison. Every pair is now timed warm,
// as a long-running process runs.
func warmUp(b *testing.B, impl Impl, w Workload, n int) {
	if _, done := warmed.LoadOrStore(impl.Name+"/"+w.Bench, true); done {
		return
	}
	if _, err := runOnce(impl, phaseFor(w, n, nil), func(work func() error) error { return work() }); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
}

func benchMem(b *testing.B, impl Impl, n int) {
	var sum int64
	var how string
	b.StopTimer()
	for range b.N {
		held, h, err := heldBytes(impl, n)
		if err != nil {
			b.Fatal(err)
		}
		sum += held
		how = h
	}
	b.ReportMetric(float64(sum)/float64(b.N*n), "held-B/msg")
	b.ReportMetric(float64(n), "msgs")
	b.Log(how)
}
