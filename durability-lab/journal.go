package durabilitylab

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Journal is option (a): an append-only log of length-prefixed, CRC32C-checked
// records, one file per segment (seg-NNNNNNNN.log). A new segment starts only
// at compaction, which rewrites the live state (a snapshot record, then one
// put per live message and dead letter) into seg-(N+1).tmp, fsyncs it,
// renames it into place, fsyncs the directory and deletes the older segments.
//
// Frame: len uint32 LE (of body) | crc32c(body) uint32 LE | body.
// Body:  type byte | fields (see the enc* functions).
type Journal struct {
	dir  string
	mode Mode
	lock *os.File

	// MinCompact is the file size below which no automatic compaction runs;
	// <= 0 disables automatic compaction.
	MinCompact int64

	mu        sync.Mutex
	body      []byte // record body scratch (under mu)
	frameBuf  []byte // framed record scratch (sync-each, none)
	buf       []byte // group: framed records waiting for the flusher
	cur       *batch
	live      map[uint64]uint32 // seq -> size of its put record (live + dead letters)
	liveBytes int64
	size      int64 // bytes appended (on disk or pending)
	closed    bool

	wmu   sync.Mutex // the file
	f     *os.File
	segNo int

	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	spare   []byte
}

type batch struct {
	done chan struct{}
	err  error
}

const (
	rPut byte = iota + 1
	rAck
	rDeliver
	rNack
	rDead
	rRedrive
	rSnap
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenJournal opens (creating) dir, takes its LOCK and replays the segments.
func OpenJournal(dir string, mode Mode) (*Journal, *State, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	j := &Journal{dir: dir, mode: mode, lock: lock, MinCompact: 4 << 20, live: map[uint64]uint32{}}
	st, err := j.recover()
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	if mode == SyncGroup {
		j.cur = &batch{done: make(chan struct{})}
		j.kick = make(chan struct{}, 1)
		j.stop = make(chan struct{})
		j.stopped = make(chan struct{})
		go j.flusher()
	}
	return j, st, nil
}

func (j *Journal) segPath(n int) string {
	return filepath.Join(j.dir, fmt.Sprintf("seg-%08d.log", n))
}

func (j *Journal) segments() ([]int, error) {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, err
	}
	var segs []int
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") { // an interrupted compaction
			os.Remove(filepath.Join(j.dir, name))
			continue
		}
		var n int
		if _, err := fmt.Sscanf(name, "seg-%08d.log", &n); err == nil {
			segs = append(segs, n)
		}
	}
	sort.Ints(segs)
	return segs, nil
}

func (j *Journal) recover() (*State, error) {
	segs, err := j.segments()
	if err != nil {
		return nil, err
	}
	st := newState()
	first := 0 // index of the last segment that starts with a snapshot
	for i, n := range segs {
		good, snap, err := replayFile(j.segPath(n), st)
		if err != nil {
			return nil, err
		}
		if snap {
			first = i
		}
		fi, err := os.Stat(j.segPath(n))
		if err != nil {
			return nil, err
		}
		if good < fi.Size() {
			if i != len(segs)-1 {
				return nil, fmt.Errorf("durabilitylab: corrupt record in %s at offset %d (not the last segment)", j.segPath(n), good)
			}
			// Torn or corrupt tail of the active segment: cut it off.
			if err := os.Truncate(j.segPath(n), good); err != nil {
				return nil, err
			}
			st.TruncatedBytes = fi.Size() - good
		}
	}
	for _, n := range segs[:first] { // superseded by a complete snapshot
		os.Remove(j.segPath(n))
	}
	if len(segs) == 0 {
		segs = []int{1}
		first = 0
	}
	segs = segs[first:]
	j.segNo = segs[len(segs)-1]
	for _, n := range segs {
		if fi, err := os.Stat(j.segPath(n)); err == nil {
			j.size += fi.Size()
		}
	}
	j.live = make(map[uint64]uint32, len(st.Live)+len(st.Dead))
	for seq, m := range st.Live {
		j.account(seq, m)
	}
	for seq, m := range st.Dead {
		j.account(seq, m)
	}
	j.f, err = os.OpenFile(j.segPath(j.segNo), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return st, syncDir(j.dir)
}

func (j *Journal) account(seq uint64, m *Msg) {
	n := uint32(8 + putSize(m))
	j.live[seq] = n
	j.liveBytes += int64(n)
}

func (j *Journal) unaccount(seq uint64) {
	if n, ok := j.live[seq]; ok {
		j.liveBytes -= int64(n)
		delete(j.live, seq)
	}
}

// replayFile applies every valid record of path to st and returns the offset
// just past the last valid one, and whether the file starts with a snapshot.
func replayFile(path string, st *State) (good int64, snap bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false, err
	}
	off := 0
	for off+8 <= len(data) {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n == 0 || off+8+n > len(data) {
			break // torn: length points past the end
		}
		body := data[off+8 : off+8+n]
		if crc32.Checksum(body, castagnoli) != sum {
			break // corrupt
		}
		if body[0] == rSnap {
			if off == 0 {
				snap = true
			}
			*st = *newState()
		} else if !applyRecord(body, st) {
			break
		}
		off += 8 + n
	}
	return int64(off), snap, nil
}

func applyRecord(b []byte, st *State) (ok bool) {
	defer func() {
		if recover() != nil { // a malformed body that passed the CRC
			ok = false
		}
	}()
	le := binary.LittleEndian
	switch b[0] {
	case rPut:
		m := decPut(b)
		if m.Dead {
			st.Dead[m.Seq] = m
		} else {
			st.Live[m.Seq] = m
		}
	case rAck:
		for p := b[1:]; len(p) >= 8; p = p[8:] {
			st.ack(le.Uint64(p))
		}
	case rDeliver:
		st.deliver(le.Uint64(b[1:]), le.Uint32(b[9:]))
	case rNack:
		st.nack(le.Uint64(b[1:]), le.Uint32(b[9:]), int64(le.Uint64(b[13:])))
	case rDead:
		seq, att := le.Uint64(b[1:]), le.Uint32(b[9:])
		p := b[13:]
		reason, p := getStr(p)
		lastErr, _ := getStr(p)
		st.dead(seq, att, reason, lastErr)
	case rRedrive:
		st.redrive(le.Uint64(b[1:]))
	default:
		return false
	}
	return true
}

func putStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func getStr(b []byte) (string, []byte) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		panic("short string")
	}
	return string(b[k : k+int(n)]), b[k+int(n):]
}

// encPut: rPut | seq u64 | prio i8 | attempts u32 | notBefore i64 | dead u8 |
// reason | lastErr | key (uvarint-prefixed) | payload (the rest).
func encPut(b []byte, m *Msg) []byte {
	le := binary.LittleEndian
	b = append(b, rPut)
	b = le.AppendUint64(b, m.Seq)
	b = append(b, byte(m.Priority))
	b = le.AppendUint32(b, m.Attempts)
	b = le.AppendUint64(b, uint64(m.NotBefore))
	d := byte(0)
	if m.Dead {
		d = 1
	}
	b = append(b, d)
	b = putStr(b, m.Reason)
	b = putStr(b, m.LastErr)
	b = putStr(b, m.Key)
	return append(b, m.Payload...)
}

func uvarintLen(x int) int { return (bits.Len64(uint64(x)|1) + 6) / 7 }

// putSize is len(encPut(nil, m)) without encoding.
func putSize(m *Msg) int {
	return 23 + uvarintLen(len(m.Reason)) + len(m.Reason) + uvarintLen(len(m.LastErr)) + len(m.LastErr) +
		uvarintLen(len(m.Key)) + len(m.Key) + len(m.Payload)
}

func decPut(b []byte) *Msg {
	le := binary.LittleEndian
	m := &Msg{Seq: le.Uint64(b[1:]), Priority: int8(b[9]), Attempts: le.Uint32(b[10:]),
		NotBefore: int64(le.Uint64(b[14:])), Dead: b[22] == 1}
	p := b[23:]
	m.Reason, p = getStr(p)
	m.LastErr, p = getStr(p)
	m.Key, p = getStr(p)
	m.Payload = append([]byte(nil), p...)
	return m
}

func frame(dst, body []byte) []byte {
	le := binary.LittleEndian
	dst = le.AppendUint32(dst, uint32(len(body)))
	dst = le.AppendUint32(dst, crc32.Checksum(body, castagnoli))
	return append(dst, body...)
}

// commit frames j.body and makes it durable per the mode. Called with j.mu
// held; unlocks it.
func (j *Journal) commit() error {
	if j.closed {
		j.mu.Unlock()
		return os.ErrClosed
	}
	if j.mode == SyncGroup {
		j.buf = frame(j.buf, j.body)
		j.size += int64(8 + len(j.body))
		b := j.cur
		err := j.maybeCompactLocked()
		j.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case j.kick <- struct{}{}:
		default:
		}
		<-b.done
		return b.err
	}
	defer j.mu.Unlock()
	j.frameBuf = frame(j.frameBuf[:0], j.body)
	j.wmu.Lock()
	_, err := j.f.Write(j.frameBuf) // one write(2): in the page cache once it returns
	if err == nil && j.mode == SyncEach {
		err = syscall.Fdatasync(int(j.f.Fd()))
	}
	j.wmu.Unlock()
	if err != nil {
		return err
	}
	j.size += int64(len(j.frameBuf))
	return j.maybeCompactLocked()
}

func (j *Journal) flusher() {
	defer close(j.stopped)
	var last time.Time // start of the previous fsync
	for {
		stopping := false
		select {
		case <-j.kick:
		case <-j.stop:
			stopping = true
		}
		if d := GroupWindow - time.Since(last); d > 0 && !stopping {
			time.Sleep(d)
		}
		j.mu.Lock()
		if len(j.buf) == 0 {
			j.mu.Unlock()
			if stopping {
				return
			}
			continue
		}
		buf, b := j.buf, j.cur
		j.buf, j.cur = j.spare[:0], &batch{done: make(chan struct{})}
		j.mu.Unlock()
		last = time.Now()
		j.wmu.Lock()
		_, err := j.f.Write(buf)
		if err == nil {
			err = syscall.Fdatasync(int(j.f.Fd()))
		}
		j.wmu.Unlock()
		b.err = err
		close(b.done)
		j.spare = buf
		if stopping {
			return
		}
	}
}

func (j *Journal) begin(typ byte) []byte { return append(j.body[:0], typ) }

// Publish records a new message.
func (j *Journal) Publish(m *Msg) error {
	j.mu.Lock()
	j.body = encPut(j.body[:0], m)
	n := uint32(8 + len(j.body))
	j.live[m.Seq] = n
	j.liveBytes += int64(n)
	return j.commit()
}

// PublishBatch records several messages with one write and one fsync: one
// frame per message, so replay and compaction are unchanged.
func (j *Journal) PublishBatch(ms []*Msg) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return os.ErrClosed
	}
	j.frameBuf = j.frameBuf[:0]
	for _, m := range ms {
		j.body = encPut(j.body[:0], m)
		n := uint32(8 + len(j.body))
		j.live[m.Seq] = n
		j.liveBytes += int64(n)
		j.frameBuf = frame(j.frameBuf, j.body)
	}
	if j.mode == SyncGroup {
		j.buf = append(j.buf, j.frameBuf...)
		j.size += int64(len(j.frameBuf))
		b := j.cur
		j.mu.Unlock()
		select {
		case j.kick <- struct{}{}:
		default:
		}
		<-b.done
		return b.err
	}
	defer j.mu.Unlock()
	j.wmu.Lock()
	_, err := j.f.Write(j.frameBuf)
	if err == nil && j.mode == SyncEach {
		err = syscall.Fdatasync(int(j.f.Fd()))
	}
	j.wmu.Unlock()
	if err != nil {
		return err
	}
	j.size += int64(len(j.frameBuf))
	return j.maybeCompactLocked()
}

// Ack records the deletion of seqs (one record for the batch).
func (j *Journal) Ack(seqs ...uint64) error {
	j.mu.Lock()
	b := j.begin(rAck)
	for _, s := range seqs {
		b = binary.LittleEndian.AppendUint64(b, s)
		j.unaccount(s)
	}
	j.body = b
	return j.commit()
}

// Deliver records the attempt number of a delivery.
func (j *Journal) Deliver(seq uint64, attempt uint32) error {
	j.mu.Lock()
	b := binary.LittleEndian.AppendUint64(j.begin(rDeliver), seq)
	j.body = binary.LittleEndian.AppendUint32(b, attempt)
	return j.commit()
}

// Nack records a failed attempt and the not-before time.
func (j *Journal) Nack(seq uint64, attempts uint32, notBefore int64) error {
	j.mu.Lock()
	b := binary.LittleEndian.AppendUint64(j.begin(rNack), seq)
	b = binary.LittleEndian.AppendUint32(b, attempts)
	j.body = binary.LittleEndian.AppendUint64(b, uint64(notBefore))
	return j.commit()
}

// DeadLetter moves a message to the dead-letter store.
func (j *Journal) DeadLetter(seq uint64, attempts uint32, reason, lastErr string) error {
	j.mu.Lock()
	b := binary.LittleEndian.AppendUint64(j.begin(rDead), seq)
	b = binary.LittleEndian.AppendUint32(b, attempts)
	b = putStr(b, reason)
	j.body = putStr(b, lastErr)
	if n, ok := j.live[seq]; ok { // the put grows by the two strings
		d := uint32(len(reason) + len(lastErr))
		j.live[seq] = n + d
		j.liveBytes += int64(d)
	}
	return j.commit()
}

// Redrive puts a dead letter back, attempts reset.
func (j *Journal) Redrive(seq uint64) error {
	j.mu.Lock()
	j.body = binary.LittleEndian.AppendUint64(j.begin(rRedrive), seq)
	return j.commit()
}

func (j *Journal) maybeCompactLocked() error {
	if j.MinCompact <= 0 || j.size < j.MinCompact || j.size-j.liveBytes < j.size/2 {
		return nil
	}
	return j.compactLocked()
}

// Compact rewrites the live records into a new segment now.
func (j *Journal) Compact() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.compactLocked()
}

func (j *Journal) compactLocked() error {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	// Everything written so far is in the file (records still pending in
	// group mode go after the snapshot, in order).
	st := newState()
	for n := j.segNo; n >= 1; n-- {
		if _, err := os.Stat(j.segPath(n)); err != nil {
			break
		}
		if n == 1 || !fileExists(j.segPath(n-1)) {
			for k := n; k <= j.segNo; k++ {
				if _, _, err := replayFile(j.segPath(k), st); err != nil {
					return err
				}
			}
			break
		}
	}
	next := j.segNo + 1
	tmp := strings.TrimSuffix(j.segPath(next), ".log") + ".tmp"
	tf, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(tf, 1<<20)
	var body, fr []byte
	write := func(b []byte) {
		fr = frame(fr[:0], b)
		w.Write(fr)
	}
	write([]byte{rSnap})
	for _, set := range []map[uint64]*Msg{st.Live, st.Dead} {
		for _, m := range set {
			body = encPut(body[:0], m)
			write(body)
		}
	}
	if err := w.Flush(); err != nil {
		tf.Close()
		return err
	}
	if err := tf.Sync(); err != nil {
		tf.Close()
		return err
	}
	fi, _ := tf.Stat()
	tf.Close()
	if err := os.Rename(tmp, j.segPath(next)); err != nil {
		return err
	}
	if err := syncDir(j.dir); err != nil {
		return err
	}
	nf, err := os.OpenFile(j.segPath(next), os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	j.f.Close()
	for n := j.segNo; n >= 1 && fileExists(j.segPath(n)); n-- {
		os.Remove(j.segPath(n))
	}
	j.f, j.segNo = nf, next
	j.size = fi.Size() + int64(len(j.buf))
	return nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Size is the bytes appended to the live segments (pending included).
func (j *Journal) Size() (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.size, nil
}

// Close flushes pending group-commit records and releases the directory. It
// does not fsync in SyncNone mode: closing is then a process crash.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	if j.mode == SyncGroup {
		close(j.stop)
		<-j.stopped
	}
	err := j.f.Close()
	j.lock.Close()
	return err
}
