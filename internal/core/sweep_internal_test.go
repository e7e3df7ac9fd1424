package core

// Tests of the chunked sweep and of the runs behind it: a sweep lets go of the lock between chunks, the calls that may go
// ahead meanwhile do, the others wait for the sweep, and every outcome is
// the one a single-hold settle gives.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/leasebus/leasebus/queue"
	"pgregory.net/rapid"
)

// setGap sets the function called between two chunks of a sweep. (The
// benchmarks call it, so that they build against the code before sweeps
// too, with a setGap that does nothing: one chunk, the whole settle.)
func setGap[T any](q *Queue[T], f func()) { q.testHooks().gap = f }

// awaitSweepWaiters waits, without q's lock (from q.gap), until n calls
// wait for the sweep to finish; it fails the test if they do not within
// ten seconds (they did not wait: they went ahead, or settled themselves).
func awaitSweepWaiters[T any](t *testing.T, q *Queue[T], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		w := q.sweepWaiters
		q.mu.Unlock()
		if w == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls wait for the sweep, want %d", w, n)
		}
		runtime.Gosched()
	}
}

// sweepQueue returns a queue on a mock clock that settles chunk items per
// lock hold, with n leases taken (payloads 0..n-1, in that order) and the
// clock moved past their deadline.
func sweepQueue(t *testing.T, cfg queue.Config, chunk, n int, onDead func(Letter[int])) (*Queue[int], *clock.Mock, []queue.Delivery[int]) {
	t.Helper()
	mock := clock.NewMock()
	cfg.Clock = mock
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = time.Minute
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 2*n + 100
	}
	q, err := New(cfg, onDead)
	if err != nil {
		t.Fatal(err)
	}
	q.testHooks().chunk = chunk
	t.Cleanup(func() { q.Close() })
	for i := range n {
		if err := q.Offer(context.Background(), &queue.Message[int]{Payload: i}, 0); err != nil {
			t.Fatal(err)
		}
	}
	ds := q.TryPoll(n)
	if len(ds) != n {
		t.Fatalf("leased %d of %d", len(ds), n)
	}
	mock.Add(cfg.VisibilityTimeout)
	return q, mock, ds
}

// A settle of more than a chunk lets go of the lock between chunks, with
// the real chunk size too, and redelivers everything exactly.
func TestSweepReleasesTheLockBetweenChunks(t *testing.T) {
	for _, tc := range []struct{ chunk, n, gaps int }{
		{16, 200, 12},                     // 13 chunks, the last one short
		{sweepChunk, 3*sweepChunk + 1, 3}, // the real size
		{16, 16, 1},                       // a full chunk ends with a look that finds nothing more
		{16, 15, 0},
	} {
		t.Run(fmt.Sprintf("chunk=%d/n=%d", tc.chunk, tc.n), func(t *testing.T) {
			q, _, _ := sweepQueue(t, queue.Config{}, tc.chunk, tc.n, nil)
			gaps := 0
			q.testHooks().gap = func() {
				if !q.mu.TryLock() {
					t.Error("the lock is held between chunks")
					return
				}
				if !q.sweeping {
					t.Error("between chunks, but no sweep unfinished")
				}
				q.mu.Unlock()
				gaps++
			}
			ds := q.TryPoll(tc.n + 1)
			if gaps != tc.gaps {
				t.Errorf("%d gaps, want %d", gaps, tc.gaps)
			}
			if len(ds) != tc.n {
				t.Fatalf("redelivered %d of %d", len(ds), tc.n)
			}
			for i, d := range ds {
				if d.Payload != i || d.Attempt != 2 {
					t.Fatalf("redelivery %d: payload %d attempt %d, want %d attempt 2", i, d.Payload, d.Attempt, i)
				}
			}
			if q.sweeping || q.swept != nil || len(q.backlog) != 0 {
				t.Errorf("after the sweep: sweeping %v, swept %v, backlog %d", q.sweeping, q.swept != nil, len(q.backlog))
			}
		})
	}
}

// Between two chunks of a sweep, calls whose outcome the rest of the sweep
// cannot change go ahead at once (an Offer with room, an Ack or Extend of
// a lease not due); the others wait for the sweep and then see exactly
// what a single-hold settle leaves: a Poll gets the next message in place
// order, an Ack of a lease that was due deletes its message (a late ack),
// a Nack of one returns ErrLeaseExpired, Stats counts everything.
func TestSweepLetsTheCallsThatCannotTellGoAhead(t *testing.T) {
	const n, chunk = 100, 10
	mock := clock.NewMock()
	q, err := New[int](queue.Config{Clock: mock, VisibilityTimeout: time.Minute, MaxQueue: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	q.testHooks().chunk = chunk
	ctx := context.Background()
	for i := range n + 2 {
		if err := q.Offer(ctx, &queue.Message[int]{Payload: i}, 0); err != nil {
			t.Fatal(err)
		}
	}
	due := q.TryPoll(n)        // payloads 0..n-1, due at +1m
	mock.Add(30 * time.Second) //
	later := q.TryPoll(2)      // payloads n, n+1, due at +1m30s
	mock.Add(30 * time.Second) // the n leases expire

	type result struct {
		name string
		err  error
		ds   []queue.Delivery[int]
		st   queue.Stats
	}
	waiting := make(chan result, 8)
	var wg sync.WaitGroup
	wait := func(name string, f func() result) {
		wg.Go(func() { r := f(); r.name = name; waiting <- r })
	}
	gaps := 0
	q.testHooks().gap = func() {
		gaps++
		if gaps != 1 {
			return
		}
		// Go ahead: each returns here, in the gap, with the sweep unfinished.
		inGap := func(name string, f func() error) {
			done := make(chan error, 1)
			go func() { done <- f() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s in the gap: %v", name, err)
				}
			case <-time.After(10 * time.Second): // a failsafe: it waits for the sweep, which waits for it
				t.Fatalf("%s waited for the sweep", name)
			}
		}
		inGap("Offer", func() error { return q.Offer(ctx, &queue.Message[int]{Payload: 1000}, 0) })
		inGap("Ack (not due)", func() error { return q.Ack(later[0].LeaseID) })
		inGap("Extend (not due)", func() error { return q.Extend(later[1].LeaseID, time.Hour) })
		q.mu.Lock()
		if !q.sweeping {
			t.Error("the calls that went ahead finished the sweep")
		}
		q.mu.Unlock()
		// Wait for the sweep.
		wait("TryPoll", func() result { return result{ds: q.TryPoll(1)} })
		wait("Ack (due)", func() result { return result{err: q.Ack(due[n-1].LeaseID)} })
		wait("Nack (due)", func() result { return result{err: q.Nack(due[n-2].LeaseID, 0)} })
		wait("Stats", func() result { return result{st: q.Stats()} })
		awaitSweepWaiters(t, q, 4)
	}
	first := q.TryPoll(1)
	if len(first) != 1 || first[0].Payload != 0 || first[0].Attempt != 2 {
		t.Fatalf("the sweeping TryPoll = %+v, want payload 0, attempt 2", first)
	}
	if gaps != n/chunk {
		t.Errorf("%d gaps, want %d", gaps, n/chunk)
	}
	wg.Wait()
	close(waiting)
	for r := range waiting {
		switch r.name {
		case "TryPoll":
			if len(r.ds) != 1 || r.ds[0].Payload != 1 || r.ds[0].Attempt != 2 {
				t.Errorf("the waiting TryPoll = %+v, want payload 1, attempt 2 (place order, as after a single hold)", r.ds)
			}
		case "Ack (due)":
			if r.err != nil {
				t.Errorf("a late Ack of an expired lease not delivered again = %v, want nil", r.err)
			}
		case "Nack (due)":
			if !errors.Is(r.err, queue.ErrLeaseExpired) {
				t.Errorf("a Nack after the deadline = %v, want ErrLeaseExpired", r.err)
			}
		case "Stats":
			// Settled: the n expired are visible or leased again; the
			// acked and the offered ones counted, whenever it ran.
			if r.st.Published != n+3 || r.st.Visible+r.st.InFlight+int(r.st.Acked) != n+3 {
				t.Errorf("Stats during the sweep = %+v", r.st)
			}
		}
	}
	st := q.Stats()
	want := queue.Stats{Visible: n + 3 - 2 - 1 - 2, InFlight: 2 + 1, Published: n + 3, Delivered: n + 2 + 2, Redelivered: 2, Acked: 2}
	if st != want {
		t.Errorf("Stats after = %+v\nwant %+v", st, want)
	}
	rest := q.TryPoll(1000)
	var got []int
	for _, d := range rest {
		got = append(got, d.Payload)
	}
	wantRest := []int{}
	for i := 2; i < n-1; i++ {
		wantRest = append(wantRest, i) // 99 was acked late; 98 was not nacked (too late) and comes back too
	}
	wantRest = append(wantRest, 1000) // the gap's offer; n+1 is extended, n acked
	if !slices.Equal(got, wantRest) {
		t.Errorf("the rest in order = %v\nwant %v", got, wantRest)
	}
}

// A sweep's dead letters reach onDead in the order they were made, all of
// them after the sweep (so onDead may call back into the queue) and none
// between chunks, while what the chunks recorded is committed between
// chunks (a durable journal does not grow for the whole sweep).
func TestSweepDeadLettersInOrderAfterTheSweep(t *testing.T) {
	const n, chunk = 100, 16
	var got []Letter[int]
	rec := &orderRecorder{}
	mock := clock.NewMock()
	var q *Queue[int]
	onDead := func(dl Letter[int]) {
		got = append(got, dl)
		if len(got) == 1 {
			q.Stats() // onDead may call back into the queue: the sweep is done
		}
	}
	q, err := NewRecorded(queue.Config{Clock: mock, VisibilityTimeout: time.Minute, MaxAttempts: 1}, onDead, rec)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	q.testHooks().chunk = chunk
	for i := range n {
		if err := q.Offer(context.Background(), &queue.Message[int]{Payload: n - 1 - i, Priority: queue.Priority(i%4 - 1)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	ds := q.TryPoll(n) // by priority, then place: the order they expire in
	mock.Add(time.Minute)
	commits := rec.commits
	q.testHooks().gap = func() {
		if len(got) != 0 {
			t.Errorf("%d dead letters handed over between chunks", len(got))
		}
	}
	if st := q.Stats(); st.DeadLettered != n || st.InFlight != 0 {
		t.Fatalf("Stats = %+v", st)
	}
	if len(got) != n || len(rec.dead) != n {
		t.Fatalf("%d dead letters handed over, %d recorded, want %d", len(got), len(rec.dead), n)
	}
	for i, d := range ds {
		if got[i].Message.Payload != d.Payload || rec.dead[i] != d.Payload || got[i].Reason != queue.ReasonMaxAttempts || !got[i].At.Equal(mock.Now()) {
			t.Fatalf("dead letter %d: %+v (recorded %d), want payload %d", i, got[i].DeadLetter, rec.dead[i], d.Payload)
		}
	}
	if c := rec.commits - commits; c != (n+chunk-1)/chunk {
		t.Errorf("%d commits, want one per chunk (%d)", c, (n+chunk-1)/chunk)
	}
}

type orderRecorder struct {
	countingRecorder
	dead []int
}

func (r *orderRecorder) DeadLettered(dl Letter[int]) { r.dead = append(r.dead, dl.Message.Payload) }

// Closing the queue between chunks ends the sweep: the sweeping call and
// those waiting for it return ErrClosed, and nothing is left waiting.
func TestSweepEndsWhenTheQueueCloses(t *testing.T) {
	q, _, ds := sweepQueue(t, queue.Config{}, 8, 100, nil)
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	q.testHooks().gap = func() { // once: the sweep ends at the next chunk
		for _, f := range []func() error{
			func() error { _, err := q.Poll(context.Background(), 1); return err },
			func() error { return q.Ack(ds[90].LeaseID) },
		} {
			wg.Go(func() {
				err := f()
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
		}
		awaitSweepWaiters(t, q, 2)
		q.Close()
	}
	// An Ack of a lease that is not on its last attempt needs no clock and
	// sweeps nothing (ackTimeless); a Nack reads the clock and sweeps.
	if err := q.Nack(ds[99].LeaseID, 0); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("the sweeping Nack = %v, want ErrClosed", err)
	}
	wg.Wait()
	for _, err := range errs {
		if !errors.Is(err, queue.ErrClosed) {
			t.Errorf("a call waiting for the sweep = %v, want ErrClosed", err)
		}
	}
}

// TestSweepRace races consumers (Poll, Ack, Extend, Nack), publishers and
// Stats against sweeps of a few hundred expiries, eight per lock hold, on
// a mock clock that moves past the deadlines over and over (run it with
// -race). No expiry is settled twice: every message is delivered with
// each attempt once; every Ack that succeeds deletes a message no one else
// acked; and the counts add up.
func TestSweepRace(t *testing.T) {
	const consumers, publishers, perPublisher = 3, 2, 300
	mock := clock.NewMock()
	q, err := New[int](queue.Config{Clock: mock, VisibilityTimeout: time.Minute, MaxAttempts: queue.UnlimitedAttempts, MaxQueue: 1 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	q.testHooks().chunk = 8
	var gaps atomic.Int64
	q.testHooks().gap = func() { gaps.Add(1) }
	ctx := context.Background()
	for i := range 400 {
		if err := q.Offer(ctx, &queue.Message[int]{Payload: i}, 0); err != nil {
			t.Fatal(err)
		}
	}
	total := 400 + publishers*perPublisher

	var mu sync.Mutex
	attempts := make(map[int][]int) // every delivery's attempt, by message
	acked := make(map[int]bool)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for c := range consumers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 9))
			for !stop.Load() {
				ds := q.TryPoll(1 + rng.IntN(50))
				mu.Lock()
				for _, d := range ds {
					attempts[d.Payload] = append(attempts[d.Payload], d.Attempt)
				}
				mu.Unlock()
				for _, d := range ds {
					var err error
					switch rng.IntN(8) {
					case 0, 1, 2: // keep it: it expires
						continue
					case 3:
						err = q.Extend(d.LeaseID, time.Duration(1+rng.IntN(90))*time.Second)
					case 4:
						err = q.Nack(d.LeaseID, 0)
					default:
						err = q.Ack(d.LeaseID)
						if err == nil {
							mu.Lock()
							if acked[d.Payload] {
								t.Errorf("message %d acked twice", d.Payload)
							}
							acked[d.Payload] = true
							mu.Unlock()
						}
					}
					if err != nil && !errors.Is(err, queue.ErrLeaseExpired) && !errors.Is(err, queue.ErrLeaseNotFound) {
						t.Errorf("settling %v: %v", d.LeaseID, err)
					}
				}
			}
		})
	}
	for p := range publishers {
		wg.Go(func() {
			for i := range perPublisher {
				m := &queue.Message[int]{Payload: 400 + p*perPublisher + i}
				if p%2 == 1 { // a key of its own: the locked path, which leaves a due sweep to the next call
					m.Key = fmt.Sprint("k", m.Payload)
				}
				if err := q.Offer(ctx, m, 0); err != nil {
					t.Errorf("Offer: %v", err)
				}
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			st := q.Stats()
			if st.Published+st.Redriven != st.Acked+st.DeadLettered+st.Dropped+uint64(st.Visible+st.Delayed+st.InFlight+st.HeldBack) {
				t.Errorf("Stats do not add up: %+v", st)
			}
		}
	})
	for round := 0; ; round++ {
		mock.Add(time.Minute)
		if q.Stats().Acked == uint64(total) {
			break
		}
		if round == 100_000 {
			t.Fatalf("not all acked: %+v", q.Stats())
		}
	}
	stop.Store(true)
	wg.Wait()
	if len(acked) != total {
		t.Errorf("%d messages acked, want %d", len(acked), total)
	}
	if gaps.Load() == 0 {
		t.Error("no sweep went in chunks")
	}
	for p, as := range attempts { // each attempt once: no expiry settled twice
		slices.Sort(as)
		for i, a := range as {
			if a != i+1 {
				t.Fatalf("message %d: attempts %v, want 1..%d each once", p, as, len(as))
			}
		}
	}
	if st := q.Stats(); st.Visible+st.InFlight+st.Delayed != 0 || st.Acked != uint64(total) {
		t.Errorf("Stats at the end = %+v", st)
	}
}

// TestQueueModelChunked is the model property with a settle of one item
// per lock hold, so that every settle of two or more goes through the
// chunk boundaries (a single goroutine sees no difference).
func TestQueueModelChunked(t *testing.T) {
	chunked := 0
	defer func() {
		if !t.Failed() && chunked == 0 {
			t.Error("no run settled in chunks")
		}
	}()
	for _, policy := range []queue.OverflowPolicy{queue.OverflowDeadLetter, queue.OverflowDropOldest} {
		t.Run(policy.String(), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				h, seq := drawModelRun(rt, policy)
				defer h.close()
				h.q.testHooks().chunk = 1
				h.q.testHooks().gap = func() { chunked++ }
				h.run(seq)
			})
		})
	}
}

// testHooks returns q's test hooks, made the first time.
func (q *Queue[T]) testHooks() *testHooks {
	if q.hooks == nil {
		q.hooks = &testHooks{}
	}
	return q.hooks
}
