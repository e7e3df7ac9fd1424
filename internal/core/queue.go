// Package core is one subscription's queue: priorities, the bounded ready
// lanes, the delayed heap, the in-flight table, attempts, retry backoff,
// dead-lettering and the blocking Poll, with the hooks a durable broker
// needs (a Recorder, Restore, Freeze). Its words are package queue's.
//
// A Queue owns its lock and its wake-ups; the lease heap below it is pure
// data. Package broker builds topics and fan-out on top of it; users meet a
// Queue through a broker.Subscription.
package core

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// chunk is how many entries the arena allocates at once.
const chunk = 1024

// The LastError texts the queue writes itself.
const (
	errExpiredText = backend.LeaseExpired // its last lease expired
	nackedText     = "nacked"             // Nack
	failedText     = "failed"             // Fail with a nil cause
)

// Queue is one subscription's bounded queue of leased messages. It is safe
// for concurrent use. Create one with New.
//
// Its state is grouped by what it is for: what New sets and nothing
// changes; the entries themselves (store); where each waits (lanes); the
// rate limits' buckets (buckets); the counters; what a settle owes and a
// sweep in progress (settling); and who waits for what (waiters). The
// groups are embedded, so a field reads as q.ready, and each group's own
// bookkeeping is a method of it. One mutex guards them all.
type Queue[T any] struct {
	cfg    queue.Config // immutable after New; defaults filled in
	clock  clock.Clock
	epoch  time.Time       // the clock's time at New: tick 0
	scope  uint64          // the scope of every lease ID this queue issues
	onDead func(Letter[T]) // receives dead letters, called outside the lock; may be nil
	rec    Recorder[T]     // told of every change (durable mode); nil in memory
	hooks  *testHooks      // nil but in this package's tests

	in *inbox[T] // plain Offers' envelopes, drained under the lock (see inbox)

	mu     sync.Mutex // guards everything below
	closed bool
	paused bool // Pause: nothing is leased until Resume
	store[T]
	lanes[T]
	buckets
	stats queue.Stats // the counters; Stats fills in the gauges
	settling[T]
	waiters
}

// testHooks are what this package's tests change of a queue's sweep.
type testHooks struct {
	chunk int    // how many items a sweep settles between unlocks; 0: sweepChunk
	gap   func() // called between two chunks of a sweep, without the lock; nil: nothing
}

// store is the entries, held or free, and what few of them need beside
// (see arena.go, history.go).
type store[T any] struct {
	arena     [][]entry[T]      // every entry, held or free, by slot, in chunks (pointers stay valid)
	ttls      [][]ttlInfo       // beside the arena, by slot: the TTLs of entries that have one (nil until one does)
	errs      map[uint32]string // by slot: the LastError of entries whose text is not the queue's own (errCustom)
	hist      []*histPage       // by slot: where the attempts not acked of entries that had some are (flag hasHistory; history.go)
	histArena histArena         // those attempts
	histText  map[uint64]string // the attempts' own error texts, by attemptRec.text
	nextText  uint64            // the last key of histText handed out, less failedID
	slots     uint32            // slots in the arena
	freeHead  uint32            // the first free slot + 1, 0 for none; a free entry's place is the next one's + 1
	nheld     int               // entries held
	maxGen    uint32            // the highest generation handed out: a new chunk starts above it
	nextSeq   uint64            // the last place handed out
}

// lanes is where each held entry is, by its state (ready.go): visible in
// the ready lanes, waiting in the delayed or the limited heap, leased in
// the in-flight table, or held back in its key's queue.
type lanes[T any] struct {
	ready    ready[T]
	delayed  entryHeap[T]            // by (visibleAt, place)
	limited  entryHeap[T]            // visible entries waiting for their key's rate-limit token, by (token's time, place)
	ttl      entryHeap[T]            // waiting entries that have a TTL, by expiry
	inflight inflight[T]             // leased entries, by deadline
	due      tick                    // nothing in inflight, delayed, limited or ttl is due before it (see dueAt)
	keys     map[string]*keyQueue[T] // ordering keys with a message held
	heldBack int                     // entries held back behind their key's out ones
}

// buckets is the rate limits' token buckets, each kept as the time it is
// full again (see limits.go).
type buckets struct {
	rateFull    time.Time            // when RateLimit's bucket is full again
	keyFull     map[string]time.Time // when each key's KeyRateLimit bucket is full again, for keys not forgotten
	keyFloor    time.Time            // when the bucket of a key not in keyFull is full again (EmptyBuckets); zero: full
	keyFullKept int                  // len(keyFull) after its last forgetting
	keyFullAt   time.Time            // when that was
}

// settling is what an unlock owes (dead letters to hand over, a commit)
// and the sweep in progress (sweep.go).
type settling[T any] struct {
	pending      []deadNote[T]   // dead letters to hand to onDead after unlocking
	backlog      [][]deadNote[T] // earlier ones of an unfinished sweep, to hand before pending
	dirty        bool            // something was recorded since the last unlock
	sweeping     bool            // a settle (at sweepAt) unlocked between two chunks, or left by an Offer, and is not done
	sweepLeft    bool            // that settle was left by an Offer (see offerNeedsNoSettleLocked): no call runs it
	sweepAt      time.Time       // the time of that settle
	swept        chan struct{}   // closed and dropped when it is done (or the queue closes); nil when none wait
	sweepWaiters int             // calls waiting for it
}

// waiters is who waits on the queue, and how each is woken: a channel
// closed and dropped.
type waiters struct {
	wake         chan struct{} // closed and dropped to wake waiting Polls; nil when none wait
	parked       int           // Polls waiting with their timer armed
	parkCh       chan struct{} // closed and dropped when parked changes
	parkings     parkings      // those of the parked Polls that have one (PollFor)
	idleParkings parkings      // those of the waiting AwaitIdle calls that have one
	room         chan struct{} // closed and dropped when room appears (OverflowBlock)
	idle         chan struct{} // closed and dropped, on unlock, when the queue is empty or closed; nil when none wait
	// handing counts unlocks handing dead letters to onDead: until they
	// are done the queue is not idle, so that AwaitIdle never returns
	// before the broker holds the letters (DeadLetters shows them).
	handing int
}

// New returns an empty queue. onDead, if not nil, receives every message the
// queue dead-letters, in order, outside the queue's lock (it may call back
// into the queue); with a nil onDead dead letters are only counted.
func New[T any](cfg queue.Config, onDead func(Letter[T])) (*Queue[T], error) {
	if err := ValidateConfig(cfg); err != nil {
		return nil, err
	}
	cfg = withDefaults(cfg)
	q := &Queue[T]{
		cfg:    cfg,
		clock:  FastNow(cfg.Clock),
		scope:  rand.Uint64() | 1, // never 0: the zero ID is never issued
		onDead: onDead,
	}
	q.epoch = q.clock.Now()
	q.in = newInbox(q, defaultInbox)
	q.resetLocked()
	return q, nil
}

// resetLocked empties every structure. Freed slots keep their
// generation, so a lease issued before can never name a later entry.
func (q *Queue[T]) resetLocked() {
	q.freeHead = 0
	for slot := q.slots; slot > 0; slot-- {
		e := q.entryAt(slot - 1)
		*e = entry[T]{slot: e.slot, gen: e.gen, place: uint64(q.freeHead)}
		q.freeHead = slot
	}
	q.errs = nil
	q.hist, q.histArena, q.histText = nil, histArena{}, nil
	q.nheld = 0
	q.ready.reset(q.cfg.FairKeys)
	q.delayed = newEntryHeap(byVisibleAt[T])
	q.limited = newEntryHeap(byVisibleAt[T])
	q.ttl = newTTLHeap(q)
	q.inflight = newInflight[T]()
	q.due = farTick
	q.keys = nil
	q.heldBack = 0
}

// OfferOption adjusts one Offer.
type OfferOption struct {
	kind offerKind
	ttl  time.Duration
	note any
}

type offerKind uint8

const (
	offerTTL      offerKind = iota // WithTTL (the zero OfferOption: TTL 0, invalid)
	offerNote                      // WithNote
	offerDeferred                  // WithDeferredCommit: the caller commits the Recorder
)

// Config returns the queue's configuration with every default filled in.
func (q *Queue[T]) Config() queue.Config {
	if q == nil {
		return queue.Config{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cfg
}

// Stats returns a snapshot of the queue, after settling everything due.
func (q *Queue[T]) Stats() queue.Stats {
	if q == nil {
		return queue.Stats{}
	}
	now := q.clock.Now()
	q.mu.Lock()
	if !q.closed {
		q.drainLocked()
		q.sweepLocked(now)
	}
	s := q.stats
	s.Visible = q.ready.len() + q.limited.len()
	s.Limited = q.limitedLocked(now)
	if oldest, ok := q.ready.oldest(); ok && now.After(oldest) {
		s.OldestVisibleAge = now.Sub(oldest)
	}
	s.Delayed = q.delayed.len()
	s.InFlight = q.inflight.Len()
	s.HeldBack = q.heldBack
	s.Paused = q.paused
	q.unlock()
	return s
}

// Close closes the queue: every blocked Poll and blocked publisher returns
// ErrClosed, and so does every later call. A queue made by New discards the
// messages it still holds; one with a Recorder (a durable broker's) has
// them recorded already, and its broker keeps them. Close is idempotent and
// returns nil.
func (q *Queue[T]) Close() error {
	q.mu.Lock()
	defer q.unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	q.freezeLocked() // for good; what Offers put there before is the queue's
	q.wakeLocked()
	for _, ch := range []*chan struct{}{&q.parkCh, &q.room, &q.swept} {
		if *ch != nil {
			close(*ch)
			*ch = nil
		}
	}
	return nil
}

// lock locks the queue, fails if it is closed, and settles everything due
// at the clock's now, which it returns. Pair it with unlock. The clock is
// read before the lock is taken, to keep the lock short.
func (q *Queue[T]) lock() (time.Time, error) { return q.lockAt(time.Time{}) }

// lockAt is lock with the current time given; the zero time means read the
// clock.
func (q *Queue[T]) lockAt(now time.Time) (time.Time, error) {
	now, err := q.lockUnsettled(now)
	if err != nil {
		return now, err
	}
	return now, q.settleOpenLocked(now)
}

// lockUnsettled locks the queue and fails if it is closed, without
// settling: a call that may leave another call's unfinished settle alone
// (see sweepLocked) decides under the lock, then settles if it may not.
// The zero time means read the clock.
func (q *Queue[T]) lockUnsettled(now time.Time) (time.Time, error) {
	if q == nil { // a zero broker.Subscription's
		return time.Time{}, errNilQueue
	}
	if now.IsZero() {
		now = q.clock.Now()
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return time.Time{}, queue.ErrClosed
	}
	q.drainLocked()
	return now, nil
}

// settleOpenLocked settles everything due at now. sweepLocked lets go of
// the lock between chunks: if the queue was closed meanwhile, it unlocks
// it (committing what the chunks recorded) and returns ErrClosed.
func (q *Queue[T]) settleOpenLocked(now time.Time) error {
	q.sweepLocked(now)
	if q.closed {
		_ = q.unlock() // the call fails as closed: a store's error shows there
		return queue.ErrClosed
	}
	return nil
}

// unlock unlocks the queue, commits what was recorded (a durable queue) and
// then hands pending dead letters to onDead. It returns the commit's error.
//
// Every change of what the queue holds passes through here (or through
// Restore, which ends the same way), so this is where AwaitIdle's waiters
// are woken: when the queue is empty or closed.
//
// The dead letters of a sweep (see sweepLocked) wait in q.backlog until
// it is done: a call that goes ahead meanwhile does not hand them over, so
// the call that did the sweep hands them all, in order, when it unlocks.
// Outside the lock, pending is always empty, and backlog is empty unless
// a sweep is unfinished (Freeze's thaw, under a compaction that holds the
// broker's lock, hands nothing to onDead).
func (q *Queue[T]) unlock() error {
	q.thawLocked()
	q.signalIdleLocked()
	dirty := q.dirty
	q.dirty = false
	var backlog [][]deadNote[T]
	if !q.sweeping {
		backlog, q.backlog = q.backlog, nil
	}
	if len(q.pending) == 0 && len(backlog) == 0 && !dirty {
		q.mu.Unlock()
		return nil
	}
	dls := q.pending
	q.pending = nil
	hand := q.onDead != nil && (len(dls) > 0 || len(backlog) > 0)
	if hand {
		q.handing++
	}
	q.mu.Unlock()
	var err error
	if dirty {
		err = q.rec.Commit()
	}
	if hand {
		for _, b := range backlog {
			for _, n := range b {
				q.onDead(q.letter(n))
			}
		}
		for _, n := range dls {
			q.onDead(q.letter(n))
		}
		q.mu.Lock()
		q.handing--
		q.signalIdleLocked()
		q.mu.Unlock()
	}
	return err
}

// wakeLocked wakes every waiting Poll so it looks again. The parked ones
// all wait on this channel, so none of them is parked any more: they stop
// counting now, not when they get the lock back, so that AwaitParked right
// after a publish waits for them to park again.
func (q *Queue[T]) wakeLocked() {
	if q.wake != nil {
		close(q.wake)
		q.wake = nil
		q.in.waiting.Store(false)
		if q.parked > 0 {
			q.setParkedLocked(-q.parked)
		}
		q.parkings.clear()
	}
}
