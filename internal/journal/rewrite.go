package journal

import (
	"bufio"
	"cmp"
	"fmt"
	"hash/crc32"
	"os"
)

// Rewrite replaces the log with a snapshot: snapshot emits the records that
// rebuild the whole current state, and they become the new live segment,
// on disk before Rewrite returns. The caller must hold still every state
// whose changes it appends (no Append may run meanwhile), so that the
// snapshot covers every record appended so far: those not yet written are
// dropped, and their Commits return nil.
func (j *Journal) Rewrite(snapshot func(emit func(body []byte)) error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.flushing { // a leader is writing the old segment
		j.cond.Wait()
	}
	switch {
	case j.err != nil:
		return j.err
	case j.closed:
		return ErrClosed
	}
	next := j.seg + 1
	h := header{seq: uint64(next), prev: uint64(j.seg), prevLen: uint64(j.segLen), prevCRC: j.segCRC}
	size, sum, renamed, err := writeSegment(j.dir, h, snapshot)
	if err != nil && !renamed {
		j.base = j.size                                // try again when it has doubled once more
		return fmt.Errorf("journal: compact: %w", err) // the old segment is intact: not sticky
	}
	// From here the new segment is the state; failing to move on is sticky.
	var nf *os.File
	if err == nil {
		nf, err = os.OpenFile(j.segPath(next), os.O_WRONLY|os.O_APPEND, 0o644)
	}
	if err != nil {
		j.err = fmt.Errorf("journal: compact: %w", err)
		j.cond.Broadcast()
		return j.err
	}
	j.f.Close()
	old := j.segPath(j.seg)
	j.f, j.seg = nf, next
	j.pend = j.pend[:0]
	j.written, j.synced = j.appended, j.appended
	j.size, j.base = size-headerFrame-endFrame, size-headerFrame-endFrame
	j.segLen, j.segCRC = size, sum
	j.cond.Broadcast()
	_ = os.Remove(old) // if this fails, the next Open proves and removes it
	return nil
}

// writeSnapshot writes h's header, the records snapshot emits and the end
// record that seals them to a new file at path, and fsyncs it. It returns
// the file's size and CRC32C.
func writeSnapshot(path string, h header, snapshot func(emit func([]byte)) error) (int64, uint32, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	var size int64
	var sum uint32
	frame := AppendFrame(nil, h.body())
	write := func() {
		size += int64(len(frame))
		sum = crc32.Update(sum, castagnoli, frame)
		w.Write(frame) // a write error sticks in w and shows at Flush
	}
	write()
	var bad error
	var records uint64
	err = snapshot(func(body []byte) {
		if len(body) == 0 || len(body) > MaxRecord {
			bad = cmp.Or(bad, fmt.Errorf("snapshot record of %d bytes (must be 1..%d)", len(body), MaxRecord))
			return
		}
		if _, isEnd, _ := parseEnd(body); isEnd {
			bad = cmp.Or(bad, fmt.Errorf("snapshot record that starts as the journal's end record does"))
			return
		}
		records++
		frame = AppendFrame(frame[:0], body)
		write()
	})
	err = cmp.Or(err, bad)
	if err == nil {
		frame = AppendFrame(frame[:0], snapshotEnd{records: records, length: uint64(size), crc: sum}.body())
		write()
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = fdatasync(f)
	}
	return size, sum, err
}
