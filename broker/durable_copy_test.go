package broker_test

// OpenCopy: a snapshot of a durable directory that its owner holds open,
// taken without the lock and without writing a byte.

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// dirSum is every file of dir with its size, mode, modification time and
// contents' hash: what "changes no byte" compares.
func dirSum(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sums[path] = fi.Mode().String() + " " + fi.ModTime().String() + " " + string(sha256.New().Sum(data))
		return nil
	}))
	return sums
}

func TestOpenCopyWhileTheOwnerRuns(t *testing.T) {
	d := openDur[string](t, queue.StringCodec(), broker.WithSubscriptionDefaults(broker.WithMaxAttempts(1)))
	require.NoError(t, d.CreateTopic("orders"))
	sub, err := d.Subscribe("orders", "billing", broker.WithVisibilityTimeout(time.Minute))
	require.NoError(t, err)
	_, err = d.Subscribe("orders.>", "audit")
	require.NoError(t, err)
	for _, p := range []string{"a", "b", "c", "d"} {
		_, err := d.Publish(ctx, "orders", p, broker.WithKey("k-"+p))
		require.NoError(t, err)
	}
	_, err = d.Publish(ctx, "orders", "later", broker.WithDelay(time.Hour))
	require.NoError(t, err)
	ds, err := sub.Poll(ctx, 3)
	require.NoError(t, err)
	require.NoError(t, sub.Fail(ds[2].LeaseID, errors.New("card declined"))) // c: dead
	require.NoError(t, d.Sync())
	before := dirSum(t, d.dir)

	mock := clock.NewMock()
	mock.Set(d.mock.Now())
	cp, err := broker.OpenCopy(d.dir, queue.StringCodec(), broker.WithClock(mock))
	require.NoError(t, err)
	defer cp.Close()
	assert.Equal(t, before, dirSum(t, d.dir), "the copy changed nothing in the directory")

	assert.Equal(t, []string{"orders"}, cp.Topics())
	var names []string
	for _, s := range cp.AllSubscriptions() {
		names = append(names, s.Topic()+"/"+s.Name())
	}
	assert.Equal(t, []string{"orders/billing", "orders.>/audit"}, names)
	bill, err := cp.Subscription("orders", "billing")
	require.NoError(t, err)
	assert.Equal(t, time.Minute, bill.Config().VisibilityTimeout, "options come with it")
	st := bill.Stats()
	assert.Equal(t, 2, st.InFlight, "the owner's leases show in flight")
	assert.Equal(t, 1, st.Visible)
	assert.Equal(t, 1, st.Delayed)
	held, err := bill.Peek(queue.PeekQuery{State: queue.StateInFlight, Limit: 10})
	require.NoError(t, err)
	require.Len(t, held, 2)
	assert.Equal(t, []string{"a", "b"}, []string{held[0].Payload, held[1].Payload})
	assert.True(t, held[0].At.IsZero(), "no deadline is known")
	mock.Add(24 * time.Hour)
	assert.Equal(t, 2, bill.Stats().InFlight, "and they never expire in the copy")
	assert.Equal(t, []string{"d", "later"}, payloads(bill.TryPoll(10)), "what waited is delivered in the copy")

	dls := cp.DeadLetters()
	require.Len(t, dls, 1)
	assert.Equal(t, "card declined", dls[0].LastError)
	info := cp.Recovery()
	assert.Equal(t, 2, info.Subscriptions)
	assert.Equal(t, 1, info.DeadLetters)

	// What the copy does stays in it; the owner goes on as before.
	n, err := cp.Redrive(func(queue.DeadLetter[string]) bool { return true })
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	require.NoError(t, cp.Close())
	assert.Equal(t, before, dirSum(t, d.dir))
	assert.Len(t, d.DeadLetters(), 1)
	require.NoError(t, sub.Ack(ds[0].LeaseID))
	require.NoError(t, d.Sync())
	again, err := broker.OpenCopy(d.dir, queue.StringCodec())
	require.NoError(t, err)
	defer again.Close()
	bill2, err := again.Subscription("orders", "billing")
	require.NoError(t, err)
	assert.Equal(t, 1, bill2.Stats().InFlight, "a later copy sees the ack")
}

func TestOpenCopyLeavesARecordBeingWrittenAlone(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	require.NoError(t, d.CreateTopic("t"))
	_, err := d.Subscribe("t", "s")
	require.NoError(t, err)
	_, err = d.Publish(ctx, "t", "whole")
	require.NoError(t, err)
	require.NoError(t, d.Close())
	segs, err := filepath.Glob(filepath.Join(d.dir, "seg-*.log"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	f, err := os.OpenFile(segs[0], os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{200, 0, 0, 0, 1, 2, 3}) // the start of a frame of 200 bytes
	require.NoError(t, err)
	require.NoError(t, f.Close())
	before := dirSum(t, d.dir)

	cp, err := broker.OpenCopy(d.dir, queue.StringCodec())
	require.NoError(t, err)
	defer cp.Close()
	assert.Equal(t, int64(7), cp.Recovery().TruncatedBytes)
	s, err := cp.Subscription("t", "s")
	require.NoError(t, err)
	assert.Equal(t, 1, s.Stats().Visible)
	assert.Equal(t, before, dirSum(t, d.dir), "the tail is not cut")
}

func TestOpenCopyRefuses(t *testing.T) {
	_, err := broker.OpenCopy[string]("", queue.StringCodec())
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
	_, err = broker.OpenCopy[string](t.TempDir(), nil)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
	empty := t.TempDir()
	_, err = broker.OpenCopy(empty, queue.StringCodec())
	assert.ErrorIs(t, err, fs.ErrNotExist)
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	assert.Empty(t, entries, "not even a LOCK file")
	_, err = broker.OpenCopy(filepath.Join(empty, "missing"), queue.StringCodec())
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Stat(filepath.Join(empty, "missing"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "not created")
	_, err = broker.OpenCopy(t.TempDir(), queue.StringCodec(), broker.WithSync(broker.SyncNone))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument, "Open's options are not a copy's")

	d := openDur[string](t, pickyCodec{refuseDecode: "bad"})
	require.NoError(t, d.CreateTopic("t"))
	_, err = d.Subscribe("t", "s")
	require.NoError(t, err)
	_, err = d.Publish(ctx, "t", "bad")
	require.NoError(t, err)
	require.NoError(t, d.Sync())
	_, err = broker.OpenCopy(d.dir, pickyCodec{refuseDecode: "bad"})
	assert.ErrorIs(t, err, broker.ErrCorrupt)
}

// Copies taken while the owner publishes, acks and compacts its journal
// (each compaction renames a new segment into place and removes the old
// one) all open, each a state the owner was in.
func TestOpenCopyDuringCompactions(t *testing.T) {
	d := openDur[string](t, queue.StringCodec(), broker.WithCompactMin(1))
	require.NoError(t, d.CreateTopic("t"))
	sub, err := d.Subscribe("t", "s")
	require.NoError(t, err)
	const rounds = 200
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds {
			if _, err := d.Publish(ctx, "t", "x"); err != nil {
				t.Error(err)
				return
			}
			ds := sub.TryPoll(1)
			if len(ds) == 1 {
				if err := sub.Ack(ds[0].LeaseID); err != nil {
					t.Error(err)
					return
				}
			}
			if err := d.Compact(); err != nil { // far more often than an owner would
				t.Error(err)
				return
			}
		}
	}()
	var depths []int
	for range 50 {
		cp, err := broker.OpenCopy(d.dir, queue.StringCodec())
		require.NoError(t, err)
		s, err := cp.Subscription("t", "s")
		require.NoError(t, err)
		st := s.Stats()
		depths = append(depths, st.Visible+st.InFlight)
		require.NoError(t, cp.Close())
	}
	wg.Wait()
	sort.Ints(depths)
	assert.LessOrEqual(t, depths[len(depths)-1], 1, "the owner never held more than one")
}

// A copy of a directory no process holds shows what the next Open will
// bring back: a message its owner had leased when it closed is visible,
// its attempt spent, or dead-lettered if that was its last.
func TestOpenCopyOfAClosedDirectoryShowsWhatOpenWill(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("whether a process holds a directory is read from /proc/locks")
	}
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("orders"))
	sub, err := b.Subscribe("orders", "billing", broker.WithMaxAttempts(2))
	require.NoError(t, err)
	for _, p := range []string{"a", "b"} {
		_, err := b.Publish(ctx, "orders", p)
		require.NoError(t, err)
	}
	ds, err := sub.Poll(ctx, 1) // a: attempt 1 of 2
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, sub.Nack(ds[0].LeaseID, 0))
	_, err = sub.Poll(ctx, 2) // a: attempt 2 of 2, b: attempt 1
	require.NoError(t, err)

	cp, err := broker.OpenCopy(dir, queue.StringCodec())
	require.NoError(t, err)
	cs, err := cp.Subscription("orders", "billing")
	require.NoError(t, err)
	assert.Equal(t, 2, cs.Stats().InFlight, "while the owner runs, its leases show in flight")
	require.NoError(t, cp.Close())

	require.NoError(t, b.Close())
	cp, err = broker.OpenCopy(dir, queue.StringCodec())
	require.NoError(t, err)
	defer cp.Close()
	cs, err = cp.Subscription("orders", "billing")
	require.NoError(t, err)
	held, err := cs.Peek(queue.PeekQuery{Limit: 10})
	require.NoError(t, err)
	require.Len(t, held, 1)
	assert.Equal(t, "b", held[0].Payload)
	assert.Equal(t, queue.StateVisible, held[0].State, "b comes back visible")
	assert.Equal(t, 1, held[0].Attempts, "with its attempt spent")
	dls := cp.DeadLetters()
	require.Len(t, dls, 1, "a was on its last attempt")
	assert.Equal(t, "a", dls[0].Message.Payload)
	assert.Equal(t, queue.ReasonMaxAttempts, dls[0].Reason)

	b, err = broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	defer b.Close()
	sub, err = b.Subscription("orders", "billing")
	require.NoError(t, err)
	reopened, err := sub.Peek(queue.PeekQuery{Limit: 10})
	require.NoError(t, err)
	assert.Equal(t, held, reopened, "Open brings back what the copy showed")
	assert.Len(t, b.DeadLetters(), 1)
}
