package broker_test

// Durable compaction, concurrency and sync modes. Helpers are
// durable_test.go's.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// TestDurableCompaction: with compaction on, a long history of publishes
// and acks leaves a journal about the size of the live state, and a
// restart (after automatic or explicit compaction) recovers exactly that
// state.
func TestDurableCompaction(t *testing.T) {
	const churn = 600
	// workload builds the same state in d: dead letters (one of a gone
	// subscription), live, delayed and held-back messages, a long churn of
	// publish-poll-ack, and one message in flight. It returns the largest
	// journal size seen during the churn.
	workload := func(t *testing.T, d *durBroker[string], restarts bool) (maxSize int64) {
		s := d.subscribe("t", "s", broker.WithMaxAttempts(3), broker.WithVisibilityTimeout(time.Minute))
		g := d.subscribe("gone", "g")
		d.publish("gone", "g-dead")
		require.NoError(t, g.Reject(pollOneDur(t, g).LeaseID, errors.New("no")))
		require.NoError(t, d.Unsubscribe("gone", "g"))
		d.publish("t", "dead")
		require.NoError(t, s.Reject(pollOneDur(t, s).LeaseID, errors.New("no")))
		for i := range 40 {
			d.publish("t", fmt.Sprintf("live-%02d", i))
		}
		d.publish("t", "delayed", broker.WithDelay(time.Hour))
		d.publish("t", "k-a", broker.WithKey("k"))
		d.publish("t", "k-b", broker.WithKey("k"))
		for i := range churn {
			if restarts && i%200 == 199 { // compaction goes on after a restart
				d.restart()
				s = d.sub("t", "s")
			}
			p := fmt.Sprint("churn-", i)
			d.publish("t", p, broker.WithPriority(queue.PriorityCritical))
			dv := pollOneDur(t, s)
			require.Equal(t, p, dv.Payload)
			require.NoError(t, s.Ack(dv.LeaseID))
			_, size := segFile(t, d.dir)
			maxSize = max(maxSize, size)
		}
		d.publish("t", "inflight", broker.WithPriority(queue.PriorityCritical))
		pollOneDur(t, s)
		return maxSize
	}
	wantLive := []string{"inflight/2"}
	for i := range 40 {
		wantLive = append(wantLive, fmt.Sprintf("live-%02d/1", i))
	}
	wantLive = append(wantLive, "k-a/1")
	check := func(t *testing.T, d *durBroker[string]) {
		t.Helper()
		s := d.sub("t", "s")
		require.Equal(t, wantLive, peek(t, s))
		st := s.Stats()
		require.Equal(t, 1, st.Delayed)
		require.Equal(t, 1, st.HeldBack)
		require.Equal(t, []string{"g-dead", "dead"}, deadPayloads(d.Broker))
		require.Equal(t, []string{"gone", "t"}, d.Topics())
		d.mock.Add(time.Hour)
		later := append(append(slices.Clone(wantLive[:len(wantLive)-1]), "delayed/1"), "k-a/1") // in publish order
		require.Equal(t, later, peek(t, s))
	}

	plain := openDur[string](t, queue.StringCodec(), broker.WithCompactMin(-1))
	history := workload(t, plain, false)

	d := openDur[string](t, queue.StringCodec(), broker.WithCompactMin(1))
	maxSize := workload(t, d, true)
	firstSeg, _ := segFile(t, d.dir)
	require.NoError(t, d.Compact())
	seg, snapshot := segFile(t, d.dir)
	require.NotEqual(t, filepath.Base(firstSeg), filepath.Base(seg), "Compact writes a new segment")
	t.Logf("journal: %d bytes without compaction, at most %d with, %d after Compact", history, maxSize, snapshot)
	require.Less(t, maxSize*5, history, "compaction keeps the journal far below the history")
	require.LessOrEqual(t, maxSize, 4*snapshot, "compaction keeps the journal within a few times the live state")
	require.NotEqual(t, "seg-00000001.log", filepath.Base(firstSeg), "compacted by itself")

	d.restart()
	require.Equal(t, broker.RecoveryInfo{Records: d.Recovery().Records, Topics: 2, Subscriptions: 1, Messages: 44, DeadLetters: 2}, d.Recovery())
	check(t, d)

	// The journal without compaction recovers the same state.
	plain.restart()
	check(t, plain)
}

// TestDurableCompactMinOptionReused: an Option value given to Open again
// (the same options for every Open of a program that restarts its broker)
// means the same thing every time.
func TestDurableCompactMinOptionReused(t *testing.T) {
	never := broker.WithCompactMin(-1)
	d := openDur[string](t, queue.StringCodec(), never)
	s := d.subscribe("t", "s")
	cycle := func() {
		for range 50 {
			d.publish("t", "m")
			require.NoError(t, s.Ack(pollOneDur(t, s).LeaseID))
		}
	}
	cycle()
	d.restart() // Open with the same Option value
	s = d.sub("t", "s")
	cycle()
	seg, _ := segFile(t, d.dir)
	require.Equal(t, "seg-00000001.log", filepath.Base(seg), "compaction is off")
}

// TestDurableConcurrent: publishers and consumers at once on a durable
// broker that fsyncs every call (sharing fsyncs) and compacts as it goes:
// after a restart, exactly the messages not acked are there.
func TestDurableConcurrent(t *testing.T) {
	const publishers, each, acks = 4, 50, 100
	d := openDur[string](t, queue.StringCodec(), broker.WithSync(broker.SyncAlways), broker.WithCompactMin(4096))
	s := d.subscribe("t", "s")
	pctx, stop := context.WithCancel(context.Background())
	defer stop()
	var claimed atomic.Int64
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, publishers+2)
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				if _, err := d.Publish(context.Background(), "t", fmt.Sprintf("p%d-%02d", p, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for {
				ds, err := s.Poll(pctx, 4)
				if err != nil {
					return // done: acks reached
				}
				for _, dv := range ds {
					if claimed.Add(1) > acks {
						if err := s.Release(dv.LeaseID); err != nil {
							errs <- err
						}
						continue
					}
					if err := s.Ack(dv.LeaseID); err != nil {
						errs <- err
						continue
					}
					mu.Lock()
					acked[dv.Payload] = true
					n := len(acked)
					mu.Unlock()
					if n == acks {
						stop()
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, acked, acks)
	seg, _ := segFile(t, d.dir)
	require.NotEqual(t, "seg-00000001.log", filepath.Base(seg), "compacted while it ran")

	d.restart()
	var want []string
	for p := range publishers {
		for i := range each {
			if p := fmt.Sprintf("p%d-%02d", p, i); !acked[p] {
				want = append(want, p+"/1")
			}
		}
	}
	got := peek(t, d.sub("t", "s"))
	require.ElementsMatch(t, want, got)
	require.Equal(t, publishers*each-acks, d.Recovery().Messages)
}

// TestDurableSyncModes: both modes recover everything after a Close.
func TestDurableSyncModes(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncAlways, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			d := openDur[string](t, queue.StringCodec(), broker.WithSync(mode))
			s := d.subscribe("t", "s")
			for _, p := range []string{"a", "b", "c", "d", "e"} {
				d.publish("t", p)
			}
			ds := s.TryPoll(3)
			require.Equal(t, []string{"a", "b", "c"}, payloads(ds))
			require.NoError(t, s.Ack(ds[0].LeaseID))
			require.NoError(t, s.Nack(ds[1].LeaseID, time.Minute))
			require.NoError(t, s.Release(ds[2].LeaseID))
			require.NoError(t, d.Sync())
			d.restart()
			s = d.sub("t", "s")
			require.Equal(t, []string{"c/1", "d/1", "e/1"}, peek(t, s))
			d.mock.Add(time.Minute)
			require.Equal(t, []string{"b/2", "c/1", "d/1", "e/1"}, peek(t, s))
		})
	}
}
