package journal

// Compaction: Rewrite replaces the segment with a snapshot. Helpers are
// journal_test.go's.

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRewrite(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			for _, b := range bodies(0, 50) {
				j.Append(b)
			}
			require.NoError(t, j.Commit())

			snap := [][]byte{[]byte("snapshot-a"), []byte("snapshot-b")}
			require.NoError(t, j.Rewrite(func(emit func([]byte)) error {
				for _, b := range snap {
					emit(b)
				}
				return nil
			}))
			require.Equal(t, int64(len(frames(snap))), j.Size())
			require.NoFileExists(t, segName(dir, 1))
			data, err := os.ReadFile(segName(dir, 2))
			require.NoError(t, err)
			old := headed(1, bodies(0, 50))
			require.Equal(t, successor(2, old, snap), data, "the snapshot is on disk, sealed by its end record, when Rewrite returns")
			h, ok, err := parseHeader(data[8:hframe])
			require.True(t, ok)
			require.NoError(t, err)
			require.Equal(t, header{seq: 2, prev: 1, prevLen: uint64(len(old)), prevCRC: crc32.Checksum(old, castagnoli), sealed: true}, h,
				"its header names the segment it supersedes, with that one's size and checksum")

			j.Append([]byte("after-1"))
			j.Append([]byte("after-2"))
			require.NoError(t, j.Commit())
			require.NoError(t, j.Close())

			got, info := replayAll(t, dir)
			require.Equal(t, append(bytes2(snap), []byte("after-1"), []byte("after-2")), got)
			require.Equal(t, 2, info.Segment)
			require.Equal(t, 4, info.Records)
			require.Zero(t, info.TruncatedBytes)
			require.ElementsMatch(t, []string{"LOCK", "seg-00000002.log"}, listDir(t, dir))
		})
	}
}

func TestRewriteRepeatedly(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	for i := range 5 {
		j.Append(body(i))
		require.NoError(t, j.Commit())
		require.NoError(t, j.Rewrite(func(emit func([]byte)) error {
			emit([]byte(fmt.Sprintf("state after %d", i)))
			return nil
		}))
	}
	require.NoError(t, j.Close())
	got, info := replayAll(t, dir)
	require.Equal(t, [][]byte{[]byte("state after 4")}, got)
	require.Equal(t, 6, info.Segment)
	require.ElementsMatch(t, []string{"LOCK", "seg-00000006.log"}, listDir(t, dir))
}

func TestRewriteEmptySnapshot(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	j.Append(body(0))
	require.NoError(t, j.Commit())
	require.NoError(t, j.Rewrite(func(func([]byte)) error { return nil }))
	require.Zero(t, j.Size())
	require.NoError(t, j.Close())
	got, info := replayAll(t, dir)
	require.Empty(t, got)
	require.Equal(t, Info{Segment: 2, Bytes: int64(hsize)}, info)
}

// Records appended but not yet written when Rewrite runs are covered by the
// snapshot: they are dropped, and their Commit returns nil.
func TestRewriteDropsUnwrittenRecords(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	j.Append([]byte("written"))
	require.NoError(t, j.Commit())
	j.Append([]byte("unwritten"))
	require.NoError(t, j.Rewrite(func(emit func([]byte)) error {
		emit([]byte("snap"))
		return nil
	}))
	require.NoError(t, j.Commit())
	require.Equal(t, int64(8+len("snap")), j.Size())
	j.Append([]byte("later")) // the dropped record does not come back with it
	require.NoError(t, j.Commit())
	require.NoError(t, j.Close())
	got, _ := replayAll(t, dir)
	require.Equal(t, [][]byte{[]byte("snap"), []byte("later")}, got)
}

func TestRewriteSnapshotErrorIsNotSticky(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	j.Append(body(0))
	require.NoError(t, j.Commit())

	boom := errors.New("boom")
	err := j.Rewrite(func(emit func([]byte)) error {
		emit([]byte("partial"))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.ElementsMatch(t, []string{"LOCK", "seg-00000001.log"}, listDir(t, dir), "the .tmp is removed")

	// The journal carries on in the old segment.
	j.Append(body(1))
	require.NoError(t, j.Commit())
	require.NoError(t, j.Close())
	got, info := replayAll(t, dir)
	require.Equal(t, bodies(0, 2), got)
	require.Equal(t, 1, info.Segment)
}

func TestRewriteAfterClose(t *testing.T) {
	j, _, _ := open(t, t.TempDir(), SyncAlways, 0)
	require.NoError(t, j.Close())
	called := false
	err := j.Rewrite(func(func([]byte)) error { called = true; return nil })
	require.ErrorIs(t, err, ErrClosed)
	require.False(t, called)
}

// Rewrite's emit frames any body, but Scan stops at a frame of length 0
// (or over MaxRecord): an empty record in a snapshot silently cuts off the
// rest of the snapshot at the next Open.
func TestRewriteRejectsInvalidSnapshotRecord(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	snap := [][]byte{[]byte("a"), {}, []byte("b")}
	err := j.Rewrite(func(emit func([]byte)) error {
		for _, b := range snap {
			emit(b)
		}
		return nil
	})
	require.NoError(t, j.Close())
	if err != nil {
		return // refusing the snapshot is a fine answer
	}
	got, info := replayAll(t, dir)
	require.Zero(t, info.TruncatedBytes, "Rewrite reported success but the snapshot does not replay whole")
	require.Equal(t, snap, got)
}
