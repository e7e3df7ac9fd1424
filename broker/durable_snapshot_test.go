package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// TestDurableCutSnapshotIsRefused: a compaction's snapshot cut anywhere
// inside (a damaged disk, a bad copy: no crash cuts one, since it is synced
// before its rename) used to open as a torn tail of a few bytes, losing
// every message and dedup ID past the cut: republishing a lost ID queued a
// new copy. Now Open refuses it with a *CorruptError and changes no byte;
// a cut after the snapshot, in what was appended since, is still a torn
// tail. Salvage keeps what is whole of the snapshot, and says so.
func TestDurableCutSnapshotIsRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.StringCodec(), broker.WithSync(broker.SyncNone), broker.WithCompactMin(-1))
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("t"))
	_, err = b.Subscribe("t", "s")
	require.NoError(t, err)
	const n = 10000
	for i := range n {
		_, err := b.Publish(ctx, "t", fmt.Sprintf("m%05d", i), broker.WithDedupID(fmt.Sprintf("id%d", i)))
		require.NoError(t, err)
	}
	require.NoError(t, b.Compact())
	require.NoError(t, b.Sync())
	seg, snapEnd := segFile(t, dir)
	_, err = b.Publish(ctx, "t", "after", broker.WithDedupID("after"))
	require.NoError(t, err)
	require.NoError(t, b.Close())
	orig, err := os.ReadFile(seg)
	require.NoError(t, err)
	require.Greater(t, int64(len(orig)), snapEnd)

	rng := rand.New(rand.NewPCG(39, 1))
	cuts := []int64{snapEnd / 2, snapEnd - 1, 1}
	for range 20 {
		cuts = append(cuts, 1+rng.Int64N(snapEnd-1))
	}
	for _, cut := range cuts {
		require.NoError(t, os.WriteFile(seg, orig[:cut], 0o644))
		_, err := broker.Open(dir, queue.StringCodec())
		var ce *broker.CorruptError
		require.ErrorAs(t, err, &ce, "cut at %d of a %d-byte snapshot", cut, snapEnd)
		require.ErrorIs(t, err, broker.ErrCorrupt)
		require.Equal(t, seg, ce.Path)
		after, err := os.ReadFile(seg)
		require.NoError(t, err)
		require.Equal(t, orig[:cut], after, "a refused Open changes no byte")
	}

	// A cut in what was appended after the snapshot is a torn tail.
	require.NoError(t, os.WriteFile(seg, orig[:len(orig)-1], 0o644))
	r, err := broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	require.Positive(t, r.Recovery().TruncatedBytes)
	s, err := r.Subscription("t", "s")
	require.NoError(t, err)
	require.Equal(t, n, s.Stats().Visible, "every message of the snapshot; the torn publish is gone")
	m, err := r.Publish(ctx, "t", "again", broker.WithDedupID(fmt.Sprintf("id%d", n-1)))
	require.NoError(t, err)
	require.Equal(t, "m09999", m.Payload, "the dedup ID survived: the first message is returned")
	require.NoError(t, r.Close())

	// Salvage keeps the whole records of a cut snapshot and reseals them.
	require.NoError(t, os.WriteFile(seg, orig[:snapEnd/2], 0o644))
	si, err := broker.Salvage(dir)
	require.NoError(t, err)
	require.True(t, si.Resealed)
	require.NotEmpty(t, si.Backup)
	backup, err := os.ReadFile(si.Backup)
	require.NoError(t, err)
	require.True(t, bytes.Equal(orig[:snapEnd/2], backup), "the backup is the segment as it was")
	r, err = broker.Open(dir, queue.StringCodec())
	require.NoError(t, err)
	defer r.Close()
	s, err = r.Subscription("t", "s")
	require.NoError(t, err)
	kept := s.Stats().Visible
	require.Positive(t, kept)
	require.Less(t, kept, n)
}
