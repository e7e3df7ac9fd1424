package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
)

// Every segment begins with a header frame that says what it is: its own
// number, and the number, size and CRC32C of the segment it supersedes (the
// one it is a snapshot of; none for a journal's first). A segment file is
// made whole and synced under a .tmp name and only then renamed into place,
// so a .log without a whole header was not written by this package.
//
// Recovery proves the chain before it trusts or deletes anything: the newest
// segment's header must name itself, and every older segment must be,
// byte for byte, the one its successor's header describes. Only such a
// segment is superseded and removed. A segment of the format before headers
// (a "legacy" segment: a whole first frame that is not a header) opens when
// it stands alone; its first Rewrite writes a headed segment.
//
// Header body: headerMagic | version (1 byte) | seq | prev | prevLen (each
// uint64 LE) | prevCRC (uint32 LE).
//
// A segment of version 2 (every segment this package writes) proves its own
// snapshot: after the records the snapshot emitted comes one end record,
// which says how many records the snapshot holds and the size and CRC32C of
// every byte before it. A segment is synced before it is renamed, so a crash
// cannot cut it inside its snapshot: Open and Read refuse a segment whose
// snapshot has no whole end record, or one that does not match, as
// corruption, and only the records appended after the end record can form
// a torn tail. A version 1 segment (written before end records) cannot
// prove its snapshot's extent: it opens as before, and its next Rewrite
// writes a version 2 segment.
//
// End record body: endMagic | records | length (each uint64 LE) | crc
// (uint32 LE), where length is the offset of the end record's own frame.

// headerMagic starts every header. Its first byte is one no record of
// package broker starts with, so a legacy segment's first record cannot be
// read as a header.
const headerMagic = "\xffleasebus-segment"

// endMagic starts a snapshot's end record; like headerMagic, its first byte
// is one no record of package broker starts with.
const endMagic = "\xffleasebus-snapshot-end"

const (
	headerV1      = 1 // no end record: the snapshot's extent is not proven
	headerVersion = 2 // the snapshot is sealed by an end record
	headerLen     = len(headerMagic) + 1 + 3*8 + 4
	headerFrame   = int64(8 + headerLen) // a header's frame: where a segment's records start
	endLen        = len(endMagic) + 2*8 + 4
	endFrame      = int64(8 + endLen)
)

// header is a segment's header.
type header struct {
	seq     uint64 // this segment's number
	prev    uint64 // the segment it supersedes; 0: none
	prevLen uint64 // that segment's size in bytes
	prevCRC uint32 // and the CRC32C of its bytes
	sealed  bool   // version 2: its snapshot ends with an end record (what body writes)
}

func (h header) body() []byte {
	b := make([]byte, 0, headerLen)
	b = append(b, headerMagic...)
	b = append(b, headerVersion)
	b = binary.LittleEndian.AppendUint64(b, h.seq)
	b = binary.LittleEndian.AppendUint64(b, h.prev)
	b = binary.LittleEndian.AppendUint64(b, h.prevLen)
	return binary.LittleEndian.AppendUint32(b, h.prevCRC)
}

// parseHeader reads a segment's first record: ok is false for a record that
// is not a header (a legacy segment's first record); err says why one that
// claims to be a header cannot be read.
func parseHeader(body []byte) (h header, ok bool, err error) {
	if !bytes.HasPrefix(body, []byte(headerMagic)) {
		return header{}, false, nil
	}
	b := body[len(headerMagic):]
	switch {
	case len(b) < 1 || (b[0] != headerVersion && b[0] != headerV1):
		return header{}, true, fmt.Errorf("segment header of an unknown version")
	case len(body) != headerLen:
		return header{}, true, fmt.Errorf("segment header of %d bytes, want %d", len(body), headerLen)
	}
	h.sealed = b[0] == headerVersion
	b = b[1:]
	h.seq = binary.LittleEndian.Uint64(b)
	h.prev = binary.LittleEndian.Uint64(b[8:])
	h.prevLen = binary.LittleEndian.Uint64(b[16:])
	h.prevCRC = binary.LittleEndian.Uint32(b[24:])
	return h, true, nil
}

// snapshotEnd is a snapshot's end record: what the bytes before it hold.
type snapshotEnd struct {
	records uint64 // the snapshot's records (the header not counted)
	length  uint64 // the bytes before the end record's frame, header included
	crc     uint32 // their CRC32C
}

func (e snapshotEnd) body() []byte {
	b := make([]byte, 0, endLen)
	b = append(b, endMagic...)
	b = binary.LittleEndian.AppendUint64(b, e.records)
	b = binary.LittleEndian.AppendUint64(b, e.length)
	return binary.LittleEndian.AppendUint32(b, e.crc)
}

// parseEnd reads a record that starts with endMagic (isEnd false for any
// other); err says why one that claims to be an end record cannot be read.
func parseEnd(body []byte) (e snapshotEnd, isEnd bool, err error) {
	if !bytes.HasPrefix(body, []byte(endMagic)) {
		return snapshotEnd{}, false, nil
	}
	if len(body) != endLen {
		return snapshotEnd{}, true, fmt.Errorf("snapshot end record of %d bytes, want %d", len(body), endLen)
	}
	b := body[len(endMagic):]
	return snapshotEnd{
		records: binary.LittleEndian.Uint64(b),
		length:  binary.LittleEndian.Uint64(b[8:]),
		crc:     binary.LittleEndian.Uint32(b[16:]),
	}, true, nil
}

// describes reports whether e is the end record of a snapshot whose
// bytes (header included) are before, holding records records.
func (e snapshotEnd) describes(before []byte, records int) bool {
	return e.length == uint64(len(before)) && e.records == uint64(records) && e.crc == crc32.Checksum(before, castagnoli)
}

// replaySegment calls replay with every record of c's live segment after
// its header, in order, the end record left out, and checks that a sealed
// segment's snapshot is whole: its end record is there, and says what
// precedes it. It returns the offset just past the last whole record (a
// torn tail after the snapshot starts there), the number of records
// replayed, and the CRC32C of the bytes before end (what the next
// segment's header names). Damage is a *CorruptError whose Offset counts
// from the start of the file and whose Path is path.
func replaySegment(c chain, path string, replay func([]byte) error) (end, records int, sum uint32, err error) {
	sealedAt := -1       // the end record's offset, once seen
	var sealedSum uint32 // the CRC32C of the bytes before it, which the end record proved
	off := c.start       // the current frame's offset
	var bad *CorruptError
	n, err := Scan(c.data[c.start:], func(body []byte) error {
		at := off
		off += 8 + len(body)
		e, isEnd, perr := parseEnd(body)
		switch {
		case !isEnd:
			records++
			return replay(body)
		case perr != nil:
			bad = &CorruptError{Offset: int64(at), Reason: perr.Error()}
		case !c.sealed:
			bad = &CorruptError{Offset: int64(at), Reason: "a snapshot end record in a segment whose header announces none"}
		case sealedAt >= 0:
			bad = &CorruptError{Offset: int64(at), Reason: fmt.Sprintf("a second snapshot end record (the first is at offset %d)", sealedAt)}
		case !e.describes(c.data[:at], records):
			bad = &CorruptError{Offset: int64(at), Reason: fmt.Sprintf(
				"the snapshot end record says %d records in %d bytes with another checksum; %d records in %d bytes precede it",
				e.records, e.length, records, at)}
		default:
			sealedAt, sealedSum = at, e.crc
			return nil
		}
		return bad
	})
	if bad != nil {
		err = bad
	} else if err == nil && c.sealed && sealedAt < 0 {
		err = &CorruptError{Offset: int64(c.start + n), Reason: fmt.Sprintf(
			"the segment's snapshot is cut short: %d records and no end record before offset %d, of %d bytes (a snapshot is synced before its rename: no crash cuts one)",
			records, c.start+n, len(c.data))}
	} else if ce := (*CorruptError)(nil); errors.As(err, &ce) {
		ce.Offset += int64(c.start)
	}
	if ce := (*CorruptError)(nil); errors.As(err, &ce) {
		ce.Path = path
		return 0, 0, 0, err
	}
	end = c.start + n
	if sealedAt >= 0 { // the end record's sum covers the snapshot: one pass over the rest
		return end, records, crc32.Update(sealedSum, castagnoli, c.data[sealedAt:end]), err
	}
	return end, records, crc32.Checksum(c.data[:end], castagnoli), err
}

// chain is what proving a directory found.
type chain struct {
	seg     int    // the live segment; 0: none yet (a new journal)
	data    []byte // its bytes
	release func() // lets go of data, if mapped: nothing may read it after
	start   int    // where its records start: after the header (0 for legacy)
	legacy  bool   // it has no header
	sealed  bool   // its header is of version 2: an end record closes its snapshot
	stale   []string
}

// errNotOurs marks a CorruptError about a file that does not belong to the
// journal (as opposed to damage inside the live segment): Salvage sets such
// a file aside.
var errNotOurs = errors.New("not part of this journal")

func notOurs(path, format string, args ...any) *CorruptError {
	return &CorruptError{Path: path, Offset: -1, Reason: fmt.Sprintf(format, args...), Err: errNotOurs}
}

// prove checks every file of dir's name space (the segments segs, in order,
// and the .tmp files tmps) before anything trusts or deletes one: see the
// comment at the top of this file. It changes nothing. stale lists what
// Open may remove once the live segment has replayed: the superseded
// segments and an interrupted Rewrite's .tmp.
//
// mapped: the live segment is mapped (mapSegment), not read, and the
// chain's release unmaps it; on an error, prove releases it itself.
func prove(dir string, segs []int, tmps []int, mapped bool) (c chain, err error) {
	path := func(n int) string { return filepath.Join(dir, segFileName(n)) }
	newest := 0
	if len(segs) > 0 {
		newest = segs[len(segs)-1]
	}
	c.release = func() {}
	for _, n := range tmps {
		p := filepath.Join(dir, tmpFileName(n))
		if err := regular(p); err != nil {
			return chain{}, err
		}
		if n != newest+1 {
			return chain{}, notOurs(p, "a .tmp that is not the next segment's (%s is the newest)", segFileName(newest))
		}
		c.stale = append(c.stale, p) // a Rewrite (or the first segment's creation) cut short
	}
	if newest == 0 && len(segs) == 0 {
		return c, nil
	}
	c.seg = newest
	var data []byte
	if mapped {
		var release func()
		if data, release, err = mapSegment(path(newest)); err != nil {
			return chain{}, err
		}
		defer func() {
			if err != nil {
				release()
			}
		}()
		c.release = release
	} else if data, err = readSegment(path(newest)); err != nil {
		return chain{}, err
	}
	c.data = data
	first, whole := frameAt(data, 0)
	if !whole {
		return chain{}, notOurs(path(newest), "no whole first record (%s): not a segment this journal wrote", badFrame(data))
	}
	h, ok, err := parseHeader(first)
	switch {
	case err != nil:
		return chain{}, notOurs(path(newest), "%v", err)
	case !ok:
		// A legacy segment holds the state only alone: two of them cannot
		// be told apart by anything but their names.
		if len(segs) > 1 {
			return chain{}, notOurs(path(segs[len(segs)-2]),
				"a segment beside %s, which is of the format before segment headers and so cannot prove which of them holds the state",
				segFileName(newest))
		}
		c.legacy = true
		return c, nil
	case h.seq != uint64(newest):
		return chain{}, notOurs(path(newest), "its header says it is segment %d", h.seq)
	}
	c.start = 8 + len(first)
	c.sealed = h.sealed
	// Walk back: each older segment must be exactly what its successor was
	// made from.
	for i := len(segs) - 2; i >= 0; i-- {
		n := segs[i]
		if h.prev == 0 || h.prev != uint64(n) {
			return chain{}, notOurs(path(n), "%s does not continue from it", segFileName(segs[i+1]))
		}
		old, err := readSegment(path(n))
		if err != nil {
			return chain{}, err
		}
		if uint64(len(old)) != h.prevLen || crc32.Checksum(old, castagnoli) != h.prevCRC {
			return chain{}, notOurs(path(n), "%s was made from a segment of %d bytes with another checksum; this one has %d",
				segFileName(segs[i+1]), h.prevLen, len(old))
		}
		c.stale = append(c.stale, path(n))
		h = header{} // a legacy segment continues from nothing
		if body, whole := frameAt(old, 0); whole {
			if oh, ok, err := parseHeader(body); ok && err == nil {
				h = oh
			}
		}
	}
	return c, nil
}

// regular returns a *CorruptError (not ours) if path is anything but a
// regular file: this package writes segments only as files, and a
// directory, link or device under a segment's name is not one of them.
func regular(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return notOurs(path, "not a regular file (%v)", fi.Mode().Type())
	}
	return nil
}

// readSegment reads the segment file at path, refusing anything but a
// regular file (see regular).
func readSegment(path string) ([]byte, error) {
	if err := regular(path); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

func tmpFileName(n int) string { return strings.TrimSuffix(segFileName(n), ".log") + ".tmp" }

// writeSegment writes a segment under its .tmp name: h's header, then the
// records snapshot emits, then fsync, then renames it into place and fsyncs
// the directory. It returns the segment's size and CRC32C. On an error
// nothing is left under either name (the .tmp is removed; if the rename
// happened and the directory's fsync failed, the .log stays, whole).
func writeSegment(dir string, h header, snapshot func(emit func([]byte)) error) (size int64, sum uint32, renamed bool, err error) {
	n := int(h.seq)
	tmp := filepath.Join(dir, tmpFileName(n))
	size, sum, err = writeSnapshot(tmp, h, snapshot)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, segFileName(n)))
	}
	if err != nil {
		os.Remove(tmp)
		return 0, 0, false, err
	}
	return size, sum, true, syncDir(dir)
}
