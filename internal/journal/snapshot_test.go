package journal

// A segment's snapshot proves its own extent with its end record. Helpers
// are journal_test.go's and corrupt_test.go's.

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// compacted returns a journal directory whose live segment 2 is a Rewrite's
// snapshot of snap followed by the appended records after, and that
// segment's bytes.
func compacted(t *testing.T, snap, after [][]byte) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	j.Append(body(999))
	require.NoError(t, j.Commit())
	require.NoError(t, j.Rewrite(func(emit func([]byte)) error {
		for _, b := range snap {
			emit(b)
		}
		return nil
	}))
	for _, b := range after {
		j.Append(b)
	}
	require.NoError(t, j.Commit())
	require.NoError(t, j.Close())
	return dir, readFile(t, segName(dir, 2))
}

// A cut anywhere inside a snapshot, its end record included, is damage:
// Open and Read refuse it with a *CorruptError naming the segment and
// change nothing, however small the cut looks. A cut after the end record
// is a torn tail of the appended records, cut off as before.
func TestCutSnapshotIsRefused(t *testing.T) {
	snap, after := bodies(0, 12), bodies(12, 15)
	dir, data := compacted(t, snap, after)
	sealedEnd := hframe + len(frames(snap)) + int(endFrame) // just past the end record
	require.Equal(t, successor(2, headed(1, [][]byte{body(999)}), snap), data[:sealedEnd])

	seg := segName(dir, 2)
	for cut := hframe; cut < len(data); cut++ {
		require.NoError(t, os.WriteFile(seg, data[:cut], 0o644))
		before := withoutLock(t, dir)
		replayed := 0
		rinfo, rerr := Read(dir, func() func([]byte) error { return func([]byte) error { return nil } })
		oj, info, err := Open(dir, SyncAlways, 0, func([]byte) error { replayed++; return nil })
		if cut < sealedEnd {
			var ce *CorruptError
			require.ErrorAs(t, err, &ce, "cut at %d", cut)
			require.Equal(t, seg, ce.Path)
			require.ErrorContains(t, err, "snapshot is cut short")
			require.Equal(t, before, withoutLock(t, dir), "a refused Open changes nothing (cut at %d)", cut)
			require.ErrorAs(t, rerr, &ce, "Read refuses it too (cut at %d)", cut)
			continue
		}
		require.NoError(t, err, "cut at %d", cut)
		require.NoError(t, oj.Close())
		whole := 0 // appended records whole before the cut
		for whole < len(after) && sealedEnd+len(frames(after[:whole+1])) <= cut {
			whole++
		}
		kept := sealedEnd + len(frames(after[:whole]))
		require.Equal(t, len(snap)+whole, replayed, "cut at %d", cut)
		require.Equal(t, Info{Segment: 2, Records: len(snap) + whole, Bytes: int64(kept), TruncatedBytes: int64(cut - kept)}, info)
		require.NoError(t, rerr)
		require.Equal(t, info, rinfo, "Read (before Open) sees what Open sees")
		require.Equal(t, data[:kept], readFile(t, seg), "Open cut the torn tail off")
	}
}

// The shape: a snapshot of many records cut at half its size opens
// as a tear of a few bytes unless the end record proves the extent.
func TestHalfASnapshotIsNotATornTail(t *testing.T) {
	snap := bodies(0, 2000)
	dir, data := compacted(t, snap, nil)
	require.NoError(t, os.WriteFile(segName(dir, 2), data[:len(data)/2], 0o644))
	_, _, err := Open(dir, SyncAlways, 0, func([]byte) error { return nil })
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "snapshot is cut short")
	require.LessOrEqual(t, ce.Offset, int64(len(data)/2), "where the whole records end")
}

// An end record that does not describe what precedes it, one in the wrong
// place, or a second one, is corruption; so is one in a segment whose
// header announces none.
func TestBadEndRecord(t *testing.T) {
	snap := bodies(0, 4)
	h := header{seq: 1}
	good := sealed(h, snap)
	endAt := len(good) - int(endFrame)
	reframe := func(b []byte, e snapshotEnd) []byte {
		return AppendFrame(bytes.Clone(b[:endAt]), e.body())
	}
	prefix := good[:endAt]
	right := snapshotEnd{records: uint64(len(snap)), length: uint64(endAt), crc: crc32.Checksum(prefix, castagnoli)}
	v1 := func(b []byte) []byte { // the same segment with a version 1 header
		hb := h.body()
		hb[len(headerMagic)] = headerV1
		return append(AppendFrame(nil, hb), b[hframe:]...)
	}
	cases := []struct {
		name string
		data []byte
		why  string
	}{
		{"wrong count", reframe(good, snapshotEnd{records: right.records - 1, length: right.length, crc: right.crc}), "says 3 records"},
		{"wrong length", reframe(good, snapshotEnd{records: right.records, length: right.length + 1, crc: right.crc}), "another checksum"},
		{"wrong checksum", reframe(good, snapshotEnd{records: right.records, length: right.length, crc: right.crc ^ 1}), "another checksum"},
		{"a second end record", AppendFrame(bytes.Clone(good), right.body()), "a second snapshot end record"},
		{"an end record of the wrong size", append(AppendFrame(bytes.Clone(prefix), append(right.body(), 0)), frames(bodies(9, 10))...), "snapshot end record of"},
		{"an end record in a version 1 segment", v1(good), "announces none"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(segName(dir, 1), c.data, 0o644))
			_, _, err := Open(dir, SyncAlways, 0, func([]byte) error { return nil })
			var ce *CorruptError
			require.ErrorAs(t, err, &ce)
			require.ErrorContains(t, err, c.why)
			require.NotContains(t, err.Error(), "record refused by replay")
		})
	}
}

// Salvage keeps what is whole of a cut snapshot and seals it with a new end
// record, so Open accepts it; the original is kept beside it.
func TestSalvageResealsCutSnapshot(t *testing.T) {
	snap := bodies(0, 10)
	dir, data := compacted(t, snap, bodies(10, 12))
	seg := segName(dir, 2)
	cut := hframe + len(frames(snap[:6])) + 3 // inside record 6
	require.NoError(t, os.WriteFile(seg, data[:cut], 0o644))
	info, err := Salvage(dir, nil)
	require.NoError(t, err)
	kept := hframe + len(frames(snap[:6]))
	require.Equal(t, SalvageInfo{Records: 6, KeptBytes: int64(kept) + endFrame, DroppedBytes: int64(cut - kept), Backup: seg + ".corrupt", Resealed: true}, info)
	require.Equal(t, data[:cut], readFile(t, seg+".corrupt"))
	got, oinfo := replayAll(t, dir)
	require.Equal(t, snap[:6], got)
	require.Zero(t, oinfo.TruncatedBytes)

	// Cut exactly at a record boundary: nothing to cut, but a seal to add.
	dir, data = compacted(t, snap, nil)
	seg = segName(dir, 2)
	require.NoError(t, os.WriteFile(seg, data[:kept], 0o644))
	info, err = Salvage(dir, nil)
	require.NoError(t, err)
	require.Equal(t, SalvageInfo{Records: 6, KeptBytes: int64(kept) + endFrame, Backup: seg + ".corrupt", Resealed: true}, info)
	got, _ = replayAll(t, dir)
	require.Equal(t, snap[:6], got)
}

// A segment of version 1, written before end records, opens as it did (its
// extent cannot be proven), and its first Rewrite writes a sealed segment.
func TestVersion1SegmentOpens(t *testing.T) {
	dir := t.TempDir()
	hb := header{seq: 3}.body()
	hb[len(headerMagic)] = headerV1
	data := append(AppendFrame(nil, hb), frames(bodies(0, 3))...)
	require.NoError(t, os.WriteFile(segName(dir, 3), data[:len(data)-2], 0o644)) // with a torn tail
	j, info, got := open(t, dir, SyncNone, 0)
	require.Equal(t, bodies(0, 2), got)
	require.Equal(t, Info{Segment: 3, Records: 2, Bytes: int64(hframe + len(frames(bodies(0, 2)))), TruncatedBytes: int64(len(frames(bodies(2, 3))) - 2)}, info)
	require.Equal(t, int64(len(frames(bodies(0, 2)))), j.Size())
	require.NoError(t, j.Rewrite(func(emit func([]byte)) error { emit(body(9)); return nil }))
	require.NoError(t, j.Close())
	seg4 := readFile(t, segName(dir, 4))
	h, ok, err := parseHeader(seg4[8:hframe])
	require.True(t, ok)
	require.NoError(t, err)
	require.True(t, h.sealed)
	got, _ = replayAll(t, dir)
	require.Equal(t, [][]byte{body(9)}, got)
}

// A snapshot record that would read as an end record is refused by the
// Rewrite, which leaves the journal as it was.
func TestRewriteRefusesEndRecordLookAlike(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := open(t, dir, SyncAlways, 0)
	j.Append(body(1))
	require.NoError(t, j.Commit())
	err := j.Rewrite(func(emit func([]byte)) error { emit([]byte(endMagic + "x")); return nil })
	require.ErrorContains(t, err, "end record")
	require.Equal(t, 1, j.Segment())
	require.NoError(t, j.Close())
	got, _ := replayAll(t, dir)
	require.Equal(t, [][]byte{body(1)}, got)
}

// A directory (or anything but a regular file) named like a segment or a
// .tmp is not one: Open refuses it with a *CorruptError naming it, and
// Salvage sets it aside.
func TestSegmentNameOnADirectory(t *testing.T) {
	for _, name := range []string{"seg-00000002.log", "seg-00000001.log", "seg-00000002.tmp"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, SyncAlways, bodies(0, 2))
			p := filepath.Join(dir, name)
			if name == "seg-00000001.log" { // the only segment is a directory
				require.NoError(t, os.Remove(p))
			}
			require.NoError(t, os.Mkdir(p, 0o755))
			_, _, err := Open(dir, SyncAlways, 0, func([]byte) error { return nil })
			var ce *CorruptError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, p, ce.Path)
			require.ErrorContains(t, err, "not a regular file")
			require.DirExists(t, p, "Open changes nothing")

			si, err := Salvage(dir, nil)
			require.NoError(t, err)
			require.Equal(t, []string{p + ".corrupt"}, si.SetAside)
			require.DirExists(t, p+".corrupt")
		})
	}
}

// The end record's layout, byte for byte.
func TestEndRecordLayout(t *testing.T) {
	e := snapshotEnd{records: 7, length: 300, crc: 0xdeadbeef}
	b := e.body()
	require.Len(t, b, endLen)
	require.Equal(t, []byte(endMagic), b[:len(endMagic)])
	require.Equal(t, uint64(7), binary.LittleEndian.Uint64(b[len(endMagic):]))
	got, isEnd, err := parseEnd(b)
	require.True(t, isEnd)
	require.NoError(t, err)
	require.Equal(t, e, got)
}
