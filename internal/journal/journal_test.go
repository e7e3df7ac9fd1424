package journal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
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

// hsize is the size of a new journal's first segment: its header and the
// end record of its empty snapshot. Appended records start there.
const hsize = int(headerFrame + endFrame)

// hframe is the size of a segment's header frame: a Rewrite's snapshot
// starts there.
const hframe = int(headerFrame)

// sealed returns a segment with header h holding the snapshot recs, framed
// and closed by their end record, as writeSnapshot writes it.
func sealed(h header, recs [][]byte) []byte {
	b := append(AppendFrame(nil, h.body()), frames(recs)...)
	return AppendFrame(b, snapshotEnd{records: uint64(len(recs)), length: uint64(len(b)), crc: crc32.Checksum(b, castagnoli)}.body())
}

// headed returns a journal's first segment, numbered n, holding recs: its
// header and the end record of its empty snapshot, then recs framed, as
// appended after it.
func headed(n int, recs [][]byte) []byte {
	return append(sealed(header{seq: uint64(n)}, nil), frames(recs)...)
}

// successor returns segment n, holding recs, as a Rewrite of prev (segment
// n-1's bytes) writes it: recs are its snapshot.
func successor(n int, prev []byte, recs [][]byte) []byte {
	return sealed(header{seq: uint64(n), prev: uint64(n - 1), prevLen: uint64(len(prev)), prevCRC: crc32.Checksum(prev, castagnoli)}, recs)
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

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
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

func TestRoundTrip(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			const n = 100
			want := bodies(0, n)

			j, info, got := open(t, dir, m.mode, 0)
			require.Empty(t, got)
			require.Equal(t, Info{Segment: 1, Bytes: int64(hsize)}, info)
			require.Equal(t, headed(1, nil), readFile(t, segName(dir, 1)), "a new journal's segment: its header alone")
			for _, b := range want {
				j.Append(b)
			}
			require.Equal(t, int64(len(frames(want))), j.Size(), "Size counts records not yet written")
			require.Equal(t, int64(hsize), fileSize(t, segName(dir, 1)), "Append alone does not write")
			require.NoError(t, j.Commit())
			// Commit wrote the records (whatever the mode): read the file behind
			// the open journal's back.
			require.Equal(t, headed(1, want), readFile(t, segName(dir, 1)))
			require.NoError(t, j.Close())

			got, info = replayAll(t, dir)
			require.Equal(t, want, got)
			require.Equal(t, n, info.Records)
			require.Zero(t, info.TruncatedBytes)
			require.Equal(t, 1, info.Segment)
			require.Equal(t, int64(hsize+len(frames(want))), info.Bytes)
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
	require.Equal(t, info.Bytes, int64(hsize)+j.Size())
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
	require.Equal(t, Info{Segment: 1, Bytes: int64(hsize)}, info)
	j.Append(body(0))
	require.NoError(t, j.Close())
	got, _ = replayAll(t, dir)
	require.Equal(t, bodies(0, 1), got)
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

// Segments of the format before headers (legacy) open alone, as they did;
// beside each other, nothing proves which holds the state: Open refuses,
// naming the older, and changes nothing, and Salvage sets the older ones
// aside (what the older format's Open deleted).
func TestLegacySegments(t *testing.T) {
	t.Run("alone", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(segName(dir, 4), frames(bodies(0, 3)), 0o644))
		j, info, got := open(t, dir, SyncNone, 0)
		require.Equal(t, bodies(0, 3), got)
		require.Equal(t, Info{Segment: 4, Records: 3, Bytes: int64(len(frames(bodies(0, 3)))), Legacy: true}, info)
		j.Append(body(3))
		require.NoError(t, j.Rewrite(func(emit func([]byte)) error { emit(body(9)); return nil }))
		require.NoError(t, j.Close())
		got, info = replayAll(t, dir)
		require.Equal(t, [][]byte{body(9)}, got, "its first Rewrite writes a headed segment")
		require.Equal(t, 5, info.Segment)
		require.False(t, info.Legacy)
	})
	t.Run("beside each other", func(t *testing.T) {
		dir := t.TempDir()
		for n, recs := range map[int][][]byte{3: bodies(0, 1), 9: bodies(1, 2), 10: bodies(2, 4)} {
			require.NoError(t, os.WriteFile(segName(dir, n), frames(recs), 0o644))
		}
		before := readDir(t, dir)
		_, _, err := Open(dir, SyncNone, 0, func([]byte) error { return nil })
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Equal(t, segName(dir, 9), ce.Path)
		delete(before, "LOCK")
		after := readDir(t, dir)
		delete(after, "LOCK")
		require.Equal(t, before, after)

		si, err := Salvage(dir, nil)
		require.NoError(t, err)
		require.Equal(t, []string{segName(dir, 9) + ".corrupt", segName(dir, 3) + ".corrupt"}, si.SetAside)
		got, info := replayAll(t, dir)
		require.Equal(t, bodies(2, 4), got)
		require.Equal(t, 10, info.Segment)
	})
}

// TestReplayedBodiesStayGoodUntilReplayed: the bodies Open hands to replay
// are views of the segment, which Open maps; they read as the records
// while the journal appends and while a Rewrite replaces the segment (and
// removes its file), until Replayed, which may be called twice, and Close
// after it.
func TestReplayedBodiesStayGoodUntilReplayed(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, SyncNone, bodies(0, 50))
	var views [][]byte
	j, _, err := Open(dir, SyncNone, 0, func(b []byte) error {
		views = append(views, b) // kept, not copied
		return nil
	})
	require.NoError(t, err)
	j.Append(body(50))
	require.NoError(t, j.Sync())
	require.NoError(t, j.Rewrite(func(emit func([]byte)) error {
		for _, b := range bodies(0, 51) {
			emit(b)
		}
		return nil
	}))
	_, err = os.Stat(segName(dir, 1))
	require.ErrorIs(t, err, os.ErrNotExist, "the segment the views are of is gone from the directory")
	require.Equal(t, bodies(0, 50), views)
	j.Replayed()
	j.Replayed()
	require.NoError(t, j.Close())
	got, _ := replayAll(t, dir)
	require.Equal(t, bodies(0, 51), got)
}
