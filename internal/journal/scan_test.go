package journal

// Reading a journal back: Scan, torn tails, corruption in the middle, the
// largest record, and FuzzScan. Helpers are journal_test.go's.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScan(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		off, err := Scan(nil, func([]byte) error { require.FailNow(t, "called"); return nil })
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
		off, err := Scan(data, func([]byte) error { require.FailNow(t, "called"); return nil })
		require.NoError(t, err)
		require.Zero(t, off)
	})
}

func TestTornTailAtEveryOffset(t *testing.T) {
	src := t.TempDir()
	const k = 5
	all := bodies(0, k)
	all[k-1] = []byte("the last record, long enough to tear in many places")
	write(t, src, SyncNone, all)
	full, err := os.ReadFile(segName(src, 1))
	require.NoError(t, err)
	start := hsize + len(frames(all[:k-1]))
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
	start := hsize + len(frames(all[:k-1]))

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
			good := hsize + len(frames(wantRecs))

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
	require.ErrorContains(t, err, fmt.Sprintf("at offset %d", hsize+len(frames(all[:2]))))
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, segName(dir, 1), ce.Path)
	require.Equal(t, int64(hsize+len(frames(all[:2]))), ce.Offset)
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

// A frame of exactly MaxRecord is whole, one more is not, checksum or no.
// (Only Scan: Append's copy and the fsync of 64 MiB take seconds under
// -race. TestInvalidAppendIsSticky has Append's MaxRecord+1.)
func TestScanMaxRecordBody(t *testing.T) {
	over := make([]byte, 8+MaxRecord+1)
	binary.LittleEndian.PutUint32(over, MaxRecord+1)
	binary.LittleEndian.PutUint32(over[4:], crc32.Checksum(over[8:], castagnoli))
	off, err := Scan(over, func([]byte) error { require.FailNow(t, "called"); return nil })
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

// TestScanAheadIsScanInTurn: with the checksums verified on another
// goroutine, a scan calls fn with the same frames, in the same order, and
// stops at the same offset with the same error as one that verifies each
// frame in turn: whole data, a tear at every offset, a corrupt byte at
// every offset, and a refusal at every frame, for spans of one frame to
// more than all of them.
func TestScanAheadIsScanInTurn(t *testing.T) {
	var bs [][]byte
	for i := range 24 {
		bs = append(bs, bytes.Repeat([]byte{byte(i)}, 1+i*7%53))
	}
	data := frames(bs)
	type outcome struct {
		off    int
		err    error
		bodies [][]byte
	}
	run := func(scan func([]byte, func([]byte) error) (int, error), data []byte, refuse int) outcome {
		var o outcome
		o.off, o.err = scan(data, func(b []byte) error {
			if len(o.bodies) == refuse {
				return errRefused
			}
			o.bodies = append(o.bodies, bytes.Clone(b))
			return nil
		})
		return o
	}
	for _, span := range []int{1, 40, 300, len(data) + 1} {
		ahead := func(data []byte, fn func([]byte) error) (int, error) { return scanAhead(data, fn, span) }
		check := func(data []byte, refuse int, what string) {
			t.Helper()
			want := run(scanInTurn, data, refuse)
			require.Equal(t, want, run(ahead, data, refuse), "span %d: %s", span, what)
		}
		check(data, -1, "whole")
		for cut := range len(data) {
			check(data[:cut], -1, fmt.Sprint("torn at ", cut))
		}
		for at := range len(data) {
			bad := bytes.Clone(data)
			bad[at] ^= 0x40
			check(bad, -1, fmt.Sprint("corrupt at ", at))
		}
		for k := range len(bs) {
			check(data, k, fmt.Sprint("refused at frame ", k))
		}
	}
	// The reference itself tells the cases apart.
	refused := run(scanInTurn, data, 5)
	require.Equal(t, outcome{len(frames(bs[:5])), errRefused, bs[:5]}, refused)
	torn := run(scanInTurn, data[:len(data)-1], -1)
	require.Equal(t, outcome{len(frames(bs[:23])), nil, bs[:23]}, torn)
}

var errRefused = errors.New("refused")

// TestScanAheadStopsReadingWhenFnPanics: a panic in fn leaves no goroutine
// reading data behind (a caller that recovers may unmap it). The verifying
// goroutine has returned by then (its function is on no stack), and under
// -race, writing data after would race with one still reading it.
func TestScanAheadStopsReadingWhenFnPanics(t *testing.T) {
	data := frames(bodies(0, 200))
	func() {
		defer func() { require.Equal(t, "boom", recover()) }()
		_, _ = scanAhead(data, func([]byte) error { panic("boom") }, 1)
	}()
	clear(data)
	stacks := make([]byte, 1<<20)
	stacks = stacks[:runtime.Stack(stacks, true)]
	require.NotContains(t, string(stacks), "journal.scanAhead.func")
}
