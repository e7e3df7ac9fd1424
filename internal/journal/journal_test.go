package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// body is the i-th test record: distinct, and of varying length.
func body(i int) []byte {
	return []byte(fmt.Sprintf("record-%04d-%s", i, strings.Repeat("x", i%7)))
}

func bodies(from, to int) [][]byte {
	var out [][]byte
	for i := from; i < to; i++ {
		out = append(out, body(i))
	}
	return out
}

func frames(bs [][]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = AppendFrame(out, b)
	}
	return out
}

func segName(dir string, n int) string {
	return filepath.Join(dir, fmt.Sprintf("seg-%08d.log", n))
}

// open opens dir, collecting what it replays; the journal is closed at the
// end of the test if the test has not closed it.
func open(t *testing.T, dir string, mode Mode, minCompact int64) (*Journal, Info, [][]byte) {
	t.Helper()
	var got [][]byte
	j, info, err := Open(dir, mode, minCompact, func(b []byte) error {
		got = append(got, bytes.Clone(b))
		return nil
	})
	require.NoError(t, err)
	require.NotNil(t, j)
	t.Cleanup(func() { _ = j.Close() })
	return j, info, got
}

// replayAll opens dir, closes it again and returns what it replayed.
func replayAll(t *testing.T, dir string) ([][]byte, Info) {
	t.Helper()
	j, info, got := open(t, dir, SyncNone, 0)
	require.NoError(t, j.Close())
	return got, info
}

// write opens dir, appends bs, commits and closes.
func write(t *testing.T, dir string, mode Mode, bs [][]byte) {
	t.Helper()
	j, _, _ := open(t, dir, mode, 0)
	for _, b := range bs {
		j.Append(b)
	}
	require.NoError(t, j.Commit())
	require.NoError(t, j.Close())
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

var modes = []struct {
	name string
	mode Mode
}{{"SyncAlways", SyncAlways}, {"SyncNone", SyncNone}}

func TestAppendFrameLayout(t *testing.T) {
	b := []byte("hello")
	fr := AppendFrame([]byte{0xAA}, b)
	require.Len(t, fr, 1+8+len(b))
	require.Equal(t, byte(0xAA), fr[0], "AppendFrame appends to dst")
	require.Equal(t, uint32(len(b)), binary.LittleEndian.Uint32(fr[1:]))
	require.Equal(t, uint32(0x9a71bb4c), binary.LittleEndian.Uint32(fr[5:]), "CRC32C (Castagnoli) of the body")
	require.Equal(t, b, fr[9:])
}

func TestScan(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		off, err := Scan(nil, func([]byte) error { t.Fatal("called"); return nil })
		require.NoError(t, err)
		require.Zero(t, off)
	})
	t.Run("whole frames", func(t *testing.T) {
		want := bodies(0, 10)
		data := frames(want)
		var got [][]byte
		off, err := Scan(data, func(b []byte) error { got = append(got, bytes.Clone(b)); return nil })
		require.NoError(t, err)
		require.Equal(t, len(data), off)
		require.Equal(t, want, got)
	})
	t.Run("fn error stops at the refused frame", func(t *testing.T) {
		bs := bodies(0, 5)
		data := frames(bs)
		boom := errors.New("boom")
		calls := 0
		off, err := Scan(data, func([]byte) error {
			calls++
			if calls == 3 {
				return boom
			}
			return nil
		})
		require.ErrorIs(t, err, ErrCorrupt)
		require.ErrorIs(t, err, boom)
		require.Equal(t, 3, calls)
		require.Equal(t, len(frames(bs[:2])), off, "offset of the refused frame")
	})
	t.Run("length over MaxRecord is a torn tail", func(t *testing.T) {
		data := frames(bodies(0, 2))
		good := len(data)
		data = binary.LittleEndian.AppendUint32(data, MaxRecord+1)
		data = binary.LittleEndian.AppendUint32(data, 0)
		off, err := Scan(data, func([]byte) error { return nil })
		require.NoError(t, err)
		require.Equal(t, good, off)
	})
	t.Run("length field near 4GiB does not overflow", func(t *testing.T) {
		data := binary.LittleEndian.AppendUint32(nil, ^uint32(0))
		data = binary.LittleEndian.AppendUint32(data, 0)
		off, err := Scan(data, func([]byte) error { t.Fatal("called"); return nil })
		require.NoError(t, err)
		require.Zero(t, off)
	})
}

func TestRoundTrip(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			const n = 100
			want := bodies(0, n)

			j, info, got := open(t, dir, m.mode, 0)
			require.Empty(t, got)
			require.Equal(t, Info{Segment: 1}, info)
			for _, b := range want {
				j.Append(b)
			}
			require.Equal(t, int64(len(frames(want))), j.Size(), "Size counts records not yet written")
			require.Zero(t, fileSize(t, segName(dir, 1)), "Append alone does not write")
			require.NoError(t, j.Commit())
			// Commit wrote the records (whatever the mode): read the file behind
			// the open journal's back.
			data, err := os.ReadFile(segName(dir, 1))
			require.NoError(t, err)
			require.Equal(t, frames(want), data)
			require.NoError(t, j.Close())

			got, info = replayAll(t, dir)
			require.Equal(t, want, got)
			require.Equal(t, n, info.Records)
			require.Zero(t, info.TruncatedBytes)
			require.Equal(t, 1, info.Segment)
			require.Equal(t, int64(len(frames(want))), info.Bytes)
			require.Equal(t, info.Bytes, fileSize(t, segName(dir, 1)))
			require.ElementsMatch(t, []string{"LOCK", "seg-00000001.log"}, listDir(t, dir))
		})
	}
}

func TestReopenAppendsAfterExistingRecords(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, SyncAlways, bodies(0, 3))
	j, info, got := open(t, dir, SyncAlways, 0)
	require.Equal(t, bodies(0, 3), got)
	require.Equal(t, int64(len(frames(bodies(0, 3)))), j.Size())
	require.Equal(t, info.Bytes, j.Size())
	j.Append(body(3))
	j.Append(body(4))
	require.NoError(t, j.Sync())
	require.NoError(t, j.Close())

	got, info = replayAll(t, dir)
	require.Equal(t, bodies(0, 5), got)
	require.Equal(t, 5, info.Records)
}

func TestCloseWritesUncommittedRecords(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			j.Append(body(0))
			j.Append(body(1))
			require.NoError(t, j.Close())
			got, _ := replayAll(t, dir)
			require.Equal(t, bodies(0, 2), got)
		})
	}
}

func TestOpenRejectsUnknownMode(t *testing.T) {
	dir := t.TempDir()
	j, _, err := Open(dir, SyncNone+1, 0, func([]byte) error { return nil })
	require.Error(t, err)
	require.Nil(t, j)
	// Nothing was locked.
	j2, _, _ := open(t, dir, SyncNone, 0)
	require.NoError(t, j2.Close())
}

func TestOpenCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	j, info, got := open(t, dir, SyncAlways, 0)
	require.Empty(t, got)
	require.Equal(t, Info{Segment: 1}, info)
	j.Append(body(0))
	require.NoError(t, j.Close())
	got, _ = replayAll(t, dir)
	require.Equal(t, bodies(0, 1), got)
}

func TestTornTailAtEveryOffset(t *testing.T) {
	src := t.TempDir()
	const k = 5
	all := bodies(0, k)
	all[k-1] = []byte("the last record, long enough to tear in many places")
	write(t, src, SyncNone, all)
	full, err := os.ReadFile(segName(src, 1))
	require.NoError(t, err)
	start := len(frames(all[:k-1]))
	require.Equal(t, start+8+len(all[k-1]), len(full))

	for l := start; l < len(full); l++ {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(segName(dir, 1), full[:l], 0o644))

		j, info, got := open(t, dir, SyncNone, 0)
		require.Equal(t, all[:k-1], got, "length %d", l)
		require.Equal(t, k-1, info.Records, "length %d", l)
		require.Equal(t, int64(l-start), info.TruncatedBytes, "length %d", l)
		require.Equal(t, int64(start), info.Bytes, "length %d", l)
		require.Equal(t, int64(start), fileSize(t, segName(dir, 1)), "truncated on disk, length %d", l)

		j.Append([]byte("after the tear"))
		require.NoError(t, j.Commit())
		require.NoError(t, j.Close())

		got, info = replayAll(t, dir)
		require.Equal(t, append(bytes2(all[:k-1]), []byte("after the tear")), got, "length %d", l)
		require.Zero(t, info.TruncatedBytes, "length %d", l)
	}
}

// bytes2 copies a slice of records so that appending to it leaves the
// original alone.
func bytes2(bs [][]byte) [][]byte { return append([][]byte(nil), bs...) }

func TestCorruptTail(t *testing.T) {
	src := t.TempDir()
	const k = 4
	all := bodies(0, k)
	write(t, src, SyncNone, all)
	full, err := os.ReadFile(segName(src, 1))
	require.NoError(t, err)
	start := len(frames(all[:k-1]))

	flip := func(at int, mask byte) func([]byte) []byte {
		return func(d []byte) []byte { d[at] ^= mask; return d }
	}
	for name, tc := range map[string]struct {
		mangle func([]byte) []byte
		keep   int // records before the tail that is cut
	}{
		"body first byte":       {flip(start+8, 0x01), k - 1},
		"body last byte":        {flip(len(full)-1, 0x80), k - 1},
		"crc":                   {flip(start+4, 0x10), k - 1},
		"crc high byte":         {flip(start+7, 0xFF), k - 1},
		"length one more":       {flip(start, 0x01), k - 1},   // runs past the end
		"length much more":      {flip(start+2, 0x01), k - 1}, // 64 KiB more
		"length high bit":       {flip(start+3, 0x80), k - 1}, // over MaxRecord
		"length zero":           {func(d []byte) []byte { copy(d[start:], make([]byte, 4)); return d }, k - 1},
		"length one less":       {func(d []byte) []byte { d[start]--; return d }, k - 1}, // checksum fails
		"zero-filled tail":      {func(d []byte) []byte { return append(d, make([]byte, 4096)...) }, k},
		"zero-filled last page": {func(d []byte) []byte { clear(d[start:]); return append(d, make([]byte, 4096)...) }, k - 1},
		"garbage tail":          {func(d []byte) []byte { return append(d, bytes.Repeat([]byte{0xFF}, 100)...) }, k},
		// Nothing valid after the bad frame: still a tail, however long.
		"bad frame, then a torn one": {func(d []byte) []byte { d[start-1] ^= 0x08; return d[:len(d)-1] }, k - 2},
		"bad frame, then zeros":      {func(d []byte) []byte { d[start-1] ^= 0x08; clear(d[start:]); return d }, k - 2},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			data := tc.mangle(bytes.Clone(full))
			require.NoError(t, os.WriteFile(segName(dir, 1), data, 0o644))
			wantRecs := all[:tc.keep]
			good := len(frames(wantRecs))

			j, info, got := open(t, dir, SyncAlways, 0)
			require.Equal(t, wantRecs, got)
			require.Equal(t, len(wantRecs), info.Records)
			require.Equal(t, int64(len(data)-good), info.TruncatedBytes)
			require.Equal(t, int64(good), info.Bytes)
			require.Equal(t, int64(good), fileSize(t, segName(dir, 1)))

			j.Append([]byte("next"))
			require.NoError(t, j.Commit())
			require.NoError(t, j.Close())
			got, info = replayAll(t, dir)
			require.Equal(t, append(bytes2(wantRecs), []byte("next")), got)
			require.Zero(t, info.TruncatedBytes)
		})
	}
}

// A bad frame in the middle, with whole frames after it, is corruption, not
// a torn tail: Open refuses, cuts nothing and releases the lock.
func TestCorruptMiddleRefusesOpen(t *testing.T) {
	dir := t.TempDir()
	all := bodies(0, 6)
	data := frames(all)
	start := len(frames(all[:2]))
	data[start+8] ^= 0x40 // first body byte of record 2
	require.NoError(t, os.WriteFile(segName(dir, 1), data, 0o644))

	var got [][]byte
	j, info, err := Open(dir, SyncAlways, 0, func(b []byte) error { got = append(got, bytes.Clone(b)); return nil })
	require.ErrorIs(t, err, ErrCorrupt)
	require.Nil(t, j)
	require.Equal(t, Info{}, info)
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, segName(dir, 1), ce.Path)
	require.Equal(t, int64(start), ce.Offset)
	require.Contains(t, ce.Reason, "checksum")
	require.Equal(t, all[:2], got, "the records before it were replayed")
	require.Equal(t, data, mustRead(t, segName(dir, 1)), "nothing cut")

	// Released: Salvage can take the directory, and then Open succeeds.
	sinfo, err := Salvage(dir, nil)
	require.NoError(t, err)
	require.Equal(t, int64(len(data)-start), sinfo.DroppedBytes)
	got, info = replayAll(t, dir)
	require.Equal(t, all[:2], got)
	require.Zero(t, info.TruncatedBytes)
}

func TestReplayErrorIsCorruptAndReleasesLock(t *testing.T) {
	dir := t.TempDir()
	all := bodies(0, 5)
	write(t, dir, SyncAlways, all)
	before, err := os.ReadFile(segName(dir, 1))
	require.NoError(t, err)

	refuse := errors.New("cannot apply")
	calls := 0
	j, info, err := Open(dir, SyncAlways, 0, func([]byte) error {
		calls++
		if calls == 3 {
			return refuse
		}
		return nil
	})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, err, refuse)
	require.ErrorContains(t, err, fmt.Sprintf("at offset %d", len(frames(all[:2]))))
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, segName(dir, 1), ce.Path)
	require.Equal(t, int64(len(frames(all[:2]))), ce.Offset)
	require.Equal(t, refuse, ce.Err)
	require.Nil(t, j)
	require.Equal(t, Info{}, info)
	require.Equal(t, 3, calls)

	after, err := os.ReadFile(segName(dir, 1))
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused record is not cut off")

	got, info := replayAll(t, dir) // the lock was released
	require.Equal(t, all, got)
	require.Equal(t, len(all), info.Records)
}

func TestOpenLocked(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	j.Append(body(0))
	require.NoError(t, j.Commit())

	replayed := false
	j2, _, err := Open(dir, SyncAlways, 0, func([]byte) error { replayed = true; return nil })
	require.ErrorIs(t, err, ErrLocked)
	require.Nil(t, j2)
	require.False(t, replayed, "a locked directory is not replayed")

	// The failed Open did not disturb the open journal.
	j.Append(body(1))
	require.NoError(t, j.Commit())
	require.NoError(t, j.Close())

	got, _ := replayAll(t, dir)
	require.Equal(t, bodies(0, 2), got)
}

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
			require.Equal(t, frames(snap), data, "the snapshot is on disk when Rewrite returns")

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
	require.Equal(t, Info{Segment: 2}, info)
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

func TestOpenRemovesTmp(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, SyncAlways, bodies(0, 3))
	// An interrupted Rewrite: a half-written next segment.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "seg-00000002.tmp"), frames([][]byte{[]byte("half")}), 0o644))
	got, info := replayAll(t, dir)
	require.Equal(t, bodies(0, 3), got)
	require.Equal(t, 1, info.Segment)
	require.ElementsMatch(t, []string{"LOCK", "seg-00000001.log"}, listDir(t, dir))
}

// A crash after Rewrite renamed the new segment into place but before it
// removed the old one: Open replays only the newest and removes the rest.
func TestOpenReplaysNewestSegmentOnly(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	for _, b := range bodies(0, 10) {
		j.Append(b)
	}
	require.NoError(t, j.Commit())
	old, err := os.ReadFile(segName(dir, 1))
	require.NoError(t, err)
	require.NoError(t, j.Rewrite(func(emit func([]byte)) error {
		emit([]byte("snap"))
		return nil
	}))
	j.Append([]byte("after"))
	require.NoError(t, j.Close())
	require.NoError(t, os.WriteFile(segName(dir, 1), old, 0o644))
	// An unrelated file is left alone.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644))

	got, info := replayAll(t, dir)
	require.Equal(t, [][]byte{[]byte("snap"), []byte("after")}, got)
	require.Equal(t, 2, info.Segment)
	require.ElementsMatch(t, []string{"LOCK", "notes.txt", "seg-00000002.log"}, listDir(t, dir))
}

func TestOpenPicksHighestNumberedSegment(t *testing.T) {
	dir := t.TempDir()
	for n, recs := range map[int][][]byte{3: bodies(0, 1), 9: bodies(1, 2), 10: bodies(2, 4)} {
		require.NoError(t, os.WriteFile(segName(dir, n), frames(recs), 0o644))
	}
	got, info := replayAll(t, dir)
	require.Equal(t, bodies(2, 4), got)
	require.Equal(t, 10, info.Segment)
	require.ElementsMatch(t, []string{"LOCK", "seg-00000010.log"}, listDir(t, dir))
}

func TestDue(t *testing.T) {
	rec := []byte("0123456789ab") // a 20-byte frame
	const frame = 20

	t.Run("threshold", func(t *testing.T) {
		j, _, _ := open(t, t.TempDir(), SyncNone, 5*frame)
		require.False(t, j.Due(), "empty")
		for range 4 {
			j.Append(rec)
		}
		require.Equal(t, int64(4*frame), j.Size())
		require.False(t, j.Due(), "below minCompact")
		j.Append(rec)
		require.True(t, j.Due(), "size == minCompact (pending records count)")
		require.NoError(t, j.Commit())
		require.True(t, j.Due())

		// After a Rewrite to 4 frames, due again at 8 frames (2x), not at
		// minCompact.
		require.NoError(t, j.Rewrite(func(emit func([]byte)) error {
			for range 4 {
				emit(rec)
			}
			return nil
		}))
		require.Equal(t, int64(4*frame), j.Size())
		require.False(t, j.Due())
		for range 3 {
			j.Append(rec)
		}
		require.Equal(t, int64(7*frame), j.Size())
		require.False(t, j.Due(), "over minCompact but under twice the base")
		j.Append(rec)
		require.True(t, j.Due(), "twice the base")

		// After a Rewrite to 1 frame, minCompact rules again.
		require.NoError(t, j.Rewrite(func(emit func([]byte)) error { emit(rec); return nil }))
		require.False(t, j.Due())
		for range 3 {
			j.Append(rec)
		}
		require.False(t, j.Due(), "twice the base but under minCompact")
		j.Append(rec)
		require.True(t, j.Due())

		require.NoError(t, j.Close())
		require.False(t, j.Due(), "closed")
	})

	t.Run("base is the size at Open", func(t *testing.T) {
		dir := t.TempDir()
		recs := make([][]byte, 6)
		for i := range recs {
			recs[i] = rec
		}
		write(t, dir, SyncNone, recs)
		j, _, _ := open(t, dir, SyncNone, frame)
		require.False(t, j.Due())
		for range 5 {
			j.Append(rec)
		}
		require.False(t, j.Due())
		j.Append(rec)
		require.True(t, j.Due())
	})

	for _, minCompact := range []int64{0, -1} {
		t.Run(fmt.Sprintf("minCompact %d never", minCompact), func(t *testing.T) {
			j, _, _ := open(t, t.TempDir(), SyncNone, minCompact)
			for range 100 {
				j.Append(rec)
			}
			require.False(t, j.Due())
			require.NoError(t, j.Commit())
			require.False(t, j.Due())
		})
	}

	t.Run("a failed Rewrite waits for another doubling", func(t *testing.T) {
		j, _, _ := open(t, t.TempDir(), SyncNone, 2*frame)
		for range 3 {
			j.Append(rec)
		}
		require.True(t, j.Due())
		require.Error(t, j.Rewrite(func(func([]byte)) error { return errors.New("boom") }))
		require.False(t, j.Due(), "base is now 3 frames")
		for range 2 {
			j.Append(rec)
		}
		require.False(t, j.Due(), "5 frames < 2*3")
		j.Append(rec)
		require.True(t, j.Due(), "6 frames")
	})

	t.Run("not after an error", func(t *testing.T) {
		j, _, _ := open(t, t.TempDir(), SyncNone, 1)
		j.Append(rec)
		require.True(t, j.Due())
		j.Append(nil)
		require.False(t, j.Due())
	})
}

func TestConcurrentAppendCommit(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			const workers, each = 8, 200
			var wg sync.WaitGroup
			errs := make(chan error, workers*each)
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						j.Append([]byte(fmt.Sprintf("w%d-%d", w, i)))
						if err := j.Commit(); err != nil {
							errs <- err
						}
						_ = j.Size()
						_ = j.Due()
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.NoError(t, j.Close())

			got, info := replayAll(t, dir)
			require.Equal(t, workers*each, info.Records)
			require.Zero(t, info.TruncatedBytes)
			next := make([]int, workers)
			for _, b := range got {
				var w, i int
				_, err := fmt.Sscanf(string(b), "w%d-%d", &w, &i)
				require.NoError(t, err, "record %q", b)
				require.Less(t, w, workers)
				require.Equal(t, next[w], i, "worker %d's records in order, each once", w)
				next[w]++
			}
			for w := range workers {
				require.Equal(t, each, next[w], "worker %d", w)
			}
		})
	}
}

// Committers that share a flush: each Commit returns only once its own
// record is written, which the file shows right then.
func TestCommitCoversOwnRecord(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncNone, 0)
	const workers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for w := range workers {
		wg.Go(func() {
			for i := range 20 {
				b := []byte(fmt.Sprintf("w%d-%d", w, i))
				j.Append(b)
				if err := j.Commit(); err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					return
				}
				data, err := os.ReadFile(segName(dir, 1))
				if err == nil && !bytes.Contains(data, AppendFrame(nil, b)) {
					err = fmt.Errorf("%s not in the file after its Commit", b)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, failures)
}

func TestAfterClose(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			j.Append(body(0))
			require.NoError(t, j.Close())
			require.NoError(t, j.Close(), "Close twice returns nil")

			// An Append after Close is dropped. (What Commit then returns is
			// TestCommitAfterCloseReportsErrClosed's business.)
			j.Append(body(1))
			require.Equal(t, int64(8+len(body(0))), j.Size(), "the dropped record is not counted")
			require.False(t, j.Due())
			called := false
			require.ErrorIs(t, j.Rewrite(func(func([]byte)) error { called = true; return nil }), ErrClosed)
			require.False(t, called)
			require.NoError(t, j.Close())

			got, _ := replayAll(t, dir)
			require.Equal(t, bodies(0, 1), got)
		})
	}
}

func TestInvalidAppendIsSticky(t *testing.T) {
	for name, bad := range map[string][]byte{
		"nil":      nil,
		"empty":    {},
		"too long": make([]byte, MaxRecord+1),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, SyncAlways, 0)
			j.Append(body(0))
			require.NoError(t, j.Commit())

			j.Append(bad)
			err := j.Commit()
			require.ErrorContains(t, err, fmt.Sprintf("record of %d bytes", len(bad)))
			require.Equal(t, err, j.Sync(), "sticky")
			j.Append(body(1)) // dropped
			require.Equal(t, err, j.Commit(), "sticky")
			require.Equal(t, int64(8+len(body(0))), j.Size())
			require.Equal(t, err, j.Rewrite(func(func([]byte)) error { return nil }))
			require.Equal(t, err, j.Close(), "Close reports it")
			require.NoError(t, j.Close())

			// Close released the directory; what was committed is there.
			got, info := replayAll(t, dir)
			require.Equal(t, bodies(0, 1), got)
			require.Equal(t, 1, info.Segment)
		})
	}
}

// A frame of exactly MaxRecord is whole, one more is not, checksum or no.
// (Only Scan: Append's copy and the fsync of 64 MiB take seconds under
// -race. TestInvalidAppendIsSticky has Append's MaxRecord+1.)
func TestScanMaxRecordBody(t *testing.T) {
	over := make([]byte, 8+MaxRecord+1)
	binary.LittleEndian.PutUint32(over, MaxRecord+1)
	binary.LittleEndian.PutUint32(over[4:], crc32.Checksum(over[8:], castagnoli))
	off, err := Scan(over, func([]byte) error { t.Fatal("called"); return nil })
	require.NoError(t, err)
	require.Zero(t, off)
	over = nil

	data := make([]byte, 8+MaxRecord, 8+MaxRecord+8+5)
	binary.LittleEndian.PutUint32(data, MaxRecord)
	binary.LittleEndian.PutUint32(data[4:], crc32.Checksum(data[8:], castagnoli))
	data = AppendFrame(data, []byte("small"))
	var lens []int
	off, err = Scan(data, func(b []byte) error { lens = append(lens, len(b)); return nil })
	require.NoError(t, err)
	require.Equal(t, len(data), off)
	require.Equal(t, []int{MaxRecord, 5}, lens)
}

func FuzzScan(f *testing.F) {
	valid := frames(bodies(0, 4))
	f.Add([]byte{})
	f.Add(valid)
	f.Add(valid[:len(valid)-3])
	f.Add(append(bytes.Clone(valid), make([]byte, 64)...))
	f.Add(append(bytes.Clone(valid), 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0))
	f.Add(AppendFrame(nil, []byte{0}))
	f.Add([]byte{1, 0, 0, 0})
	corrupt := bytes.Clone(valid)
	corrupt[len(corrupt)/2] ^= 1
	f.Add(corrupt)                                 // whole frames after the bad one
	f.Add(corrupt[:len(frames(bodies(0, 3)))+3])   // only a torn frame after it
	f.Add(append(make([]byte, 16), valid[:20]...)) // zeros, then a whole frame
	f.Add(append(make([]byte, 5000), valid...))    // more than a page of zeros

	f.Fuzz(func(t *testing.T, data []byte) {
		var got [][]byte
		off, err := Scan(data, func(b []byte) error {
			got = append(got, bytes.Clone(b))
			return nil
		})
		require.GreaterOrEqual(t, off, 0)
		require.LessOrEqual(t, off, len(data))
		for _, b := range got {
			require.NotEmpty(t, b)
			require.LessOrEqual(t, len(b), MaxRecord)
		}
		// The bodies, framed again, are exactly the prefix Scan accepted.
		require.True(t, bytes.Equal(data[:off], frames(got)), "off %d, bodies %q", off, got)
		// It ends at a bad frame (or the end). With a valid frame anywhere
		// after it, that is corruption; without, a torn tail.
		require.False(t, refValid(data, off))
		validAfter := -1
		for p := off + 1; p < len(data) && validAfter < 0; p++ {
			if refValid(data, p) {
				validAfter = p
			}
		}
		if validAfter < 0 {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, ErrCorrupt)
			var ce *CorruptError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, int64(off), ce.Offset)
			require.NoError(t, ce.Err)
			require.True(t, strings.HasSuffix(ce.Reason, fmt.Sprintf(" at offset %d", validAfter)), "reason %q, next valid frame at %d", ce.Reason, validAfter)
		}

		var again [][]byte
		off2, err := Scan(data[:off], func(b []byte) error {
			again = append(again, bytes.Clone(b))
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, off, off2)
		require.Equal(t, got, again)

		// An error from fn at the last frame reports that frame's offset.
		if len(got) > 0 {
			boom := errors.New("boom")
			n := 0
			off3, err := Scan(data, func([]byte) error {
				n++
				if n == len(got) {
					return boom
				}
				return nil
			})
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorIs(t, err, boom)
			require.Equal(t, len(frames(got[:len(got)-1])), off3)
		}
	})
}

// After a flush of more than 1 MiB, commit keeps j.spare pointing at the
// buffer that j.pend now uses, so the next leader hands the very buffer it
// is writing (unlocked) back to j.pend, and Appends made during that write
// overwrite the bytes on their way to the file.
//
// White box: the segment file is swapped for a pipe so that the leader's
// write blocks, deterministically, while another record is appended.
func TestCommitDoesNotReuseBufferBeingWritten(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncNone, 0)

	j.Append([]byte("small"))
	require.NoError(t, j.Commit())
	j.Append(bytes.Repeat([]byte{1}, 256<<10)) // a 256 KiB buffer becomes spare
	require.NoError(t, j.Commit())
	j.Append(bytes.Repeat([]byte{2}, 2<<20)) // a flush of more than 1 MiB
	require.NoError(t, j.Commit())

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	j.mu.Lock()
	seg := j.f
	j.f = w
	j.mu.Unlock()

	rec4 := bytes.Repeat([]byte{4}, 192<<10) // more than a pipe holds
	rec5 := bytes.Repeat([]byte{5}, 128<<10)
	j.Append(rec4)
	done := make(chan error, 1)
	go func() { done <- j.Commit() }()

	want := AppendFrame(nil, rec4)
	got := make([]byte, len(want))
	_, err = io.ReadFull(r, got[:8]) // the leader is now inside its write
	require.NoError(t, err)
	j.Append(rec5) // while the leader writes rec4
	_, err = io.ReadFull(r, got[8:])
	require.NoError(t, err)
	require.NoError(t, <-done)

	j.mu.Lock()
	j.f = seg
	j.mu.Unlock()
	require.NoError(t, w.Close())

	require.True(t, bytes.Equal(want, got), "the bytes written for rec4 were overwritten by rec5")
}

// Close's doc: "Later calls return ErrClosed"; Append's doc: "an Append
// after Close ... is dropped, and the next Commit reports why". But commit
// checks done >= target before closed, and after Close nothing is pending:
// Commit and Sync return nil, and a caller is told its dropped record is
// committed.
func TestCommitAfterCloseReportsErrClosed(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			require.NoError(t, j.Close())
			j.Append(body(0)) // dropped
			require.ErrorIs(t, j.Commit(), ErrClosed)
			require.ErrorIs(t, j.Sync(), ErrClosed)
			got, _ := replayAll(t, dir)
			require.Empty(t, got)
		})
	}
}

// A record appended before Close is written by Close, so a Commit racing
// Close returns nil for it: it is in the file. (It used to return ErrClosed
// for a record that was stored.)
func TestCommitAfterCloseCoversRecordsCloseWrote(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, _ := open(t, dir, m.mode, 0)
			j.Append(body(0))
			require.NoError(t, j.Close())
			require.NoError(t, j.Commit(), "its record is in the file")
			got, _ := replayAll(t, dir)
			require.Equal(t, bodies(0, 1), got)
		})
	}
}

// TestCommitDoesNotReuseBufferBeingWritten's bug seen from outside, with a
// real file: records whose Commit returned nil are lost at the next Open.
func TestConcurrentCommitAfterLargeFlush(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncNone, 0)
	first := [][]byte{[]byte("small"), bytes.Repeat([]byte{1}, 512<<10), bytes.Repeat([]byte{2}, 2<<20)}
	for _, b := range first {
		j.Append(b)
		require.NoError(t, j.Commit())
	}
	const workers, each = 8, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				j.Append(append([]byte(fmt.Sprintf("w%d-%d-", w, i)), bytes.Repeat([]byte{'a'}, 48<<10)...))
				if err := j.Commit(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, j.Close())
	got, info := replayAll(t, dir)
	require.Zero(t, info.TruncatedBytes, "a committed segment has no bad tail")
	require.Len(t, got, len(first)+workers*each)
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
