package journal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"runtime"
	"strings"
	"sync"
)

// CorruptError says where a segment cannot be replayed. It matches
// ErrCorrupt (errors.Is), and, if replay refused the record, the error
// replay returned too.
type CorruptError struct {
	Path   string // the segment file ("" from Scan, which has no file)
	Offset int64  // where the bad or refused frame starts; -1: the file as a whole
	Reason string // what is wrong with it
	Err    error  // the error replay returned, or nil for a bad frame
}

// Error describes the damage and where it is.
func (e *CorruptError) Error() string {
	var b strings.Builder
	b.WriteString(ErrCorrupt.Error())
	if e.Path != "" {
		b.WriteString(": " + e.Path)
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, " at offset %d", e.Offset)
	}
	b.WriteString(": " + e.Reason)
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Unwrap returns ErrCorrupt and, if replay refused the record, its error.
func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorrupt, e.Err}
	}
	return []error{ErrCorrupt}
}

// Scan calls fn with the body of every whole, checksummed frame in data, in
// order, and returns the offset just past the last one. It stops at the
// first bad frame (one that runs past the end of data, claims a length of 0
// or over MaxRecord, or fails its checksum). If no valid frame starts
// anywhere after it, that is a torn tail: Scan returns its offset and nil
// (len(data) if there is none). If one does, the data is corrupt: Scan
// returns the bad frame's offset and a *CorruptError. An error from fn also
// stops the scan: Scan returns the refused frame's offset and a
// *CorruptError that wraps fn's error.
//
// The search after a bad frame tries every byte offset, computing a
// checksum only where the length field fits in what is left. Bytes in a
// torn tail that happen to form a valid frame (odds of about 2^-32 for each
// offset whose length fits, or a record whose body holds a framed record)
// make Scan report corruption rather than a tear: the safe direction, since
// Open then refuses instead of cutting, and Salvage can repair it.
func Scan(data []byte, fn func(body []byte) error) (int, error) {
	off, err := scanFrames(data, fn)
	if err != nil {
		return off, &CorruptError{Offset: int64(off), Reason: "record refused by replay", Err: err}
	}
	if off == len(data) {
		return off, nil
	}
	if next := nextFrame(data, off+1); next >= 0 {
		return off, &CorruptError{
			Offset: int64(off),
			Reason: fmt.Sprintf("%s, with a valid frame after it at offset %d", badFrame(data[off:]), next),
		}
	}
	return off, nil // a torn tail
}

// scanFrames calls fn with the body of every valid frame from the start of
// data, and returns the offset of the first frame that is not valid or that
// fn refused (len(data) if none), with fn's error.
//
// Data of more than a few spans has its checksums verified ahead of fn, on
// another goroutine (a tenth or more of a replay's time, which that
// overlaps): fn is called, on the caller's goroutine and in order, only with
// frames verified already, so the outcome is the same as a scan in turn.
// The goroutine has stopped reading data when scanFrames returns.
func scanFrames(data []byte, fn func(body []byte) error) (int, error) {
	if len(data) < 4*verifySpan || runtime.GOMAXPROCS(0) < 2 {
		return scanInTurn(data, fn)
	}
	return scanAhead(data, fn, verifySpan)
}

// verifySpan is about how many bytes of frames scanFrames verifies before
// it hands them on: a few hundred records.
const verifySpan = 64 << 10

// scanAhead is scanFrames with the checksums verified on another goroutine,
// handed on each time about span more bytes of frames are verified.
func scanAhead(data []byte, fn func(body []byte) error, span int) (int, error) {
	verified := make(chan int, 16) // ends of verified spans, rising; closed after the last
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// However this returns (fn may panic), the goroutine stops first: the
	// caller may unmap data after.
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() {
		defer close(verified)
		hand := func(end int) bool { // false: stopped
			select {
			case verified <- end:
				return true
			case <-stop:
				return false
			}
		}
		off, sent := 0, 0
		for {
			body, ok := frameAt(data, off)
			if !ok {
				break
			}
			if off += 8 + len(body); off-sent >= span {
				if !hand(off) {
					return
				}
				sent = off
			}
		}
		if off > sent {
			hand(off)
		}
	})
	off := 0
	for end := range verified {
		for off < end {
			body := data[off+8 : off+8+int(binary.LittleEndian.Uint32(data[off:]))]
			if err := fn(body); err != nil {
				return off, err
			}
			off += 8 + len(body)
		}
	}
	return off, nil
}

// scanInTurn is scanFrames on one goroutine, each frame verified and then
// handed to fn.
func scanInTurn(data []byte, fn func(body []byte) error) (int, error) {
	off := 0
	for {
		body, ok := frameAt(data, off)
		if !ok {
			return off, nil
		}
		if err := fn(body); err != nil {
			return off, err
		}
		off += 8 + len(body)
	}
}

// frameAt returns the body of the frame at data[off:] if it is valid: its
// length is 1..MaxRecord, it fits in data, and its checksum holds.
func frameAt(data []byte, off int) ([]byte, bool) {
	if len(data)-off < 9 {
		return nil, false
	}
	n := binary.LittleEndian.Uint32(data[off:])
	if n == 0 || n > MaxRecord || uint64(n) > uint64(len(data)-off-8) {
		return nil, false
	}
	body := data[off+8 : off+8+int(n)]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[off+4:]) {
		return nil, false
	}
	return body, true
}

// nextFrame returns the first offset p >= from at which a valid frame
// starts, or -1. It tries every byte offset, but computes a checksum only
// where the length field is 1..MaxRecord and fits in what is left, so a
// zero-filled or random tail costs a few instructions a byte.
//
// A false positive, bytes inside a torn tail that happen to look like a
// valid frame (a fitting length and a matching CRC32C, about 2^-32 for each
// offset whose length fits, or a record whose body holds a framed record),
// makes Open refuse a journal it could have cut: the safe direction, and
// Salvage repairs it. A tail built to have many fitting lengths can make
// the search quadratic in the tail's size.
func nextFrame(data []byte, from int) int {
	for p := from; p+9 <= len(data); p++ {
		n := binary.LittleEndian.Uint32(data[p:])
		if n == 0 {
			// In a run of zeros (a tail the file system extended but never
			// wrote), every offset up to the next nonzero byte has length 0:
			// stride over it a page at a time.
			for p+4+len(zeroPage) <= len(data) && bytes.Equal(data[p+4:p+4+len(zeroPage)], zeroPage[:]) {
				p += len(zeroPage)
			}
			continue
		}
		if n > MaxRecord || uint64(n) > uint64(len(data)-p-8) {
			continue // the cheap test, inline: no checksum to compute
		}
		if _, ok := frameAt(data, p); ok {
			return p
		}
	}
	return -1
}

var zeroPage [4096]byte

// badFrame says why the frame at the start of data is not valid.
func badFrame(data []byte) string {
	if len(data) < 8 {
		return fmt.Sprintf("frame header cut short (%d of 8 bytes)", len(data))
	}
	n := binary.LittleEndian.Uint32(data)
	switch {
	case n == 0:
		return "frame of length 0"
	case n > MaxRecord:
		return fmt.Sprintf("frame length %d over MaxRecord", n)
	case uint64(n) > uint64(len(data)-8):
		return fmt.Sprintf("frame length %d runs past the end of the segment", n)
	}
	return "frame checksum mismatch"
}

// AppendFrame appends body, framed, to dst.
func AppendFrame(dst, body []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(body)))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(body, castagnoli))
	return append(dst, body...)
}
