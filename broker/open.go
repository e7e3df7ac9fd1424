package broker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/internal/journal"
	"github.com/leasebus/leasebus/queue"
)

// SyncMode is when a durable broker's calls wait for the disk (see Open).
type SyncMode uint8

const (
	// SyncAlways: a call that changes state (Publish, Poll, Ack, Nack, …)
	// returns once its record is on disk (written and fdatasync'd).
	// Concurrent calls share one fsync, so throughput grows with the
	// number of callers; one caller at a time pays about one fsync per call.
	// What a call returned nil for survives a crash of the process or of
	// the machine (on a disk that honours flushes).
	SyncAlways SyncMode = iota
	// SyncNone: a call returns once its record is written to the file (the
	// operating system's page cache), without waiting for the disk. What a
	// call returned nil for survives a crash of the process (kill -9, a
	// panic), but an operating-system crash or power loss can lose any
	// recent suffix of calls. Call Broker.Sync to make everything so far
	// durable.
	SyncNone
)

// String returns "always" or "none".
func (m SyncMode) String() string {
	switch m {
	case SyncAlways:
		return "always"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncMode(%d)", uint8(m))
}

// WithSync sets a durable broker's SyncMode (default SyncAlways). It is an
// option of Open only: New rejects it.
func WithSync(m SyncMode) Option {
	return Option{func(cfg *config) {
		if m > SyncNone {
			cfg.sub.fail(backend.Invalid("WithSync: unknown mode %v", m))
			return
		}
		cfg.sync, cfg.durableOnly = m, "WithSync"
	}}
}

// defaultCompactMin is the journal size below which a durable broker does
// not compact (see WithCompactMin).
const defaultCompactMin = journal.DefaultMinCompact

// WithCompactMin sets the journal size, in bytes, below which a durable
// broker never compacts it (default 4 MiB). Above it,
// the journal is rewritten as a snapshot of the live state whenever it has
// doubled since the last snapshot, so the file stays within about twice
// the live state and each byte is rewritten a bounded number of times.
// n < 0 turns automatic compaction off (Broker.Compact still works). It is
// an option of Open only: New rejects it.
func WithCompactMin(n int64) Option {
	return Option{func(cfg *config) {
		switch {
		case n < 0:
			cfg.compactMin = 0 // the journal's "never"
		case n == 0:
			cfg.compactMin = 1
		default:
			cfg.compactMin = n
		}
		cfg.durableOnly = "WithCompactMin"
	}}
}

// RecoveryInfo describes what Open found in its directory.
type RecoveryInfo struct {
	Records        int   // journal records replayed
	TruncatedBytes int64 // a torn or corrupt tail cut off the journal (0: none; see Open)
	Topics         int
	Subscriptions  int
	// Messages restored to subscriptions, counted once per subscription;
	// one leased on its last attempt at the crash counts here, and is then
	// dead-lettered.
	Messages    int
	DeadLetters int // dead letters restored to the store
}

// store is a durable broker's journal and the bookkeeping around it.
type store[T any] struct {
	b          *Broker[T]       // for a queue's Commit
	j          *journal.Journal // nil for OpenCopy's, which only decodes
	copyOf     string           // OpenCopy's directory
	codec      queue.Codec[T]
	info       RecoveryInfo
	compacting atomic.Bool
	nextSub    uint32 // under Broker.mu
	// active counts the calls that may append to the journal outside a
	// queue's lock (publish, redrive, dead-letter routing): close waits
	// for them before it closes the journal, so none of their records is
	// dropped. Add only under Broker.mu, while the broker is open.
	active sync.WaitGroup

	envs   sync.Pool // of *envBuf[T]: a publish's encoded envelope, reused
	groups sync.Pool // of *group[T], reused

	mu     sync.Mutex // a leaf: guards e, grp and limbo
	e      enc
	grp    []byte                   // a group's record being built
	limbo  map[dlKey]limboLetter[T] // dead letters on their way from a queue to the store or a dead-letter topic
	nlimbo uint64                   // letters that entered limbo so far
}

// envBuf holds a message's encoded envelope while a publish offers it:
// a pointer, so that passing it as a queue note allocates nothing. With
// grp set, the offers add their puts to that group instead of appending
// them (see group).
type envBuf[T any] struct {
	b   []byte
	grp *group[T]
}

// encode encodes m's envelope into a buffer from the pool; give it back
// with recycle once every subscription has logged it.
func (st *store[T]) encode(m *queue.Message[T]) (*envBuf[T], error) {
	eb, _ := st.envs.Get().(*envBuf[T])
	if eb == nil {
		eb = new(envBuf[T])
	}
	var err error
	if eb.b, err = envelope(eb.b[:0], m, st.codec); err != nil {
		st.recycle(eb)
		return nil, err
	}
	if n := len(eb.b); n > maxEnvelope {
		st.recycle(eb)
		return nil, backend.Invalid("message of %d bytes encoded, at most %d in a durable broker", n, maxEnvelope)
	}
	return eb, nil
}

// maxEnvelope bounds an encoded message, so that every record that carries
// it fits the journal's limit: a put adds its fields and a last error (at
// most 4 KiB), a dedup record a topic name (255 bytes) and an ID
// (MaxDedupID).
const maxEnvelope = journal.MaxRecord - 8<<10

func (st *store[T]) recycle(eb *envBuf[T]) {
	eb.grp = nil
	if cap(eb.b) <= 64<<10 { // keep the pool from holding on to huge payloads
		st.envs.Put(eb)
	}
}

// letter is a dead letter with the journal id and topic of the
// subscription that made it (and, while Open restores the store, its place
// in the store's order).
type letter[T any] struct {
	seq   uint64
	sub   uint32
	topic string
	dl    core.Letter[T]
}

type dlKey struct {
	sub uint32
	id  uuid.UUID
}

type limboLetter[T any] struct {
	seq   uint64 // arrival order: the order the store will get them in
	sub   uint32
	topic string
	dl    core.Letter[T]
}

// Open returns a durable broker kept in dir (created if missing): every
// change is logged to a journal there, and opening the directory again
// after a crash or a Close brings back its topics, subscriptions, messages
// and dead letters. codec turns payloads into bytes and back. Options are
// New's, plus WithSync and WithCompactMin.
//
// What comes back:
//   - every message a Publish returned nil for that was not acked, dropped
//     or dead-lettered, with its place, priority, key, headers, attempts,
//     delay and TTL (absolute times on the broker's clock: a backoff does
//     not restart, and a time already past is due at once);
//   - a message that was leased at the crash as if its lease had expired:
//     visible at once with its attempt counted, or dead-lettered
//     (ReasonMaxAttempts) if that was its last;
//   - the dead-letter store, in order;
//   - publish dedup IDs (WithDedupID) still inside their window, so a job
//     that publishes its input again after a crash, with an ID per item,
//     does not queue twice what it had published before. The window is
//     five minutes unless WithDedupWindow says otherwise, for a durable
//     broker too: a job reopened later than that queues its input again.
//     A job that restarts sets the window to its horizon (and
//     WithDedupLimit to its input's size);
//   - subscriptions with their options, but without their filters (which
//     are functions): a recovered subscription is bound again when the
//     application calls Subscribe for it, which returns it (not
//     ErrAlreadySubscribed) as stored; an explicit option that differs
//     from the stored setting is a *ConfigMismatchError unless WithUpdate
//     asks for the change (see Subscribe). Declare subscriptions again
//     before publishing: until then a recovered subscription takes every
//     message of its topic.
//
// What does not: leases (no lease ID survives), counters (Stats start
// from zero, and restored messages count as Published) and the tokens of
// rate limits (WithRateLimit, WithKeyRateLimit): each bucket starts empty,
// so a limit holds across a restart or a crash, and the first delivery
// after it waits for a token.
//
// An operation that changes more than one thing is one journal record, so
// that after a crash it is there whole or not at all: a publish that fans
// out or carries a dedup ID (the message on every subscription that took
// it, with its ID), a batch with dedup IDs or fan-out (up to 16 MiB of
// records; each message always whole), a dead letter routed to its
// dead-letter topic (there, and gone from its subscription) or redriven
// onto a subscription of its name created again, a Subscription.Forward
// (the new message, and the old one gone), a discard of dead letters. A
// Redrive of many letters is atomic per letter.
//
// SyncMode says what "returned nil" is worth (see SyncAlways, SyncNone).
//
// Limits: a durable broker refuses (queue.ErrInvalidArgument, nothing
// changed) a message whose encoded envelope (payload, headers, key, topic)
// is over 64 MiB − 8 KiB, so that every record fits the journal's 64 MiB
// frames; a broker from New has no such limit. A dedup ID is at most
// MaxDedupID bytes, and a failure's text is kept up to 4 KiB, in both.
//
// A journal that ends in a torn record (a crash in the middle of a write,
// or a disk that lost an unsynced tail: a bad record with no whole record
// anywhere after it) is cut at its last whole record, and
// RecoveryInfo.TruncatedBytes says how much; no record a call had returned
// nil for under SyncAlways can be in that tail. Anything else that does not
// read back is corruption, and Open refuses it with a *CorruptError
// (matching ErrCorrupt) that says which file and where, and changes no byte:
// a damaged record with whole records after it (a flipped bit, a lost
// page), a record that passes its checksum but cannot be decoded, a payload
// that codec cannot decode, or a journal of another format or version.
// Salvage is the explicit step that keeps what is readable.
//
// One broker at a time may hold dir: a second Open, in this process or
// another, fails with an error matching ErrLocked until the first is
// closed or its process ends. The lock is flock(2), so dir must be on a
// local file system. Durable mode needs a Unix system.
//
// A write or fsync error is sticky: the call that met it and every later
// call that changes state return it, because what reached the disk is
// unknown; Close and Open again to carry on from what did.
//
// Open reads the journal's live segment by mapping it into memory, and
// lets go of the mapping before it returns. A codec that keeps the bytes
// it decodes (a []byte payload that is the input itself) gets a copy, so
// nothing a restored message holds points into the file.
func Open[T any](dir string, codec queue.Codec[T], opts ...Option) (*Broker[T], error) {
	if codec == nil {
		return nil, backend.Invalid("Open: nil codec")
	}
	if dir == "" {
		return nil, backend.Invalid("Open: empty directory name")
	}
	b, cfg, err := newBroker[T](opts)
	if err != nil {
		return nil, err
	}
	mode := journal.SyncAlways
	if cfg.sync == SyncNone {
		mode = journal.SyncNone
	}
	rs := newReplay()
	j, info, err := journal.Open(dir, mode, cfg.compactMin, rs.apply)
	if err != nil {
		switch {
		case errors.Is(err, journal.ErrLocked):
			return nil, fmt.Errorf("open %s: %w", dir, ErrLocked)
		case errors.Is(err, journal.ErrCorrupt):
			return nil, fmt.Errorf("open %s: %w", dir, corruptError(err))
		}
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	st := &store[T]{b: b, j: j, codec: codec, limbo: make(map[dlKey]limboLetter[T])}
	st.info = RecoveryInfo{Records: info.Records, TruncatedBytes: info.TruncatedBytes}
	b.dur = st
	b.dead.forget, b.dead.discard = st.forget, st.discard
	if rs.records == 0 { // a new journal (or one whose first record was torn): say what it is
		st.record(func(e *enc) { e.start(recFormat).str(formatMagic); e.uint(formatVersion) })
	}
	if err := b.restore(rs); err != nil {
		j.Discard() // leave the directory as it was
		b.Close()
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	j.Replayed() // rs, which nothing holds now, had views of the segment
	return b, nil
}

// CorruptError is the error Open returns for a journal it cannot read. It
// matches ErrCorrupt.
type CorruptError struct {
	Path   string // the journal file
	Offset int64  // where the damaged or refused record starts; -1 if not known
	Reason string // what is wrong there
	Err    error  // the underlying error (a codec's, say), or nil
}

// Error says what is wrong and where.
func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("%v: %s at offset %d: %s", ErrCorrupt, e.Path, e.Offset, e.Reason)
	if e.Offset < 0 {
		msg = fmt.Sprintf("%v: %s: %s", ErrCorrupt, e.Path, e.Reason)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrCorrupt and the underlying error, if any.
func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorrupt, e.Err}
	}
	return []error{ErrCorrupt}
}

// corruptError turns the journal's report into a *CorruptError.
func corruptError(err error) error {
	var je *journal.CorruptError
	if !errors.As(err, &je) {
		return &CorruptError{Offset: -1, Reason: "unreadable", Err: err}
	}
	return &CorruptError{Path: je.Path, Offset: je.Offset, Reason: je.Reason, Err: je.Err}
}

// SalvageInfo describes what Salvage kept and cut.
type SalvageInfo struct {
	Records      int    // journal records kept
	KeptBytes    int64  // the journal's size after Salvage
	DroppedBytes int64  // bytes cut off its end
	Backup       string // a copy of the journal as it was ("" if nothing changed)
	// Resealed: the cut fell inside the snapshot a compaction wrote, so
	// Salvage closed what was kept of it with a new end record (Open
	// refuses a cut snapshot as corruption: a snapshot is synced before it
	// is renamed into place, so no crash cuts one).
	Resealed bool
	// SetAside lists the files that did not belong to the journal (see
	// Open), each renamed to its new name, which ends in .corrupt or
	// .corrupt.N. Nothing is deleted.
	SetAside []string
}

// Salvage repairs a journal directory that Open refuses with ErrCorrupt
// because of a damaged record or one that does not decode, or because of a
// file that does not belong to the journal, as an explicit step. It first
// renames aside, never deletes, each file of the journal's name space that
// Open refused as not belonging (SalvageInfo.SetAside names them). Then it
// keeps the longest readable prefix of the journal (every record
// before the first that cannot be read) and cuts the rest, after copying
// the journal as it was, byte for byte, to a file beside it whose name
// SalvageInfo.Backup gives. What was after the cut is lost to the broker:
// messages published after it are gone, and acks after it are undone (those
// messages come back). A journal with nothing to cut is left alone. Salvage
// takes the directory's lock: ErrLocked while a broker has it open. It does
// not cut at a payload the codec cannot decode (it has no codec): give Open
// a codec that can, or cut by hand at the offset the CorruptError names.
func Salvage(dir string) (SalvageInfo, error) {
	if dir == "" {
		return SalvageInfo{}, backend.Invalid("Salvage: empty directory name")
	}
	si, err := journal.Salvage(dir, newReplay().apply)
	if errors.Is(err, journal.ErrLocked) {
		return SalvageInfo{}, fmt.Errorf("salvage %s: %w", dir, ErrLocked)
	}
	if err != nil {
		return SalvageInfo{}, fmt.Errorf("salvage %s: %w", dir, err)
	}
	return SalvageInfo(si), nil
}

// Recovery returns what Open (or OpenCopy) found; the zero value for a
// broker from New.
func (b *Broker[T]) Recovery() RecoveryInfo {
	if st := b.durable(); st != nil {
		return st.info
	}
	if b.copied != nil {
		return *b.copied
	}
	return RecoveryInfo{}
}

// Sync makes every change so far durable on disk, whatever the SyncMode.
// It is a no-op on a broker from New.
func (b *Broker[T]) Sync() error {
	st := b.durable()
	if st == nil {
		return nil
	}
	if b.isClosed() {
		return fmt.Errorf("sync: %w", queue.ErrClosed)
	}
	return closedAs(st.j.Sync())
}

// closedAs reports the journal's ErrClosed (a call racing Close) as the
// queue.ErrClosed every call after Close returns.
func closedAs(err error) error {
	if errors.Is(err, journal.ErrClosed) {
		return fmt.Errorf("%w (%w)", queue.ErrClosed, err)
	}
	return err
}

// Compact rewrites the journal now as a snapshot of the live state (a
// durable broker also does this by itself; see WithCompactMin). Every other
// call waits while it writes. It is a no-op on a broker from New.
func (b *Broker[T]) Compact() error {
	if b.durable() == nil {
		return nil
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("compact: %w", queue.ErrClosed)
	}
	defer b.mu.Unlock()
	return b.compactLocked()
}

func (b *Broker[T]) isClosed() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.closed
}

// commit waits for what was recorded to be as durable as the mode
// promises, then compacts if the journal has grown enough. Call it with
// no lock held.
func (b *Broker[T]) commit() error {
	st := b.durable()
	if st == nil {
		return nil
	}
	if err := st.j.Commit(); err != nil {
		return closedAs(err)
	}
	if st.j.Due() && st.compacting.CompareAndSwap(false, true) {
		// Best effort: the call's own records are durable already. A
		// failed compaction leaves the journal as it was and is tried again
		// when it has doubled.
		if b.mu.TryLock() { // not when a caller of ours holds it
			if !b.closed {
				_ = b.compactLocked()
			}
			b.mu.Unlock()
		}
		st.compacting.Store(false)
	}
	return nil
}
