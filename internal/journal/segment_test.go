package journal

// Segment headers and the chain Open proves. Helpers are journal_test.go's
// and corrupt_test.go's.

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// withoutLock returns dir's files and bytes, LOCK aside (Open creates it).
func withoutLock(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := readDir(t, dir)
	delete(files, "LOCK")
	return files
}

// A new journal's first segment is made whole (its header) under a .tmp
// name and renamed: there is never a .log without a header.
func TestNewJournalSegmentHasHeader(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	require.NoError(t, j.Close())
	require.Equal(t, map[string][]byte{"seg-00000001.log": headed(1, nil)}, withoutLock(t, dir))
}

// Rewrites whose removal of the old segment did not happen leave a chain:
// Open proves every link, replays the newest only, and only then removes
// the others.
func TestOpenProvesChainOfSegments(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	kept := map[int][]byte{}
	for i := range 3 {
		j.Append(body(i))
		require.NoError(t, j.Commit())
		kept[j.Segment()] = readFile(t, j.Path())
		require.NoError(t, j.Rewrite(func(emit func([]byte)) error { emit(body(10 + i)); return nil }))
	}
	j.Append(body(99))
	require.NoError(t, j.Close())
	for n, b := range kept { // as if each Rewrite's removal had failed
		require.NoError(t, os.WriteFile(segName(dir, n), b, 0o644))
	}
	got, info := replayAll(t, dir)
	require.Equal(t, [][]byte{body(12), body(99)}, got)
	require.Equal(t, 4, info.Segment)
	require.ElementsMatch(t, []string{"LOCK", "seg-00000004.log"}, listDir(t, dir))
}

// Every way a file can fail to belong: Open refuses naming it and changes
// nothing; Salvage sets exactly that file aside; Open then replays what the
// journal holds.
func TestOpenRefusesWhatDoesNotBelong(t *testing.T) {
	seg1 := headed(1, bodies(0, 3))
	seg2 := successor(2, seg1, bodies(3, 5))
	flipped := func(b []byte, at int) []byte { b = bytes.Clone(b); b[at] ^= 0x01; return b }
	cases := []struct {
		name    string
		files   map[string][]byte
		culprit string
		want    [][]byte // replayed after Salvage
	}{
		{"older segment changed in place", map[string][]byte{"seg-00000001.log": flipped(seg1, len(seg1)-1), "seg-00000002.log": seg2},
			"seg-00000001.log", bodies(3, 5)},
		{"older segment cut short", map[string][]byte{"seg-00000001.log": seg1[:len(seg1)-1], "seg-00000002.log": seg2},
			"seg-00000001.log", bodies(3, 5)},
		{"a gap in the chain", map[string][]byte{"seg-00000001.log": seg1, "seg-00000003.log": successor(3, seg2, bodies(5, 6))},
			"seg-00000001.log", bodies(5, 6)},
		{"a segment under another number", map[string][]byte{"seg-00000001.log": seg1, "seg-00000002.log": seg1},
			"seg-00000002.log", bodies(0, 3)},
		{"header damaged", map[string][]byte{"seg-00000001.log": seg1, "seg-00000002.log": flipped(seg2, 20)},
			"seg-00000002.log", bodies(0, 3)},
		{"header of an unknown version", map[string][]byte{"seg-00000001.log": append(AppendFrame(nil, append([]byte(headerMagic), 9)), frames(bodies(0, 1))...)},
			"seg-00000001.log", nil},
		{"empty segment", map[string][]byte{"seg-00000001.log": seg1, "seg-00000002.log": nil},
			"seg-00000002.log", bodies(0, 3)},
		{"a .tmp that is not the next segment's", map[string][]byte{"seg-00000001.log": seg1, "seg-00000003.tmp": seg2},
			"seg-00000003.tmp", bodies(0, 3)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, b := range c.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
			}
			before := withoutLock(t, dir)
			replayed := 0
			_, _, err := Open(dir, SyncAlways, 0, func([]byte) error { replayed++; return nil })
			var ce *CorruptError
			require.ErrorAs(t, err, &ce)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Equal(t, filepath.Join(dir, c.culprit), ce.Path)
			require.Equal(t, int64(-1), ce.Offset, "the file as a whole")
			require.ErrorContains(t, err, ce.Path+": ")
			require.Zero(t, replayed, "nothing replays before the chain is proven")
			require.Equal(t, before, withoutLock(t, dir), "nothing changed")

			si, err := Salvage(dir, nil)
			require.NoError(t, err)
			aside := filepath.Join(dir, c.culprit) + ".corrupt"
			require.Equal(t, []string{aside}, si.SetAside)
			require.Equal(t, before[c.culprit], readFile(t, aside), "set aside byte for byte")
			got, _ := replayAll(t, dir)
			require.Equal(t, c.want, got)
		})
	}
}

// The size and checksum a Rewrite records for the segment it supersedes
// are those of the file as it stands, also when the journal was reopened
// (and a torn tail cut) since the segment was made: a crash before the old
// segment's removal leaves a chain that proves.
func TestChainAcrossReopenAndTornTail(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, SyncAlways, bodies(0, 3))
	seg := segName(dir, 1)
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(AppendFrame(nil, body(3))[:7]) // a torn tail
	require.NoError(t, err)
	require.NoError(t, f.Close())

	j, info, got := open(t, dir, SyncAlways, 0)
	require.Equal(t, bodies(0, 3), got)
	require.Positive(t, info.TruncatedBytes)
	j.Append(body(4))
	require.NoError(t, j.Commit())
	old := readFile(t, seg)
	require.NoError(t, j.Rewrite(func(emit func([]byte)) error { emit(body(9)); return nil }))
	require.NoError(t, j.Close())
	require.NoError(t, os.WriteFile(seg, old, 0o644)) // its removal did not happen

	got, info = replayAll(t, dir)
	require.Equal(t, [][]byte{body(9)}, got)
	require.Equal(t, 2, info.Segment)
	require.NoFileExists(t, seg)
}
