package durabilitylab

import (
	"flag"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

var (
	benchNNone = flag.Int("n.none", 100000, "N for the no-fsync mode")
	benchNSync = flag.Int("n.sync", 20000, "N for the fsync modes (each fsync is ~0.4 ms here)")
	window     = flag.Duration("window", 0, "journal group-commit window")
)

func TestMain(m *testing.M) {
	flag.Parse()
	GroupWindow = *window
	os.Exit(m.Run())
}

var modes = []Mode{SyncEach, SyncGroup, SyncNone}

func benchN(m Mode) int {
	if m == SyncNone {
		return *benchNNone
	}
	return *benchNSync
}

var payload64 = make([]byte, 64)

// w1: publish n, then one consumer acks them in batches of 10.
func w1(b *testing.B, s Store, n int) {
	for i := 1; i <= n; i++ {
		if err := s.Publish(&Msg{Seq: uint64(i), Payload: payload64}); err != nil {
			b.Fatal(err)
		}
	}
	var batch [10]uint64
	k := 0
	for i := 1; i <= n; i++ {
		batch[k] = uint64(i)
		if k++; k == 10 || i == n {
			if err := s.Ack(batch[:k]...); err != nil {
				b.Fatal(err)
			}
			k = 0
		}
	}
}

// w1batch: W1 with a batch API: publish in batches of 100 (one record
// write, one fsync per batch), ack in batches of 10.
func w1batch(b *testing.B, s Store, n int) {
	ms := make([]*Msg, 0, 100)
	for i := 1; i <= n; i++ {
		ms = append(ms, &Msg{Seq: uint64(i), Payload: payload64})
		if len(ms) == 100 || i == n {
			if err := s.PublishBatch(ms); err != nil {
				b.Fatal(err)
			}
			ms = ms[:0]
		}
	}
	var batch [10]uint64
	k := 0
	for i := 1; i <= n; i++ {
		batch[k] = uint64(i)
		if k++; k == 10 || i == n {
			if err := s.Ack(batch[:k]...); err != nil {
				b.Fatal(err)
			}
			k = 0
		}
	}
}

// w2: 4 publishers and 4 consumers concurrently; consumers ack batches of up
// to 10 (what one Poll returned). The channel stands in for the broker.
func w2(b *testing.B, s Store, n int) {
	ch := make(chan uint64, 1024)
	var pw, cw sync.WaitGroup
	for p := 0; p < 4; p++ {
		pw.Add(1)
		go func(p int) {
			defer pw.Done()
			for i := p; i < n; i += 4 {
				if err := s.Publish(&Msg{Seq: uint64(i + 1), Payload: payload64}); err != nil {
					b.Error(err)
					return
				}
				ch <- uint64(i + 1)
			}
		}(p)
	}
	for c := 0; c < 4; c++ {
		cw.Add(1)
		go func() {
			defer cw.Done()
			var batch [10]uint64
			for q := range ch {
				batch[0] = q
				k := 1
			fill:
				for k < 10 {
					select {
					case q, ok := <-ch:
						if !ok {
							break fill
						}
						batch[k] = q
						k++
					default:
						break fill
					}
				}
				if err := s.Ack(batch[:k]...); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	pw.Wait()
	close(ch)
	cw.Wait()
}

func runWorkload(b *testing.B, open opener, mode Mode, w func(*testing.B, Store, int)) {
	n := benchN(mode)
	var elapsed, compactT time.Duration
	var mallocs uint64
	var endSize, compSize int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		s, _, err := open(dir, mode)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		b.StartTimer()
		t0 := time.Now()
		w(b, s, n)
		elapsed += time.Since(t0)
		b.StopTimer()
		runtime.ReadMemStats(&m1)
		mallocs += m1.Mallocs - m0.Mallocs
		endSize, _ = s.Size()
		t1 := time.Now()
		if err := s.Compact(); err != nil {
			b.Fatal(err)
		}
		compactT = time.Since(t1)
		compSize, _ = s.Size()
		s.Close()
		b.StartTimer()
	}
	total := float64(n) * float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(elapsed.Nanoseconds())/total, "ns/msg")
	b.ReportMetric(float64(mallocs)/total, "allocs/msg")
	b.ReportMetric(float64(n), "msgs")
	b.ReportMetric(float64(endSize), "B-file-end")
	b.ReportMetric(float64(compSize), "B-file-compacted")
	b.ReportMetric(float64(compactT.Microseconds())/1000, "ms-compact")
}

func BenchmarkW1(b *testing.B) { benchAll(b, w1) }
func BenchmarkW2(b *testing.B) { benchAll(b, w2) }

// BenchmarkW1Batch100 is W1 through PublishBatch(100): what a batch job
// that can hand over its input in chunks pays per message.
func BenchmarkW1Batch100(b *testing.B) { benchAll(b, w1batch) }

func benchAll(b *testing.B, w func(*testing.B, Store, int)) {
	for _, name := range []string{"journal", "bolt"} {
		for _, mode := range modes {
			b.Run(name+"/"+mode.String(), func(b *testing.B) { runWorkload(b, openers[name], mode, w) })
		}
	}
}

// BenchmarkRecover100k: open (replay / scan) a store holding 100k live
// messages of 64 B, 10% of them nacked once and 1% dead-lettered.
func BenchmarkRecover100k(b *testing.B) {
	const n = 100000
	for _, name := range []string{"journal", "bolt"} {
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			s, _, err := openers[name](dir, SyncNone)
			if err != nil {
				b.Fatal(err)
			}
			for i := 1; i <= n; i++ {
				s.Publish(&Msg{Seq: uint64(i), Payload: payload64})
			}
			for i := 1; i <= n; i += 10 {
				s.Nack(uint64(i), 1, 123)
			}
			for i := 5; i <= n; i += 100 {
				s.DeadLetter(uint64(i), 5, "max-attempts", "boom")
			}
			size, _ := s.Size()
			s.Close()
			b.ResetTimer()
			var st *State
			for i := 0; i < b.N; i++ {
				s, st, err = openers[name](dir, SyncNone)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Close()
				b.StartTimer()
			}
			if len(st.Live)+len(st.Dead) != n {
				b.Fatalf("recovered %d, want %d", len(st.Live)+len(st.Dead), n)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/open")
			b.ReportMetric(float64(size), "B-file")
		})
	}
}
