package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzBitFlip/boundary-* from the fixed journal")

// readDir returns every file in dir, by name, with its bytes.
func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, name := range listDir(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		files[name] = b
	}
	return files
}

// genJournal returns a journal of 1+count%24 records of varying sizes (1 to
// 2000 bytes, mostly short) and random contents drawn from seed, framed,
// and the offset where each frame starts.
func genJournal(seed uint64, count uint8) (data []byte, recs [][]byte, starts []int) {
	rng := rand.New(rand.NewPCG(seed, 0x6a6f75726e616c))
	for range 1 + int(count)%24 {
		n := 1 + rng.IntN(64)
		if rng.IntN(4) == 0 {
			n = 1 + rng.IntN(2000)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		recs = append(recs, b)
		starts = append(starts, len(data))
		data = AppendFrame(data, b)
	}
	return data, recs, starts
}

// The fixed journal whose record boundaries seed FuzzBitFlip.
const fixedSeed, fixedCount = 1, 19 // 20 records

// checkBitFlip makes data, with bit flipped, dir's live segment and checks
// the corruption policy: a flip in any record but the last makes Open fail
// with a *CorruptError at that record's frame and change nothing, and then
// Salvage keeps exactly the records before it; a flip in the last record is
// a torn tail, which Open cuts, exactly that frame.
//
// data is the segment's records: checkBitFlip puts a header before them,
// and the bit counts from the first record.
func checkBitFlip(t *testing.T, data []byte, recs [][]byte, starts []int, bit int) {
	t.Helper()
	data = append(headed(1, nil), data...)
	starts = slices.Clone(starts)
	for i := range starts {
		starts[i] += hsize
	}
	bit += 8 * hsize
	flipped := bytes.Clone(data)
	flipped[bit/8] ^= 1 << (bit % 8)
	k := len(starts) - 1 // the flipped record
	for starts[k] > bit/8 {
		k--
	}
	dir := t.TempDir()
	seg := segName(dir, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "LOCK"), nil, 0o644))
	require.NoError(t, os.WriteFile(seg, flipped, 0o644))
	before := readDir(t, dir)

	var got [][]byte
	collect := func(b []byte) error { got = append(got, bytes.Clone(b)); return nil }
	j, info, err := Open(dir, SyncNone, 0, collect)
	if k == len(recs)-1 {
		require.NoError(t, err, "a flip in the last record is a torn tail")
		require.Equal(t, bytes2(recs[:k]), got)
		require.Equal(t, k, info.Records)
		require.Equal(t, int64(len(data)-starts[k]), info.TruncatedBytes, "exactly the last frame is cut")
		require.Equal(t, int64(starts[k]), info.Bytes)
		require.NoError(t, j.Close())
		require.Equal(t, int64(starts[k]), fileSize(t, seg))
		return
	}
	require.ErrorIs(t, err, ErrCorrupt, "a flip in record %d of %d", k, len(recs))
	require.Nil(t, j)
	require.Equal(t, Info{}, info)
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, seg, ce.Path)
	require.Equal(t, int64(starts[k]), ce.Offset, "the flipped frame's offset")
	require.NoError(t, ce.Err)
	require.ErrorContains(t, err, fmt.Sprintf("%s at offset %d", seg, starts[k]))
	require.Equal(t, bytes2(recs[:k]), got, "replay saw the records before it")
	require.Equal(t, before, readDir(t, dir), "a refused Open changes nothing")

	sinfo, err := Salvage(dir, nil) // the lock was released
	require.NoError(t, err)
	require.Equal(t, SalvageInfo{
		Records:      k,
		KeptBytes:    int64(starts[k]),
		DroppedBytes: int64(len(data) - starts[k]),
		Backup:       seg + ".corrupt",
	}, sinfo)
	backup, err := os.ReadFile(sinfo.Backup)
	require.NoError(t, err)
	require.True(t, bytes.Equal(flipped, backup), "the backup is the original segment")

	got = nil
	j, info, err = Open(dir, SyncNone, 0, collect)
	require.NoError(t, err)
	require.Equal(t, bytes2(recs[:k]), got)
	require.Equal(t, Info{Segment: 1, Records: k, Bytes: int64(starts[k])}, info)
	require.NoError(t, j.Close())
	require.ElementsMatch(t, []string{"LOCK", "seg-00000001.log", "seg-00000001.log.corrupt"}, listDir(t, dir))
}

func TestSingleBitFlips(t *testing.T) {
	sizes := []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 127, 128, 255, 256, 300, 511, 1000, 40}
	rng := rand.New(rand.NewPCG(7, 7))
	var data []byte
	var recs [][]byte
	var starts []int
	for _, n := range sizes {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		recs = append(recs, b)
		starts = append(starts, len(data))
		data = AppendFrame(data, b)
	}
	for k, s := range starts {
		n := len(recs[k])
		for _, at := range []struct {
			name string
			bit  int
		}{
			{"first byte", 8 * s},
			{"first byte high bit", 8*s + 7},
			{"length second byte", 8*(s+1) + 2},
			{"length high bit", 8*(s+3) + 7},
			{"crc", 8*(s+4) + 3},
			{"crc high byte", 8*(s+7) + 6},
			{"body first byte", 8 * (s + 8)},
			{"body middle", 8*(s+8+n/2) + 5},
			{"body last byte", 8*(s+8+n-1) + 7},
		} {
			t.Run(fmt.Sprintf("record %d %s", k, at.name), func(t *testing.T) {
				checkBitFlip(t, data, recs, starts, at.bit)
			})
		}
	}
}

func FuzzBitFlip(f *testing.F) {
	_, _, starts := genJournal(fixedSeed, fixedCount)
	for _, s := range starts { // the first byte of every frame
		f.Add(uint64(fixedSeed), uint8(fixedCount), uint32(8*s))
	}
	f.Add(uint64(2), uint8(0), uint32(70))  // a one-record journal
	f.Add(uint64(3), uint8(5), uint32(999)) // somewhere in a body
	f.Fuzz(func(t *testing.T, seed uint64, count uint8, bit uint32) {
		data, recs, starts := genJournal(seed, count)
		checkBitFlip(t, data, recs, starts, int(bit%uint32(8*len(data))))
	})
}

// The committed corpus holds FuzzBitFlip's seeds at the record boundaries
// of the fixed journal (go test -run TestFuzzBitFlipCorpus -update-corpus
// rewrites it).
func TestFuzzBitFlipCorpus(t *testing.T) {
	_, _, starts := genJournal(fixedSeed, fixedCount)
	require.Len(t, starts, fixedCount+1)
	for k, s := range starts {
		path := filepath.Join("testdata", "fuzz", "FuzzBitFlip", fmt.Sprintf("boundary-%02d", k))
		want := fmt.Sprintf("go test fuzz v1\nuint64(%d)\nuint8(%d)\nuint32(%d)\n", fixedSeed, fixedCount, 8*s)
		if *updateCorpus {
			require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, want, string(got), "%s (rewrite with -update-corpus)", path)
	}
}

// A refused Open removes no older segment, .tmp or backup, and cuts
// nothing; after Salvage, Open carries on and tidies up as usual.
func TestCorruptOpenChangesNothing(t *testing.T) {
	dir := t.TempDir()
	all := bodies(0, 8)
	seg1 := headed(1, bodies(0, 2))
	data := successor(2, seg1, all)
	at := hframe + len(frames(all[:3]))
	data[at+5] ^= 0x04 // record 3's checksum
	require.NoError(t, os.WriteFile(filepath.Join(dir, "LOCK"), nil, 0o644))
	require.NoError(t, os.WriteFile(segName(dir, 1), seg1, 0o644))
	require.NoError(t, os.WriteFile(segName(dir, 2), data, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "seg-00000003.tmp"), frames(bodies(5, 6)), 0o644))
	require.NoError(t, os.WriteFile(segName(dir, 1)+".corrupt", []byte("an old backup"), 0o644))
	before := readDir(t, dir)

	for range 2 { // and again: the lock was released
		_, _, err := Open(dir, SyncAlways, 0, func([]byte) error { return nil })
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, segName(dir, 2), ce.Path)
		require.Equal(t, int64(at), ce.Offset)
		require.Equal(t, before, readDir(t, dir))
	}

	info, err := Salvage(dir, nil)
	require.NoError(t, err)
	require.Equal(t, SalvageInfo{Records: 3, KeptBytes: int64(at) + endFrame, DroppedBytes: int64(len(data) - at), Backup: segName(dir, 2) + ".corrupt", Resealed: true}, info,
		"the damage is inside segment 2's snapshot: what is kept of it is sealed anew")
	got, oinfo := replayAll(t, dir)
	require.Equal(t, all[:3], got)
	require.Equal(t, 2, oinfo.Segment)
	require.ElementsMatch(t, []string{"LOCK", "seg-00000002.log", "seg-00000001.log.corrupt", "seg-00000002.log.corrupt"}, listDir(t, dir))
}

// Backups and other look-alikes are not segments: Open neither replays nor
// removes them, even with a higher number than the live segment.
func TestOpenIgnoresBackups(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, SyncAlways, bodies(0, 3))
	others := []string{
		"seg-00000009.log.corrupt", "seg-00000009.log.corrupt.1", "seg-00000009.logx",
		"seg-00000009.tmp.corrupt", "seg-9.log", "seg-9.tmp", "seg-000000009.log",
	}
	for _, name := range others {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), frames(bodies(7, 8)), 0o644))
	}
	got, info := replayAll(t, dir)
	require.Equal(t, bodies(0, 3), got)
	require.Equal(t, 1, info.Segment)
	require.ElementsMatch(t, append([]string{"LOCK", "seg-00000001.log"}, others...), listDir(t, dir))
}

func TestScanCorruption(t *testing.T) {
	all := bodies(0, 4)
	good := frames(all)
	second := len(frames(all[:1]))
	for name, tc := range map[string]struct {
		data    []byte
		off     int
		corrupt bool
	}{
		"bad checksum, then whole frames": {
			func() []byte { d := bytes.Clone(good); d[second+9] ^= 1; return d }(), second, true},
		"length zero, then whole frames": {
			func() []byte { d := bytes.Clone(good); clear(d[second : second+4]); return d }(), second, true},
		"length past the end, then whole frames": {
			func() []byte { d := bytes.Clone(good); d[second+2] = 0xff; return d }(), second, true},
		"length over MaxRecord, then whole frames": {
			func() []byte { d := bytes.Clone(good); d[second+3] = 0xff; return d }(), second, true},
		"zeros, then a whole frame": {
			append(append(bytes.Clone(good), make([]byte, 100)...), AppendFrame(nil, []byte("z"))...), len(good), true},
		"a whole frame inside garbage": {
			append(append(bytes.Clone(good), 0xff, 0xfe), AppendFrame(nil, []byte("zz"))[:10]...), len(good), true},
		"bad checksum, then garbage": {
			func() []byte {
				d := bytes.Clone(good)
				d[second+9] ^= 1
				return append(d[:len(frames(all[:2]))], bytes.Repeat([]byte{0xff}, 50)...)
			}(), second, false},
		"bad checksum, then a torn frame": {
			func() []byte { d := bytes.Clone(good); d[second+9] ^= 1; return d[:len(frames(all[:3]))-1] }(), second, false},
		"one byte of header": {append(bytes.Clone(good), 7), len(good), false},
	} {
		t.Run(name, func(t *testing.T) {
			var got [][]byte
			off, err := Scan(tc.data, func(b []byte) error { got = append(got, bytes.Clone(b)); return nil })
			require.Equal(t, tc.off, off)
			require.True(t, bytes.Equal(tc.data[:off], frames(got)))
			if !tc.corrupt {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrCorrupt)
			var ce *CorruptError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, int64(tc.off), ce.Offset)
			require.Empty(t, ce.Path)
			require.NoError(t, ce.Err)
			require.NotEmpty(t, ce.Reason)
		})
	}
}

func TestCorruptErrorMessage(t *testing.T) {
	boom := errors.New("boom")
	e := &CorruptError{Path: "d/seg-00000001.log", Offset: 42, Reason: "record refused by replay", Err: boom}
	require.EqualError(t, e, "journal: corrupt record: d/seg-00000001.log at offset 42: record refused by replay: boom")
	require.ErrorIs(t, e, ErrCorrupt)
	require.ErrorIs(t, e, boom)
	wrapped := fmt.Errorf("open: %w", e)
	var ce *CorruptError
	require.ErrorAs(t, wrapped, &ce)
	require.Same(t, e, ce)
	require.EqualError(t, &CorruptError{Offset: 7, Reason: "frame of length 0"}, "journal: corrupt record at offset 7: frame of length 0")
}

func TestSalvage(t *testing.T) {
	t.Run("locked", func(t *testing.T) {
		dir := t.TempDir()
		j, _, _ := open(t, dir, SyncAlways, 0)
		j.Append(body(0))
		require.NoError(t, j.Commit())
		_, err := Salvage(dir, nil)
		require.ErrorIs(t, err, ErrLocked)
		require.NoError(t, j.Close())
		require.ElementsMatch(t, []string{"LOCK", "seg-00000001.log"}, listDir(t, dir))
	})

	t.Run("clean journal unchanged", func(t *testing.T) {
		dir := t.TempDir()
		all := bodies(0, 6)
		write(t, dir, SyncAlways, all)
		before := readDir(t, dir)
		var seen [][]byte
		info, err := Salvage(dir, func(b []byte) error { seen = append(seen, bytes.Clone(b)); return nil })
		require.NoError(t, err)
		require.Equal(t, SalvageInfo{Records: 6, KeptBytes: int64(hsize + len(frames(all)))}, info)
		require.Equal(t, all, seen)
		require.Equal(t, before, readDir(t, dir))
	})

	t.Run("no segment", func(t *testing.T) {
		dir := t.TempDir()
		info, err := Salvage(dir, nil)
		require.NoError(t, err)
		require.Equal(t, SalvageInfo{}, info)
		require.ElementsMatch(t, []string{"LOCK"}, listDir(t, dir))
	})

	t.Run("missing directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "nope")
		_, err := Salvage(dir, nil)
		require.Error(t, err)
		require.NoDirExists(t, dir)
	})

	t.Run("record replay refuses is cut there", func(t *testing.T) {
		dir := t.TempDir()
		all := bodies(0, 5)
		write(t, dir, SyncAlways, all)
		orig, err := os.ReadFile(segName(dir, 1))
		require.NoError(t, err)
		refuse := errors.New("cannot apply")
		replay := func(b []byte) error {
			if bytes.Equal(b, all[3]) {
				return refuse
			}
			return nil
		}
		_, _, err = Open(dir, SyncAlways, 0, replay)
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
		require.ErrorIs(t, err, refuse)
		require.Equal(t, segName(dir, 1), ce.Path)
		require.Equal(t, int64(hsize+len(frames(all[:3]))), ce.Offset)

		info, err := Salvage(dir, replay)
		require.NoError(t, err)
		kept := hsize + len(frames(all[:3]))
		require.Equal(t, SalvageInfo{Records: 3, KeptBytes: int64(kept), DroppedBytes: int64(len(orig) - kept), Backup: segName(dir, 1) + ".corrupt"}, info)
		backup, err := os.ReadFile(info.Backup)
		require.NoError(t, err)
		require.Equal(t, orig, backup)

		var got [][]byte
		j, oinfo, err := Open(dir, SyncAlways, 0, func(b []byte) error { got = append(got, bytes.Clone(b)); return replay(b) })
		require.NoError(t, err)
		require.Equal(t, all[:3], got, "the records after the refused one are gone too")
		require.Zero(t, oinfo.TruncatedBytes)
		require.NoError(t, j.Close())
	})

	t.Run("torn tail and backup numbering", func(t *testing.T) {
		dir := t.TempDir()
		all := bodies(0, 4)
		full := frames(all)
		seg := segName(dir, 3)
		require.NoError(t, os.WriteFile(seg+".corrupt", []byte("first"), 0o644))
		require.NoError(t, os.WriteFile(seg+".corrupt.1", []byte("second"), 0o644))
		for i, cut := range []int{2, 5} {
			data := full[:len(full)-cut]
			require.NoError(t, os.WriteFile(seg, data, 0o644))
			info, err := Salvage(dir, nil)
			require.NoError(t, err)
			want := fmt.Sprintf("%s.corrupt.%d", seg, 2+i)
			require.Equal(t, SalvageInfo{Records: 3, KeptBytes: int64(len(frames(all[:3]))), DroppedBytes: int64(len(data) - len(frames(all[:3]))), Backup: want}, info)
			backup, err := os.ReadFile(want)
			require.NoError(t, err)
			require.Equal(t, data, backup)
			require.Equal(t, full[:len(frames(all[:3]))], mustRead(t, seg))
		}
		require.Equal(t, []byte("first"), mustRead(t, seg+".corrupt"))
		require.Equal(t, []byte("second"), mustRead(t, seg+".corrupt.1"))
		got, info := replayAll(t, dir)
		require.Equal(t, all[:3], got)
		require.Equal(t, 3, info.Segment)
	})

	t.Run("newest segment only", func(t *testing.T) {
		dir := t.TempDir()
		older := []byte("older, superseded: not replayed")
		bad := successor(2, older, bodies(0, 3))
		bad[hframe+len(frames(bodies(0, 1)))+8] ^= 0x20
		require.NoError(t, os.WriteFile(segName(dir, 1), older, 0o644))
		require.NoError(t, os.WriteFile(segName(dir, 2), bad, 0o644))
		info, err := Salvage(dir, nil)
		require.NoError(t, err)
		require.Equal(t, segName(dir, 2)+".corrupt", info.Backup)
		require.Equal(t, 1, info.Records)
		require.Equal(t, older, mustRead(t, segName(dir, 1)), "Salvage leaves a superseded segment to Open")
		got, oinfo := replayAll(t, dir)
		require.Equal(t, bodies(0, 1), got)
		require.Equal(t, 2, oinfo.Segment)
		require.NoFileExists(t, segName(dir, 1), "Open removed it")
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// refValid is frameAt written again, plainly, for the fuzz tests.
func refValid(data []byte, p int) bool {
	if p+8 > len(data) {
		return false
	}
	n := int(binary.LittleEndian.Uint32(data[p:]))
	if n < 1 || n > MaxRecord || p+8+n > len(data) {
		return false
	}
	return crc32c(data[p+8:p+8+n]) == binary.LittleEndian.Uint32(data[p+4:])
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// nextFrame strides over runs of zeros a page at a time: it must still land
// on the first valid frame, wherever the run ends.
func TestNextFrameAcrossZeros(t *testing.T) {
	fr := AppendFrame(nil, []byte("found"))
	for _, z := range []int{0, 1, 3, 4, 5, 4091, 4095, 4096, 4097, 4099, 4100, 4101, 8191, 8199, 12291, 3*4096 + 4} {
		for _, lead := range [][]byte{{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, make([]byte, 8)} {
			data := append(append(bytes.Clone(lead), make([]byte, z)...), fr...)
			require.Equal(t, len(lead)+z, nextFrame(data, 1), "%d zeros after % x", z, lead)
			require.Equal(t, -1, nextFrame(data[:len(data)-1], 1), "%d zeros, torn frame", z)
			off, err := Scan(data, func([]byte) error { return nil })
			require.Zero(t, off)
			var ce *CorruptError
			require.ErrorAs(t, err, &ce, "%d zeros", z)
		}
	}
}
