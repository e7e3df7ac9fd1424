package broker_test

// Regressions for ways the durable mode lost or corrupted acknowledged work,
// each reproduced from outside first.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/crashcopy"
	"github.com/leasebus/leasebus/queue"
)

// journalOf returns the directory of a closed SyncAlways broker with topic
// "t", subscription "s" and n messages "m000", "m001", ... published, one
// record each.
func journalOf(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("t"))
	_, err = b.Subscribe("t", "s")
	require.NoError(t, err)
	for i := range n {
		_, err := b.Publish(context.Background(), "t", fmt.Sprintf("m%03d", i))
		require.NoError(t, err)
	}
	require.NoError(t, b.Close())
	return dir
}

// TestDurableBitFlipIsCorruptionNotATornTail: one bit flipped in the middle
// of a SyncAlways journal used to make Open cut everything after it and
// return nil. Now a damaged record with whole records after it is refused
// with a *CorruptError that says where, and the file is left byte for byte
// as it was; Salvage then keeps the readable prefix and a backup.
func TestDurableBitFlipIsCorruptionNotATornTail(t *testing.T) {
	dir := journalOf(t, 100)
	seg, size := segFile(t, dir)
	orig, err := os.ReadFile(seg)
	require.NoError(t, err)

	flipped := bytes.Clone(orig)
	flipped[size/2] ^= 0x10
	require.NoError(t, os.WriteFile(seg, flipped, 0o644))
	_, err = broker.Open(dir, queue.StringCodec())
	require.ErrorIs(t, err, broker.ErrCorrupt)
	var ce *broker.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, seg, ce.Path)
	require.LessOrEqual(t, ce.Offset, size/2, "the damaged record starts at or before the flipped byte")
	require.Greater(t, ce.Offset, size/2-200)
	after, err := os.ReadFile(seg)
	require.NoError(t, err)
	require.Equal(t, flipped, after, "a refused Open changes no byte")

	si, err := broker.Salvage(dir)
	require.NoError(t, err)
	require.Equal(t, ce.Offset, si.KeptBytes)
	require.Equal(t, size-ce.Offset, si.DroppedBytes)
	backup, err := os.ReadFile(si.Backup)
	require.NoError(t, err)
	require.Equal(t, flipped, backup, "the backup is the journal as it was")

	b, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	defer b.Close()
	s, err := b.Subscription("t", "s")
	require.NoError(t, err)
	got := peek(t, s)
	require.NotEmpty(t, got)
	require.Less(t, len(got), 100)
	for i, p := range got {
		require.Equal(t, fmt.Sprintf("m%03d/1", i), p, "the readable prefix, in order")
	}
}

// TestDurableRandomBitFlips: a single flipped bit anywhere in the journal
// (format record included) either makes Open refuse with the file
// unchanged, or, in the very last record, reads as a torn tail that costs
// that record alone.
func TestDurableRandomBitFlips(t *testing.T) {
	const n = 40
	dir := journalOf(t, n)
	seg, size := segFile(t, dir)
	orig, err := os.ReadFile(seg)
	require.NoError(t, err)
	lastLen := int64(0) // the last record's frame: the length of m039's put
	{
		b, err := broker.Open(dir, queue.StringCodec())
		require.NoError(t, err)
		require.NoError(t, b.Close())
		_, size2 := segFile(t, dir)
		require.Equal(t, size, size2)
	}
	r := rand.New(rand.NewPCG(12, 0))
	refused, torn := 0, 0
	for range 300 {
		pos := r.Int64N(size)
		flipped := bytes.Clone(orig)
		flipped[pos] ^= 1 << r.IntN(8)
		require.NoError(t, os.WriteFile(seg, flipped, 0o644))
		b, err := broker.Open(dir, queue.StringCodec())
		if err != nil {
			require.ErrorIs(t, err, broker.ErrCorrupt, "flip at %d", pos)
			after, rerr := os.ReadFile(seg)
			require.NoError(t, rerr)
			require.Equal(t, flipped, after, "flip at %d: a refused Open changes no byte", pos)
			refused++
			continue
		}
		s, err := b.Subscription("t", "s")
		require.NoError(t, err)
		require.Equal(t, n-1, s.Stats().Visible, "flip at %d: only the last record may be lost", pos)
		cut := b.Recovery().TruncatedBytes
		require.NoError(t, b.Close())
		if lastLen == 0 {
			lastLen = cut
		}
		require.Equal(t, lastLen, cut)
		require.GreaterOrEqual(t, pos, size-cut, "flip at %d read as a torn tail", pos)
		torn++
	}
	require.Positive(t, refused)
	t.Logf("300 flips: %d refused as corrupt, %d in the last record cut as torn", refused, torn)
}

// TestDurableDedupIDNeverOutlivesItsMessage: a compaction between a
// publish's dedup reservation and its message used to snapshot the ID
// without the message, so that after a crash there, or after the publish
// failed and the broker restarted, publishing again with that ID returned
// nil and queued nothing.
func TestDurableDedupIDNeverOutlivesItsMessage(t *testing.T) {
	ctx := context.Background()
	t.Run("crash after a compaction inside the publish", func(t *testing.T) {
		dir := t.TempDir()
		b, err := broker.Open(dir, queue.StringCodec())
		require.NoError(t, err)
		defer b.Close()
		require.NoError(t, b.CreateTopic("t"))
		var image string
		_, err = b.Subscribe("t", "s", broker.WithFilter(func(m queue.Message[string]) bool {
			if image == "" { // the filter runs after the reservation, before the offer
				require.NoError(t, b.Compact())
				image = crashcopy.Of(t, dir)
			}
			return true
		}))
		require.NoError(t, err)
		_, err = b.Publish(ctx, "t", "item-1", broker.WithDedupID("item-1"))
		require.NoError(t, err)

		r, err := broker.Open(image, queue.StringCodec())
		require.NoError(t, err)
		defer r.Close()
		s, err := r.Subscribe("t", "s", broker.WithFilter(func(queue.Message[string]) bool { return true }))
		require.NoError(t, err)
		require.Zero(t, s.Stats().Visible, "the crash came before the message was stored")
		_, err = r.Publish(ctx, "t", "item-1", broker.WithDedupID("item-1"))
		require.NoError(t, err)
		require.Equal(t, 1, s.Stats().Visible, "the republished item is queued")
	})
	t.Run("failed publish, then a clean restart", func(t *testing.T) {
		dir := t.TempDir()
		b, err := broker.Open(dir, queue.StringCodec())
		require.NoError(t, err)
		require.NoError(t, b.CreateTopic("t"))
		compact := false
		_, err = b.Subscribe("t", "s", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject),
			broker.WithFilter(func(m queue.Message[string]) bool {
				if compact {
					require.NoError(t, b.Compact())
				}
				return true
			}))
		require.NoError(t, err)
		_, err = b.Publish(ctx, "t", "first")
		require.NoError(t, err)
		compact = true
		_, err = b.Publish(ctx, "t", "item-1", broker.WithDedupID("item-1"))
		require.ErrorIs(t, err, queue.ErrQueueFull)
		require.NoError(t, b.Close())

		b, err = broker.Open(dir, queue.StringCodec())
		require.NoError(t, err)
		defer b.Close()
		s, err := b.Subscribe("t", "s", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject),
			broker.WithFilter(func(queue.Message[string]) bool { return true }))
		require.NoError(t, err)
		ds := s.TryPoll(1)
		require.Len(t, ds, 1)
		require.NoError(t, s.Ack(ds[0].LeaseID))
		_, err = b.Publish(ctx, "t", "item-1", broker.WithDedupID("item-1"))
		require.NoError(t, err)
		require.Equal(t, 1, s.Stats().Visible, "the retry of the failed publish is queued")
	})
}

// TestDurablePublishRacingClose: a Publish that returns nil while Close
// runs has its message in the journal. One used to return nil for a
// message never stored when Close had already closed the queues (the
// refusal was read as "subscription gone").
func TestDurablePublishRacingClose(t *testing.T) {
	lost, published := 0, 0
	for round := range 40 {
		dir := t.TempDir()
		b, err := broker.Open(dir, queue.StringCodec(), broker.WithSync(broker.SyncNone))
		require.NoError(t, err)
		require.NoError(t, b.CreateTopic("t"))
		_, err = b.Subscribe("t", "s", broker.WithMaxQueue(1<<20), broker.WithFilter(func(queue.Message[string]) bool {
			runtime.Gosched() // widen the window between lookup and offer
			return true
		}))
		require.NoError(t, err)
		var mu sync.Mutex
		ok := map[string]bool{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for p := range 4 {
			wg.Go(func() {
				<-start
				for i := 0; ; i++ {
					payload := fmt.Sprintf("p%d-%d", p, i)
					if _, err := b.Publish(context.Background(), "t", payload); err != nil {
						assert.ErrorIs(t, err, queue.ErrClosed)
						return
					}
					mu.Lock()
					ok[payload] = true
					mu.Unlock()
				}
			})
		}
		close(start)
		for range 50 + round*20 {
			runtime.Gosched()
		}
		require.NoError(t, b.Close())
		wg.Wait()

		b, err = broker.Open(dir, queue.StringCodec())
		require.NoError(t, err)
		s, err := b.Subscription("t", "s")
		require.NoError(t, err)
		stored := map[string]bool{}
		for _, d := range s.TryPoll(1 << 20) {
			stored[d.Payload] = true
		}
		require.NoError(t, b.Close())
		for p := range ok {
			if !stored[p] {
				lost++
			}
		}
		published += len(ok)
	}
	require.Zero(t, lost, "of %d publishes that returned nil, %d are not in the journal", published, lost)
}

// TestDurableOversizedArgumentsChangeNothing: a cause or a dedup ID larger
// than a journal record used to change memory, then fail with the
// journal's own error and poison every later call until a reopen. Now a
// dedup ID over MaxDedupID is an invalid argument (nothing changes), and a
// cause's text is kept up to 4 KiB.
func TestDurableOversizedArgumentsChangeNothing(t *testing.T) {
	ctx := context.Background()
	d := openDur[string](t, queue.StringCodec())
	s := d.subscribe("t", "s")
	huge := strings.Repeat("x", 65<<20)

	_, err := d.Publish(ctx, "t", "a", broker.WithDedupID(huge))
	require.ErrorIs(t, err, queue.ErrInvalidArgument)
	require.Zero(t, s.Stats().Published)
	_, err = d.Publish(ctx, "t", "a", broker.WithDedupID(strings.Repeat("i", broker.MaxDedupID)))
	require.NoError(t, err, "an ID of MaxDedupID bytes is fine")

	ds := s.TryPoll(1)
	require.Len(t, ds, 1)
	require.NoError(t, s.Fail(ds[0].LeaseID, errors.New(huge)))
	d.publish("t", "b") // not poisoned
	require.NoError(t, d.CreateTopic("u"))

	d.restart()
	s = d.sub("t", "s")
	d.mock.Add(time.Hour) // past any retry delay
	ds = s.TryPoll(2)
	require.Len(t, ds, 2)
	for _, dl := range ds {
		require.NoError(t, s.Reject(dl.LeaseID, errors.New(huge)))
	}
	dls := d.DeadLetters()
	require.Len(t, dls, 2)
	for _, dl := range dls {
		require.LessOrEqual(t, len(dl.LastError), 4<<10)
		require.True(t, strings.HasPrefix(dl.LastError, "xxxx"))
		require.True(t, strings.HasSuffix(dl.LastError, "…"))
	}
	d.restart()
	require.Len(t, d.DeadLetters(), 2)
}

// TestDurableLargestMessageStillCompacts: the largest payload a durable
// broker accepts, failed with a long cause, used to make every compaction
// fail ("snapshot record of 67109900 bytes") for as long as it lived.
func TestDurableLargestMessageStillCompacts(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 64 MiB message several times")
	}
	ctx := context.Background()
	d := openDur[string](t, queue.StringCodec())
	s := d.subscribe("t", "s")
	n := 64 << 20
	for {
		_, err := d.Publish(ctx, "t", strings.Repeat("p", n), broker.WithDedupID(strings.Repeat("i", broker.MaxDedupID)))
		if err == nil {
			break
		}
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		n -= 1 << 10
	}
	ds := s.TryPoll(1)
	require.Len(t, ds, 1)
	require.NoError(t, s.Fail(ds[0].LeaseID, errors.New(strings.Repeat("e", 8<<10))))
	require.NoError(t, d.Compact())
	d.restart()
	st := d.sub("t", "s").Stats()
	require.Equal(t, 1, st.Visible+st.Delayed)
}

// TestDurableFarFutureTimesSurviveARestart: times were stored as int64 Unix
// nanoseconds, so a delay or TTL reaching past April 2262 wrapped around
// after a restart (delayed messages became visible at once; a 250-year TTL
// expired). They are now kept as the latest time the journal can hold.
func TestDurableFarFutureTimesSurviveARestart(t *testing.T) {
	const years250 = 250 * 365 * 24 * time.Hour
	d := openDur[string](t, queue.StringCodec()) // on a mock clock in 2026
	s := d.subscribe("t", "s")
	d.publish("t", "delay-250y", broker.WithDelay(years250))
	d.publish("t", "delay-max", broker.WithDelay(math.MaxInt64))
	d.publish("t", "ttl-250y", broker.WithTTL(years250))
	d.publish("t", "nack-max")
	ds := s.TryPoll(2)
	require.Len(t, ds, 2)
	require.Equal(t, "ttl-250y", ds[0].Payload)
	require.NoError(t, s.Release(ds[0].LeaseID))
	require.NoError(t, s.Nack(ds[1].LeaseID, math.MaxInt64))
	before := s.Stats()
	require.Equal(t, 3, before.Delayed)
	require.Equal(t, 1, before.Visible)

	d.restart()
	s = d.sub("t", "s")
	after := s.Stats()
	require.Equal(t, 3, after.Delayed, "still delayed after the restart")
	require.Equal(t, 1, after.Visible)
	require.Empty(t, d.DeadLetters(), "a 250-year TTL has not expired")
	d.mock.Add(200 * 365 * 24 * time.Hour)
	require.Equal(t, 3, s.Stats().Delayed)
	require.Equal(t, []string{"ttl-250y/1"}, peek(t, s))
}

// TestDurableDedupSurvivesAckAndCompaction: a dedup record that refers to
// its message's put (rather than repeating the envelope) still brings the
// original back after the message was acked, and across compactions,
// whether the message is still held or not.
func TestDurableDedupSurvivesAckAndCompaction(t *testing.T) {
	ctx := context.Background()
	d := openDur[string](t, queue.StringCodec())
	s := d.subscribe("t", "s")
	orig := map[string]queue.Message[string]{"a": d.publish("t", "acked", broker.WithDedupID("a")),
		"h": d.publish("t", "held", broker.WithDedupID("h"))}
	ds := s.TryPoll(1)
	require.Equal(t, "acked", ds[0].Payload)
	require.NoError(t, s.Ack(ds[0].LeaseID))
	check := func(when string) {
		t.Helper()
		for id, want := range orig {
			m, err := d.Publish(ctx, "t", "again", broker.WithDedupID(id))
			require.NoError(t, err)
			require.Equal(t, want.ID, m.ID, "%s: dedup ID %s", when, id)
			require.True(t, want.PublishedAt.Equal(m.PublishedAt), "%s: dedup ID %s", when, id)
			if id == "h" { // still held: the original itself, restored with the queue
				require.Equal(t, "held", m.Payload, "%s: dedup ID %s", when, id)
			}
		}
		require.Equal(t, []string{"held/1"}, peek(t, d.sub("t", "s")), when)
	}
	d.restart()
	check("after a restart")
	require.NoError(t, d.Compact())
	d.restart()
	check("after a compaction and a restart")
}

// TestDurableDedupRecordAfterCompactionOfAnAckedMessage: a dedup record
// that refers to its message's put instead of repeating the envelope must
// not outlive that put. Here the message is acked, and the journal
// compacted (dropping its put), between the offer and the dedup record:
// the crash test found a journal Open then refused ("dedup record of
// message ..., which no earlier record holds").
func TestDurableDedupRecordAfterCompactionOfAnAckedMessage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("t"))
	a, err := b.Subscribe("t", "a")
	require.NoError(t, err)
	_, err = b.Subscribe("t", "b", broker.WithFilter(func(queue.Message[string]) bool {
		// Runs after "a" took the message, before the dedup record.
		ds := a.TryPoll(1)
		require.Len(t, ds, 1)
		require.NoError(t, a.Ack(ds[0].LeaseID))
		require.NoError(t, b.Compact())
		return false
	}))
	require.NoError(t, err)
	first, err := b.Publish(ctx, "t", "item", broker.WithDedupID("i"))
	require.NoError(t, err)
	require.NoError(t, b.Close())

	b, err = broker.Open(dir, queue.StringCodec())
	require.NoError(t, err, "the journal opens")
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	again, err := b.Publish(ctx, "t", "item again", broker.WithDedupID("i"))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID, "the dedup ID is remembered")
}
