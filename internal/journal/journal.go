// Package journal is the append-only log under the durable broker: records
// framed with their length and a CRC32C, in one segment file at a time, a
// directory lock, group commit and compaction by snapshot. It knows nothing
// of what a record means; package broker encodes and replays them.
//
// A directory holds LOCK and seg-NNNNNNNN.log. Only the newest segment is
// live. Every segment is written whole under seg-NNNNNNNN.tmp, fsynced,
// renamed into place and the directory fsynced: the first when the journal
// is created, each later one by Rewrite, as a snapshot that supersedes the
// one before it, which is removed only then. Every segment starts with a
// header that names it and the segment it supersedes, with that segment's
// size and checksum (segment.go), and Open proves the whole chain before it
// replays or removes anything: a file in the name space that does not
// belong (a stray or half-copied segment, a segment that another does not
// continue from, a .tmp that is not the next segment's) is corruption, and
// Open changes nothing. Names outside the name space are not looked at.
//
// Frame: length of body (uint32 LE) | CRC32C of body (uint32 LE) | body.
//
// A segment's snapshot (the records its Rewrite wrote, none for a
// journal's first segment) ends with an end record that says what precedes
// it: a cut inside a snapshot is corruption, never a torn tail, since no
// crash can cut a file that was synced before its rename.
//
// Damage: a bad frame (one that runs past the end of the file, claims a
// length of 0 or over MaxRecord, or fails its checksum) with no valid frame
// anywhere after it is a torn tail, what a crash in the middle of a write
// leaves: Open cuts it off and says so in Info.TruncatedBytes. A bad frame
// with a valid frame after it is corruption (a flipped bit, a lost page):
// cutting there would throw away records that were acknowledged, so Open
// refuses with a *CorruptError (matching ErrCorrupt) and changes nothing on
// disk. Salvage is the explicit, separate step that keeps the good prefix
// and moves the original segment aside. (A crash can also, on some file
// systems, leave a hole of zeros inside the last, unsynced write with later
// parts of that write on disk: that reads as corruption too, though none of
// its records was acknowledged, and Salvage is the way out.)
package journal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// Mode is when Commit fsyncs.
type Mode uint8

const (
	// SyncAlways: Commit returns once the records are on disk (write and
	// fdatasync). Callers that commit at the same time share one fsync: the
	// first becomes the leader and flushes for all that appended before it
	// started, the others wait (group commit with no window).
	SyncAlways Mode = iota
	// SyncNone: Commit returns once the records are written to the file
	// (the page cache), which survives the process but not the machine.
	SyncNone
)

// MaxRecord is the largest record body Append takes; a frame that claims
// more is corrupt.
const MaxRecord = 64 << 20

// maxYields bounds the scheduling rounds a SyncAlways leader waits for
// more records before it writes and fsyncs.
const maxYields = 4

// DefaultMinCompact is the segment size below which Due never reports
// compaction due.
const DefaultMinCompact = 4 << 20

var (
	// ErrLocked: another open journal (in this process or another) holds
	// the directory.
	ErrLocked = errors.New("journal: directory is locked by another open broker")
	// ErrCorrupt: the live segment cannot be replayed whole: a bad frame
	// with valid frames after it, or a record that passed its checksum but
	// that replay refused. Every such error is a *CorruptError.
	ErrCorrupt = errors.New("journal: corrupt record")
	// ErrClosed: the journal is closed.
	ErrClosed = errors.New("journal: closed")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Info describes what Open found.
type Info struct {
	Segment        int   // the live segment's number
	Records        int   // records replayed
	Bytes          int64 // the segment's size after any truncation
	TruncatedBytes int64 // a torn tail cut off the segment (0: none)
	// Legacy: the live segment is of the format before segment headers
	// (it opens alone; the next Rewrite writes a segment with a header).
	Legacy bool
}

// Journal is an open journal directory. Append, Commit, Sync and Size are
// safe for concurrent use.
type Journal struct {
	dir        string
	mode       Mode
	lock       *os.File
	minCompact int64

	mu       sync.Mutex // guards everything below; never held during a write or fsync
	cond     sync.Cond  // on mu: broadcast when a flush ends, a Rewrite ends, or the journal closes
	pend     []byte     // framed records not yet written
	spare    []byte
	appended int64 // bytes appended since Open (a logical position)
	written  int64 // appended bytes in the file
	synced   int64 // appended bytes on disk
	flushing bool
	syncs    uint64 // fdatasyncs done by commits
	waiting  int    // commits waiting for a leader's flush
	err      error  // sticky: the first write or fsync error
	closed   bool
	f        *os.File
	seg      int
	segLen   int64  // bytes written to the live segment's file
	segCRC   uint32 // their CRC32C: the next segment's header names them
	size     int64  // the live segment's record bytes, pending ones included (its header not counted)
	base     int64  // its size after the last Rewrite (or at Open)
	release  func() // lets go of the segment as Open replayed it (nil: done)
}

// Open locks dir (creating it), proves its segments (see the package
// comment), replays the newest segment through replay, record by record,
// removes the segments it supersedes, and opens it for appending. A second
// Open of the same directory, before Close, fails with ErrLocked.
//
// A file of the name space that does not belong (a segment without a whole
// header, one whose header names another number, an older segment that is
// not byte for byte the one its successor was made from, a .tmp that is not
// the next segment's) is corruption: a *CorruptError that names the file,
// with Offset -1, before any record is replayed.
//
// A torn tail (a bad frame, that is one that runs past the end of the file,
// claims a length of 0 or over MaxRecord, or fails its checksum, with no
// valid frame anywhere after it) ends the replay and is cut off;
// Info.TruncatedBytes says how much. A bad frame followed by any valid frame
// is corruption, not a tear, and a record that replay refuses is corrupt
// too: in both cases Open fails with a *CorruptError (matching ErrCorrupt,
// and giving the segment and the offset of the frame), releases the lock and
// changes nothing on disk: no segment, snapshot or .tmp is cut or removed
// (only LOCK is created if it was missing). replay may have been called for
// the records before that frame. Salvage can then cut the journal back to
// its good prefix.
//
// The bodies replay gets are views of the segment, which Open maps into
// memory rather than copy (where the system is a Unix): they stay good
// until Replayed, Close or Discard, and replay must copy what it keeps
// longer.
func Open(dir string, mode Mode, minCompact int64, replay func(body []byte) error) (*Journal, Info, error) {
	if mode > SyncNone {
		return nil, Info{}, fmt.Errorf("journal: unknown mode %d", mode)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, Info{}, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, Info{}, err
	}
	j := &Journal{dir: dir, mode: mode, lock: lock, minCompact: minCompact}
	j.cond.L = &j.mu
	info, err := j.recover(replay)
	if err != nil {
		lock.Close()
		return nil, Info{}, err
	}
	return j, info, nil
}

func (j *Journal) segPath(n int) string {
	return filepath.Join(j.dir, segFileName(n))
}

func segFileName(n int) string { return fmt.Sprintf("seg-%08d.log", n) }

// Append adds a record to the log. It does not write: the next Commit (or
// Sync) does, for every record appended before it. It is cheap enough to
// call under the caller's own locks, which is how the log's order follows
// the order of the changes it records. A body larger than MaxRecord, or an
// Append after Close or after a write error, is dropped, and every Commit
// from then on reports why (it can never cover the dropped record).
func (j *Journal) Append(body []byte) {
	j.mu.Lock()
	switch {
	case j.closed || j.err != nil:
		j.appended++ // a position never written: later Commits fail
	case len(body) == 0 || len(body) > MaxRecord:
		j.err = fmt.Errorf("journal: record of %d bytes (must be 1..%d)", len(body), MaxRecord)
		j.appended++
	default:
		j.pend = AppendFrame(j.pend, body)
		n := int64(8 + len(body))
		j.appended += n
		j.size += n
	}
	j.mu.Unlock()
}

// Fail makes err the journal's sticky error (unless it has one): a caller
// that could not build a record it had to append reports it so.
func (j *Journal) Fail(err error) {
	j.mu.Lock()
	if j.err == nil {
		j.err = fmt.Errorf("journal: %w", err)
	}
	j.mu.Unlock()
}

// Commit returns once every record appended before the call is written, and
// in SyncAlways mode on disk. A write or fsync error is sticky: this and
// every later Commit return it, because what reached the disk is no longer
// known (reopen the directory to recover what did).
func (j *Journal) Commit() error { return j.commit(j.mode == SyncAlways) }

// Sync is Commit that always fsyncs, whatever the mode.
func (j *Journal) Sync() error { return j.commit(true) }

func (j *Journal) commit(durable bool) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	target := j.appended
	for {
		done := j.written
		if durable {
			done = j.synced
		}
		switch {
		case done >= target: // written before a Close or an error: as durable as promised
			return nil
		case j.closed:
			return ErrClosed
		case j.err != nil:
			return j.err
		case j.flushing:
			j.waiting++
			j.cond.Wait()
			j.waiting--
			continue
		}
		// Lead: write everything pending (others' records too), then fsync.
		j.flushing = true
		if durable && j.waiting > 0 {
			// Others are committing too: yield before taking the buffer,
			// so that callers about to append share this fsync, a
			// group-commit window of scheduling rounds, not a timer. It
			// yields again while a round brought new records (at most
			// maxYields). A caller alone does not wait at all.
			for range maxYields {
				before := j.appended
				j.mu.Unlock()
				runtime.Gosched()
				j.mu.Lock()
				if j.appended == before {
					break
				}
			}
		}
		buf, end, f, sum := j.pend, j.appended, j.f, j.segCRC
		j.pend = j.spare[:0]
		j.mu.Unlock()
		var err error
		if len(buf) > 0 {
			_, err = f.Write(buf) // one write(2): in the page cache once it returns
			sum = crc32.Update(sum, castagnoli, buf)
		}
		if err == nil && durable {
			err = fdatasync(f)
		}
		j.mu.Lock()
		if err == nil { // only the leader (flushing) writes to the file
			j.segLen += int64(len(buf))
			j.segCRC = sum
		}
		if err == nil && durable {
			j.syncs++
		}
		j.flushing = false
		if cap(buf) <= 1<<20 {
			j.spare = buf[:0]
		} else {
			j.spare = nil // never hand the buffer j.pend now uses out again
		}
		if err != nil {
			j.err = fmt.Errorf("journal: %w", err)
		} else {
			j.written = max(j.written, end)
			if durable {
				j.synced = max(j.synced, end)
			}
		}
		j.cond.Broadcast()
	}
}

// Path returns the live segment's file name.
func (j *Journal) Path() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.segPath(j.seg)
}

// Segment returns the live segment's number: a Rewrite moves it on, so a
// caller can tell whether records it appended earlier are still in the
// live segment.
func (j *Journal) Segment() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seg
}

// Syncs returns how many fdatasyncs commits have done since Open.
func (j *Journal) Syncs() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.syncs
}

// Size returns the bytes of the live segment's records (their frames, not
// the segment's header), records not yet written included.
func (j *Journal) Size() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.size
}

// Due reports whether the live segment has grown to at least twice its size
// after the last Rewrite, and to at least the minimum given to Open: time to
// compact. Growth by doubling keeps compaction's cost, amortized, a constant
// per byte written. A minimum <= 0 means never.
func (j *Journal) Due() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.minCompact > 0 && !j.closed && j.err == nil && j.size >= max(j.minCompact, 2*j.base)
}

// Rebase tells Due how large a snapshot of the current state would be, as
// the caller estimates it after replaying: the log is due for compaction
// once it is twice that (and at least the minimum). Without it, Due counts
// from the log's size at Open, so a log reopened often would never be
// compacted.
func (j *Journal) Rebase(n int64) {
	j.mu.Lock()
	j.base = max(n, 0)
	j.mu.Unlock()
}

// Close writes and fsyncs what was appended (in every mode: a clean close
// is durable), closes the segment and releases the directory. Later calls
// return ErrClosed; Close twice returns nil.
func (j *Journal) Close() error {
	err := j.Sync()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	for j.flushing { // a Commit racing Close: let its write finish before the file goes
		j.cond.Wait()
	}
	j.closed = true
	j.releaseLocked()
	j.cond.Broadcast()
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	if cerr := j.lock.Close(); err == nil { // closing the descriptor drops the flock
		err = cerr
	}
	return err
}

// Replayed tells the journal that nothing holds a body that Open handed
// to replay any more: it lets go of the segment those bodies are views of.
// Close and Discard do it too. It may be called more than once.
func (j *Journal) Replayed() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.releaseLocked()
}

func (j *Journal) releaseLocked() {
	if j.release != nil {
		j.release()
		j.release = nil
	}
}

// Discard closes the journal without writing what was appended and not yet
// written, and releases the directory: for a caller that found, after Open,
// that it cannot use the journal, and must leave it as it was.
func (j *Journal) Discard() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.flushing {
		j.cond.Wait()
	}
	if j.closed {
		return
	}
	j.closed = true
	j.releaseLocked()
	j.pend = nil
	j.cond.Broadcast()
	j.f.Close()
	j.lock.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
