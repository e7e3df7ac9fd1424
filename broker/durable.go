package broker

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/internal/journal"
	"github.com/leasebus/leasebus/internal/vocab"
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
	return brokerOption(func(cfg *config) {
		if m > SyncNone {
			cfg.sub.fail(core.Invalid("WithSync: unknown mode %v", m))
			return
		}
		cfg.sync, cfg.durableOnly = m, "WithSync"
	})
}

// DefaultCompactMin is the journal size below which a durable broker does
// not compact (see WithCompactMin).
const DefaultCompactMin = journal.DefaultMinCompact

// WithCompactMin sets the journal size, in bytes, below which a durable
// broker never compacts it (default DefaultCompactMin, 4 MiB). Above it,
// the journal is rewritten as a snapshot of the live state whenever it has
// doubled since the last snapshot, so the file stays within about twice
// the live state and each byte is rewritten a bounded number of times.
// n < 0 turns automatic compaction off (Broker.Compact still works). It is
// an option of Open only: New rejects it.
func WithCompactMin(n int64) Option {
	return brokerOption(func(cfg *config) {
		switch {
		case n < 0:
			cfg.compactMin = 0 // the journal's "never"
		case n == 0:
			cfg.compactMin = 1
		default:
			cfg.compactMin = n
		}
		cfg.durableOnly = "WithCompactMin"
	})
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
	j          *journal.Journal
	codec      Codec[T]
	info       RecoveryInfo
	compacting atomic.Bool
	nextSub    uint32 // under Broker.mu

	envs sync.Pool // of *envBuf: a publish's encoded envelope, reused

	mu     sync.Mutex // a leaf: guards e and limbo
	e      enc
	limbo  map[dlKey]limboLetter[T] // dead letters on their way from a queue to the store or a dead-letter topic
	nlimbo uint64                   // letters that entered limbo so far
}

// envBuf holds a message's encoded envelope while a publish offers it:
// a pointer, so that passing it as a queue note allocates nothing.
type envBuf struct{ b []byte }

// encode encodes m's envelope into a buffer from the pool; give it back
// with recycle once every subscription has logged it.
func (st *store[T]) encode(m *queue.Message[T]) (*envBuf, error) {
	eb, _ := st.envs.Get().(*envBuf)
	if eb == nil {
		eb = new(envBuf)
	}
	var err error
	if eb.b, err = envelope(eb.b[:0], m, st.codec); err != nil {
		st.recycle(eb)
		return nil, err
	}
	if n := len(eb.b); n > maxEnvelope {
		st.recycle(eb)
		return nil, core.Invalid("message of %d bytes encoded, at most %d in a durable broker", n, maxEnvelope)
	}
	return eb, nil
}

// maxEnvelope bounds an encoded message, so that every record that carries
// it fits the journal's limit: a put adds its fields and a last error (at
// most 4 KiB), a dedup record a topic name (255 bytes) and an ID
// (MaxDedupID).
const maxEnvelope = journal.MaxRecord - 8<<10

func (st *store[T]) recycle(eb *envBuf) {
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
//     does not queue twice what it had published before (a crash between
//     a publish's message and its dedup record loses only the dedup);
//   - subscriptions with their options, but without their filters (which
//     are functions): a recovered subscription is bound again when the
//     application calls Subscribe for it with its options, which returns it
//     (not ErrAlreadySubscribed) and applies the options from then on.
//     Declare subscriptions again before publishing: until then a
//     recovered subscription takes every message of its topic.
//
// What does not: leases (no lease ID survives) and counters (Stats start
// from zero, and restored messages count as Published).
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
func Open[T any](dir string, codec Codec[T], opts ...Option) (*Broker[T], error) {
	if codec == nil {
		return nil, core.Invalid("Open: nil codec")
	}
	if dir == "" {
		return nil, core.Invalid("Open: empty directory name")
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
	b.store = &store[T]{j: j, codec: codec, limbo: make(map[dlKey]limboLetter[T])}
	b.store.info = RecoveryInfo{Records: info.Records, TruncatedBytes: info.TruncatedBytes}
	b.dead.forget = b.store.forget
	if rs.records == 0 { // a new journal (or one whose first record was torn): say what it is
		b.store.record(func(e *enc) { e.start(recFormat).str(formatMagic); e.uint(formatVersion) })
	}
	if err := b.restore(rs); err != nil {
		j.Discard() // leave the directory as it was
		b.Close()
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
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
	DroppedBytes int64  // bytes cut off its end (0: nothing changed)
	Backup       string // a copy of the journal as it was ("" if nothing changed)
}

// Salvage repairs a journal directory that Open refuses with ErrCorrupt
// because of a damaged record or one that does not decode, as an explicit
// step: it keeps the longest readable prefix of the journal (every record
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
		return SalvageInfo{}, core.Invalid("Salvage: empty directory name")
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

// Recovery returns what Open found (the zero value for a broker from New).
func (b *Broker[T]) Recovery() RecoveryInfo {
	if b.store == nil {
		return RecoveryInfo{}
	}
	return b.store.info
}

// Sync makes every change so far durable on disk, whatever the SyncMode.
// It is a no-op on a broker from New.
func (b *Broker[T]) Sync() error {
	if b.store == nil {
		return nil
	}
	if b.isClosed() {
		return fmt.Errorf("sync: %w", queue.ErrClosed)
	}
	return closedAs(b.store.j.Sync())
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
	if b.store == nil {
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
	st := b.store
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

// record appends one broker-level record built by fill.
func (st *store[T]) record(fill func(e *enc)) {
	st.mu.Lock()
	st.e.b = st.e.b[:0]
	fill(&st.e)
	st.j.Append(st.e.b)
	st.mu.Unlock()
}

// recordDedup appends a dedup record: topic, ID, and the message's
// envelope, or only its ID (ref) if a put of it is in the journal already.
func (st *store[T]) recordDedup(topic, id string, env []byte, ref bool) {
	st.mu.Lock()
	st.e.start(recDedup).strs(topic, id)
	if ref {
		st.e.b[0] = recDedupRef
		st.e.b = append(st.e.b, env[:16]...) // the message ID, first in an envelope
	} else {
		st.e.b = append(st.e.b, env...)
	}
	st.j.Append(st.e.b)
	st.mu.Unlock()
}

// forget records that a dead letter left the store.
func (st *store[T]) forget(sub uint32, id uuid.UUID) {
	st.mu.Lock()
	delete(st.limbo, dlKey{sub, id})
	st.j.Append(st.e.start(recForget).key(sub, id).b)
	st.mu.Unlock()
}

// landed takes a dead letter out of limbo: it is in the store now.
func (st *store[T]) landed(sub uint32, id uuid.UUID) {
	st.mu.Lock()
	delete(st.limbo, dlKey{sub, id})
	st.mu.Unlock()
}

// subRec is a subscription's Recorder: it logs the queue's changes
// under the queue's lock, with a buffer of its own.
type subRec[T any] struct {
	b     *Broker[T]
	st    *store[T]
	id    uint32
	topic string
	e     enc // under the queue's lock
}

func appendPut[T any](e *enc, sub uint32, en core.Entry[T], env []byte) {
	e.start(recPut).sub(sub)
	e.uint(en.Place)
	e.uint(uint64(en.Attempts))
	var flags byte
	if en.InFlight {
		flags |= putInFlight
	}
	if en.Dead {
		flags |= putDead
	}
	e.byte(flags)
	e.time(en.VisibleAt)
	e.dur(en.TTL)
	e.time(en.ExpiresAt)
	e.str(en.LastError)
	e.byte(byte(en.Reason))
	e.time(en.DeadAt)
	e.b = append(e.b, env...)
}

func (r *subRec[T]) Offered(en core.Entry[T], note any) {
	var env []byte
	if eb, ok := note.(*envBuf); ok {
		env = eb.b
	} else { // a redrive: encode it again
		var err error
		if env, err = envelope(nil, en.Message, r.st.codec); err != nil {
			r.st.j.Fail(fmt.Errorf("encode message %v: %w", en.Message.ID, err))
			return
		}
	}
	appendPut(&r.e, r.id, en, env)
	r.st.j.Append(r.e.b)
}

func (r *subRec[T]) Delivered(ds []queue.Delivery[T]) {
	for len(ds) > 0 { // a record of at most maxDeliverIDs, so any Poll fits the journal's limit
		chunk := ds[:min(len(ds), maxDeliverIDs)]
		ds = ds[len(chunk):]
		e := r.e.start(recDeliver).sub(r.id)
		e.uint(uint64(len(chunk)))
		for i := range chunk {
			e.id(chunk[i].ID)
		}
		r.st.j.Append(e.b)
	}
}

// maxDeliverIDs bounds the message IDs in one deliver record (16 bytes
// each: 1 MiB).
const maxDeliverIDs = 1 << 16

func (r *subRec[T]) Retried(m *queue.Message[T], visibleAt time.Time, lastErr string) {
	e := r.e.start(recRetry).key(r.id, m.ID)
	e.time(visibleAt)
	e.str(lastErr)
	r.st.j.Append(e.b)
}

func (r *subRec[T]) Released(m *queue.Message[T]) {
	r.st.j.Append(r.e.start(recRelease).key(r.id, m.ID).b)
}

func (r *subRec[T]) Removed(m *queue.Message[T]) {
	r.st.j.Append(r.e.start(recRemove).key(r.id, m.ID).b)
}

func (r *subRec[T]) DeadLettered(dl core.Letter[T]) {
	e := r.e.start(recDead).key(r.id, dl.Message.ID)
	e.byte(byte(dl.Reason))
	e.uint(uint64(dl.Attempts))
	e.str(dl.LastError)
	e.time(dl.At)
	r.st.mu.Lock()
	r.st.nlimbo++
	r.st.limbo[dlKey{r.id, dl.Message.ID}] = limboLetter[T]{seq: r.st.nlimbo, sub: r.id, topic: r.topic, dl: dl}
	r.st.j.Append(e.b)
	r.st.mu.Unlock()
}

func (r *subRec[T]) Purged() { r.st.j.Append(r.e.start(recPurge).sub(r.id).b) }

func (r *subRec[T]) Commit() error { return r.b.commit() }

// compactLocked rewrites the journal as a snapshot. It holds still every
// state that records: the broker (b.mu, held by the caller), every queue
// (Freeze), the dead-letter store and the limbo.
func (b *Broker[T]) compactLocked() error {
	st := b.store
	subs := b.allLocked()
	slices.SortFunc(subs, func(x, y *Subscription[T]) int { return cmp.Compare(x.jid, y.jid) })
	held := make([][]core.Entry[T], len(subs))
	for i, s := range subs {
		es, thaw := s.q.Freeze()
		defer thaw()
		held[i] = es
	}
	b.dead.mu.Lock()
	defer b.dead.mu.Unlock()
	topics := slices.Sorted(maps.Keys(b.topics))
	now := b.clock.Now()
	dedups := make([][]*dedupEntry[T], len(topics))
	for i, name := range topics {
		d := &b.topics[name].dedup
		d.mu.Lock()
		defer d.mu.Unlock()
		dedups[i] = d.liveLocked(now, b.dedupWindow)
	}
	st.mu.Lock()
	defer st.mu.Unlock()

	// The dead letters in the order the store has (or will have) them:
	// the store's and those a Redrive has taken out, by id, then those on
	// their way to it, by arrival.
	var dead []letter[T]
	stored := slices.Concat(b.dead.items[b.dead.head:], slices.Collect(maps.Values(b.dead.taking)))
	slices.SortFunc(stored, func(x, y storedLetter[T]) int { return cmp.Compare(x.id, y.id) })
	for _, it := range stored {
		dead = append(dead, letter[T]{sub: it.sub, topic: it.topic, dl: it.dl})
	}
	limbo := slices.SortedFunc(maps.Values(st.limbo), func(x, y limboLetter[T]) int { return cmp.Compare(x.seq, y.seq) })
	for _, l := range limbo {
		dead = append(dead, letter[T]{sub: l.sub, topic: l.topic, dl: l.dl})
	}
	live := make(map[uint32]bool, len(subs))
	for _, s := range subs {
		live[s.jid] = true
	}
	return st.j.Rewrite(func(emit func([]byte)) error {
		var e enc
		e.start(recFormat).str(formatMagic)
		e.uint(formatVersion)
		emit(e.b)
		for _, name := range topics {
			emit(e.start(recTopic).strs(name).b)
		}
		for _, s := range subs {
			emit(e.start(recSub).sub(s.jid).strs(s.topic, s.name).specs(s.spec).b)
		}
		gone := map[uint32]bool{}
		for _, d := range dead { // the subscriptions of dead letters that outlived them
			if !live[d.sub] && !gone[d.sub] {
				gone[d.sub] = true
				emit(e.start(recSub).sub(d.sub).strs(d.topic, d.dl.Subscription).specs(subSpec{}).b)
				emit(e.start(recUnsub).sub(d.sub).b)
			}
		}
		var env []byte
		var err error
		put := func(sub uint32, en core.Entry[T]) error {
			if env, err = envelope(env[:0], en.Message, st.codec); err != nil {
				return fmt.Errorf("encode message %v: %w", en.Message.ID, err)
			}
			appendPut(&e, sub, en, env)
			emit(e.b)
			return nil
		}
		for _, d := range dead {
			m := d.dl.Message
			en := core.Entry[T]{Message: &m, Place: d.dl.Place, Attempts: d.dl.Attempts, TTL: d.dl.TTL,
				LastError: d.dl.LastError, Dead: true, Reason: d.dl.Reason, DeadAt: d.dl.At}
			if err := put(d.sub, en); err != nil {
				return err
			}
		}
		for i, s := range subs {
			for _, en := range held[i] {
				if err := put(s.jid, en); err != nil {
					return err
				}
			}
		}
		var heldIDs map[uuid.UUID]bool // messages with a put in the snapshot
		for i, name := range topics {  // after the messages, as a publish writes them
			for _, dd := range dedups[i] {
				if heldIDs == nil {
					heldIDs = map[uuid.UUID]bool{}
					for _, d := range dead {
						heldIDs[d.dl.Message.ID] = true
					}
					for _, es := range held {
						for _, en := range es {
							heldIDs[en.Message.ID] = true
						}
					}
				}
				e.start(recDedup).strs(name, dd.id)
				if heldIDs[dd.msg.ID] {
					e.b[0] = recDedupRef
					emit(append(e.b, dd.msg.ID[:]...))
					continue
				}
				if env, err = envelope(env[:0], &dd.msg, st.codec); err != nil {
					return fmt.Errorf("encode message %v: %w", dd.msg.ID, err)
				}
				emit(append(e.b, env...))
			}
		}
		return nil
	})
}

func (e *enc) strs(ss ...string) *enc {
	for _, s := range ss {
		e.str(s)
	}
	return e
}

func (e *enc) specs(s subSpec) *enc { e.spec(s); return e }

// replay is the state the journal's records build, before it becomes a
// broker.
type replay struct {
	records int // replayed so far
	topics  map[string]bool
	subs    map[uint32]*rsub
	deadSeq uint64
	dedup   map[string][]rdedup  // by topic, oldest first
	envs    map[uuid.UUID][]byte // every message's envelope seen in a put, for recDedupRef
}

type rdedup struct {
	id  string
	env []byte
}

type rsub struct {
	id          uint32
	topic, name string
	spec        subSpec
	gone        bool
	msgs        map[uuid.UUID]*rmsg
}

type rmsg struct {
	env       []byte
	place     uint64
	attempts  int
	inFlight  bool
	visibleAt time.Time
	ttl       time.Duration
	expiresAt time.Time
	lastErr   string
	dead      bool
	reason    queue.Reason
	deadAt    time.Time
	deadSeq   uint64 // dead-letter order
}

// putOverhead is about what a put record takes besides its envelope and
// last error: frame, type, subscription, place, attempts, flags and times.
const putOverhead = 8 + 1 + 2 + 3 + 1 + 1 + 4*9 + 2

// expiredText is the LastError the queue gives a message whose lease
// expired: replay must spell it as the queue does.
const expiredText = vocab.LeaseExpired

func newReplay() *replay {
	return &replay{topics: map[string]bool{}, subs: map[uint32]*rsub{}, dedup: map[string][]rdedup{}, envs: map[uuid.UUID][]byte{}}
}

func (rs *replay) msg(sub uint32, id uuid.UUID) *rmsg {
	if s := rs.subs[sub]; s != nil {
		return s.msgs[id]
	}
	return nil
}

// apply replays one record. Records may name messages or subscriptions
// that are gone (a call racing an Unsubscribe): they are ignored.
func (rs *replay) apply(body []byte) error {
	d := dec{b: body}
	typ := d.byte()
	rs.records++
	if (typ == recFormat) != (rs.records == 1) {
		return fmt.Errorf("not a leasebus journal: record %d is of type %d", rs.records, typ)
	}
	switch typ {
	case recFormat:
		magic, version := d.str(), d.uint()
		if d.err == nil && (magic != formatMagic || version < 1 || version > formatVersion) {
			return fmt.Errorf("journal format %q version %d, this is %q version %d", magic, version, formatMagic, formatVersion)
		}
	case recTopic:
		name := d.str()
		if err := validTopic(name); err != nil && d.err == nil {
			return err // a record no broker writes
		}
		rs.topics[name] = true
	case recDelTopic:
		name := d.str()
		delete(rs.topics, name)
		delete(rs.dedup, name)
	case recDedup:
		topic, id, env := d.str(), d.str(), d.rest()
		if d.err == nil && len(env) < 16 {
			d.fail()
		}
		if d.err == nil {
			rs.dedup[topic] = append(rs.dedup[topic], rdedup{id, env})
		}
	case recDedupRef:
		topic, id, mid := d.str(), d.str(), d.id()
		if d.err == nil {
			env := rs.envs[mid]
			if env == nil {
				return fmt.Errorf("dedup record of message %v, which no earlier record holds", mid)
			}
			rs.dedup[topic] = append(rs.dedup[topic], rdedup{id, env})
		}
	case recSub:
		id, topic, name, spec := d.sub(), d.str(), d.str(), d.spec()
		if err := validSub(topic, name); err != nil && d.err == nil {
			return err
		}
		if s := rs.subs[id]; s != nil {
			if !s.gone {
				s.spec = spec
			}
		} else if d.err == nil {
			rs.subs[id] = &rsub{id: id, topic: topic, name: name, spec: spec, msgs: map[uuid.UUID]*rmsg{}}
		}
	case recUnsub:
		if s := rs.subs[d.sub()]; s != nil {
			s.gone = true
			maps.DeleteFunc(s.msgs, func(_ uuid.UUID, m *rmsg) bool { return !m.dead })
		}
	case recPut:
		sub := d.sub()
		m := &rmsg{place: d.uint(), attempts: int(d.uint())}
		flags := d.byte()
		m.inFlight, m.dead = flags&putInFlight != 0, flags&putDead != 0
		m.visibleAt, m.ttl, m.expiresAt, m.lastErr = d.time(), d.dur(), d.time(), d.str()
		m.reason, m.deadAt = queue.Reason(d.byte()), d.time()
		m.env = d.rest()
		if d.err == nil && len(m.env) < 16 {
			d.fail()
		}
		if d.err == nil {
			rs.envs[uuid.UUID(m.env[:16])] = m.env // for a recDedupRef after it
		}
		s := rs.subs[sub]
		if d.err == nil && s != nil && (!s.gone || m.dead) {
			if m.dead {
				rs.deadSeq++
				m.deadSeq = rs.deadSeq
			}
			s.msgs[uuid.UUID(m.env[:16])] = m
		}
	case recDeliver:
		sub, n := d.sub(), d.uint()
		if n > uint64(len(d.b))/16 { // each ID takes 16 bytes
			d.fail()
			n = 0
		}
		for range n {
			if m := rs.msg(sub, d.id()); m != nil && !m.dead {
				if m.inFlight { // delivered again unsettled: its lease expired in between
					m.lastErr = expiredText
				}
				m.attempts++
				m.inFlight = true
				m.visibleAt = time.Time{}
			}
		}
	case recRetry:
		sub, id, at, lastErr := d.sub(), d.id(), d.time(), d.str()
		if m := rs.msg(sub, id); m != nil && !m.dead {
			m.inFlight, m.visibleAt, m.lastErr = false, at, lastErr
		}
	case recRelease:
		if m := rs.msg(d.sub(), d.id()); m != nil && !m.dead {
			m.inFlight = false
			m.attempts = max(m.attempts-1, 0)
		}
	case recRemove:
		sub, id := d.sub(), d.id()
		if s := rs.subs[sub]; s != nil && s.msgs[id] != nil && !s.msgs[id].dead {
			delete(s.msgs, id)
		}
	case recDead:
		sub, id := d.sub(), d.id()
		reason, attempts, lastErr, at := queue.Reason(d.byte()), int(d.uint()), d.str(), d.time()
		if m := rs.msg(sub, id); m != nil && d.err == nil {
			rs.deadSeq++
			m.dead, m.inFlight, m.reason, m.attempts, m.lastErr, m.deadAt, m.deadSeq = true, false, reason, attempts, lastErr, at, rs.deadSeq
		}
	case recForget:
		sub, id := d.sub(), d.id()
		if s := rs.subs[sub]; s != nil && s.msgs[id] != nil && s.msgs[id].dead {
			delete(s.msgs, id)
		}
	case recPurge:
		if s := rs.subs[d.sub()]; s != nil {
			maps.DeleteFunc(s.msgs, func(_ uuid.UUID, m *rmsg) bool { return !m.dead })
		}
	default:
		return fmt.Errorf("unknown record type %d", typ)
	}
	if d.err != nil {
		return fmt.Errorf("record type %d: %w", typ, d.err)
	}
	return nil
}

// restore builds the broker from what the journal replayed: topics, then
// subscriptions, then the dead-letter store in its order, then the
// messages (where one in flight on its last attempt is dead-lettered).
func (b *Broker[T]) restore(rs *replay) error {
	st := b.store
	// One envelope per message, shared by its subscriptions: a map only
	// when there is more than one subscription to share with.
	var msgs map[uuid.UUID]*queue.Message[T]
	if len(rs.subs) > 1 {
		msgs = map[uuid.UUID]*queue.Message[T]{}
	}
	decode := func(env []byte) (*queue.Message[T], error) {
		if m := msgs[uuid.UUID(env[:16])]; m != nil {
			return m, nil
		}
		m, err := unenvelope(env, st.codec)
		if err != nil {
			return nil, &CorruptError{Path: st.j.Path(), Offset: -1,
				Reason: fmt.Sprintf("the codec cannot decode message %v", uuid.UUID(env[:16])), Err: err}
		}
		if msgs != nil {
			msgs[m.ID] = m
		}
		return m, nil
	}
	b.mu.Lock()
	for name := range rs.topics {
		t := &topicEntry[T]{name: name}
		b.topics[name] = t
		b.rebuildLocked(t)
	}
	b.mu.Unlock()
	st.info.Topics = len(rs.topics)
	now := b.clock.Now()
	for topic, ds := range rs.dedup {
		t := b.topics[topic]
		if t == nil {
			continue
		}
		for _, dd := range ds {
			m, err := decode(dd.env)
			if err != nil {
				return err
			}
			if now.Before(m.PublishedAt.Add(b.dedupWindow)) { // (a later entry of one ID wins)
				t.dedup.put(dd.id, *m)
			}
		}
	}

	var letters []letter[T] // recovered dead letters, to order by seq
	type restored struct {
		s     *Subscription[T]
		fresh []core.Letter[T] // dead-lettered by the restore itself
	}
	var subs []restored
	var live int64 // about what a snapshot would take
	for _, id := range slices.Sorted(maps.Keys(rs.subs)) {
		rsub := rs.subs[id]
		st.nextSub = max(st.nextSub, id+1)
		// In place order, which Restore needs (and then need not sort).
		rms := slices.SortedFunc(maps.Values(rsub.msgs), func(x, y *rmsg) int { return cmp.Compare(x.place, y.place) })
		es := make([]core.Entry[T], 0, len(rms))
		var seqs []uint64 // of the dead entries, in their order
		for _, rm := range rms {
			live += int64(len(rm.env) + len(rm.lastErr) + putOverhead)
			m, err := decode(rm.env)
			if err != nil {
				return err
			}
			es = append(es, core.Entry[T]{
				Message: m, Place: rm.place, Attempts: rm.attempts, InFlight: rm.inFlight,
				VisibleAt: rm.visibleAt, TTL: rm.ttl, ExpiresAt: rm.expiresAt, LastError: rm.lastErr,
				Dead: rm.dead, Reason: rm.reason, DeadAt: rm.deadAt,
			})
			if rm.dead {
				seqs = append(seqs, rm.deadSeq)
			}
		}
		b.mu.Lock()
		var s *Subscription[T]
		if !rsub.gone {
			var err error
			if s, err = b.recoverLocked(rsub); err != nil {
				b.mu.Unlock()
				return err
			}
		}
		b.mu.Unlock()
		if s == nil { // gone, or its topic is: only its dead letters stay
			for _, en := range es {
				if en.Dead {
					letters = append(letters, letter[T]{seqs[0], id, rsub.topic, core.DeadLetterOf(rsub.name, en)})
					seqs = seqs[1:]
				}
			}
			continue
		}
		st.info.Subscriptions++
		st.info.Messages += len(es) - len(seqs)
		dls, err := s.q.Restore(es) // the dead entries in order, then those it dead-lettered
		if err != nil {
			return err
		}
		for i, seq := range seqs {
			letters = append(letters, letter[T]{seq, id, rsub.topic, dls[i]})
		}
		subs = append(subs, restored{s, dls[len(seqs):]})
	}
	slices.SortFunc(letters, func(x, y letter[T]) int { return cmp.Compare(x.seq, y.seq) })
	for _, l := range letters {
		b.dead.add(l.topic, l.sub, l.dl)
	}
	st.info.DeadLetters = len(letters)
	st.j.Rebase(live)
	// Only now that every queue is back is a dead letter made by the
	// restore (one leased on its last attempt at the crash) routed, perhaps
	// to another queue, and does anything commit, and so perhaps compact.
	for _, r := range subs {
		for _, dl := range r.fresh {
			b.deadLetter(r.s, dl)
		}
	}
	return b.commit()
}

// recoverLocked makes a subscription the journal has, with its recorded
// options; nil if its topic is gone.
func (b *Broker[T]) recoverLocked(rsub *rsub) (*Subscription[T], error) {
	pattern := isPattern(rsub.topic)
	t := b.topics[rsub.topic]
	if !pattern && t == nil {
		return nil, nil
	}
	qc := rsub.spec.config()
	qc.Name, qc.Clock = rsub.name, b.clock
	s := &Subscription[T]{topic: rsub.topic, name: rsub.name, jid: rsub.id, spec: rsub.spec, recovered: true}
	if err := b.attachLocked(s, t, qc, nil, rsub.spec.deadLetters); err != nil {
		return nil, fmt.Errorf("subscription %q on %q: %w", rsub.name, rsub.topic, err)
	}
	return s, nil
}
