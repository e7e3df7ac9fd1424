package core

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/leasebus/leasebus/internal/minheap"
	"github.com/leasebus/leasebus/queue"
)

// entryState says which structure holds an entry.
type entryState uint8

const (
	stateFree    entryState = iota // recycled, or not yet placed
	stateReady                     // in ready: visible now
	stateDelayed                   // in delayed: visible at visibleAt
	stateLeased                    // in the in-flight table
	stateHeld                      // held back behind an earlier message of its ordering key
	stateLimited                   // in limited: visible, waiting for its key's rate-limit token, due at its at
)

// entry is one subscription's hold on one message. The envelope is shared
// by every subscription; the entry is this queue's own, kept small (56
// bytes, one pointer: what the garbage collector scans for a queued
// message) because a queue holds up to MaxQueue of them. What few entries
// need lives beside them: the TTL of a message that has one (q.ttls, by
// slot) and a failure's own text (q.errs, by slot).
type entry[T any] struct {
	msg      *queue.Message[T] // shared, never written after publish; nil when the slot is free
	place    uint64            // publish sequence in this queue: FIFO order within a priority
	at       tick              // delayed or held back: when it turns visible (noTick: at once); leased: the lease's deadline
	stamp    uint64            // when leased: lease order (equal deadlines expire in it); when ready with FairKeys: its turn
	leased   tick              // when leased: when the lease began (an attempt's Held); noTick when not known
	slot     uint32            // where it lives in the arena
	gen      uint32            // which use of the slot: with slot, the seq of its lease IDs
	delivery uint32            // deliveries so far (the delivery number of the last lease)
	attempt  int32             // attempts spent (Release gives one back)
	index    int32             // position in a heap (>= 0) or a run (<= -2, see run), or -1 (none)
	state    entryState
	flags    entryFlags
	prio     uint8   // index into ready.lanes: Priority+1
	lastErr  errKind // what LastError a dead letter of it would say
}

// entryFlags are an entry's yes-or-no facts.
type entryFlags uint8

const (
	leaseOpen  entryFlags = 1 << iota // the lease of delivery number `delivery` is still current
	hasTTL                            // it has a time to live, in q.ttls
	inFresh                           // it is in its lane's fresh run (not the other one)
	keyed                             // its message has an ordering key (known without reading the envelope)
	hasHistory                        // it has attempts in q.hist
)

func (e *entry[T]) is(f entryFlags) bool { return e.flags&f != 0 }

// seq is the seq of this hold's lease IDs: its slot and generation.
func (e *entry[T]) seq() uint64 { return uint64(e.slot)<<32 | uint64(e.gen) }

// key is the message's ordering key, "" for none. An unkeyed entry
// answers without reading the shared envelope, which a sweep over a
// million entries would otherwise fetch from memory one by one.
func (e *entry[T]) key() string {
	if !e.is(keyed) {
		return ""
	}
	return e.msg.Key
}

// errKind is an entry's LastError: one of the texts the queue writes
// itself, or errCustom, a failure's own text, kept in q.errs.
type errKind uint8

const (
	errNone    errKind = iota // ""
	errExpired                // errExpiredText: its last lease expired
	errNacked                 // nackedText
	errFailed                 // failedText: Fail with a nil cause
	errCustom                 // q.errs[slot]
)

// tick is a time on the queue's clock as nanoseconds since the queue's
// epoch (the clock's time at New), so that an entry holds a time in 8
// bytes with no pointer, the difference keeps the monotonic reading a real
// clock's times carry, and a mock clock's are exact. Times more than 292
// years from the epoch saturate.
type tick int64

const (
	noTick  tick = math.MinInt64 // no time: visible at once
	farTick tick = math.MaxInt64 // as far as a tick goes
)

// ttlInfo is the time to live of an entry that has one (hasTTL).
type ttlInfo struct {
	expires tick          // when it passes
	ttl     time.Duration // its length, counted again from a redrive
	index   int32         // position in the TTL heap, or -1
}

// ready holds the visible entries: one lane per priority, highest first.
// A lane is a run of fresh messages (they arrive in place order, so no
// heap is needed), a run of messages that came back (from expiry, nack,
// backoff, delay or redrive) in place order, as a batch of leases that
// expire together does, and a heap, by place, of those that came back out
// of that order. Popping compares the three heads. Runs keep their slots
// in blocks, so a lane of a million messages never copies an array to
// grow (which a slice would, under the lock, pointers and all).
//
// With FairKeys the lanes are ordered by turn, then place (see fair): the
// runs then hold entries that arrive in that order, as the messages of
// one key (or none) do while no other key comes between them.
type ready[T any] struct {
	lanes [numPriorities]lane[T]
	n     int
	fair  *fair // FairKeys; nil: by place
}

// fair is the turns of FairKeys (start-time fair queuing, every key of
// equal weight): a message that turns visible takes the turn being served
// if its key has no other visible message, else the turn after its key's
// last; the lanes deliver by turn, then place. So a key's first message
// waits behind at most one message of each other key (those of the turn
// being served that came before it), and a key with a backlog takes one
// turn in each. Messages without a key are one key, "". A key's last
// turn is kept only while it has visible messages, and forgotten whenever
// the lanes empty.
type fair struct {
	now     uint64            // the turn being served: the last served
	none    uint64            // the last turn of the messages without a key, if hasNone (kept out of last: the common case)
	hasNone bool              // a message without a key is visible
	last    map[string]uint64 // each key's last turn handed out, while it has a visible message
	kept    int               // len(last) after it was last pruned
	peak    int               // the most keys last held since it was made (served keys leave one by one)
}

// turn returns the turn of a message of key that is about to turn
// visible; empty: the lanes hold nothing.
func (f *fair) turn(key string, empty bool) uint64 {
	if empty {
		if f.peak >= 1024 { // a map never shrinks its table
			f.last, f.peak = make(map[string]uint64), 0
		}
		clear(f.last) // what a turn kept of a message removed unserved
		f.kept, f.hasNone = 0, false
	}
	t := f.now
	if key == "" {
		if f.hasNone && f.none >= t {
			t = f.none + 1
		}
		f.none, f.hasNone = t, true
		return t
	}
	last, ok := f.last[key]
	if ok && last >= t {
		t = last + 1
	}
	if !ok && len(f.last) >= 2*f.kept+64 {
		// A turn behind the one served is as good as forgotten.
		f.last = forget(f.last, func(v uint64) bool { return v < f.now })
		f.kept = len(f.last)
	}
	f.last[key] = t
	f.peak = max(f.peak, len(f.last))
	return t
}

// served notes that key's turn t was served.
func (f *fair) served(key string, t uint64) {
	f.now = max(f.now, t)
	switch {
	case key == "":
		if f.none == t {
			f.hasNone = false
		}
	case f.last[key] == t:
		delete(f.last, key)
	}
}

func newFair() *fair { return &fair{last: make(map[string]uint64)} }

// byTurn orders FairKeys' lanes.
func byTurn[T any](a, b *entry[T]) bool {
	if a.stamp != b.stamp {
		return a.stamp < b.stamp
	}
	return a.place < b.place
}

// reset empties r, ordered by place, or by turn if fair.
func (r *ready[T]) reset(fair bool) {
	*r = ready[T]{}
	less := byPlace[T]
	if fair {
		r.fair, less = newFair(), byTurn[T]
	}
	for i := range r.lanes {
		r.lanes[i].back = newEntryHeap(less)
		r.lanes[i].fair = fair
	}
}

type lane[T any] struct {
	fresh run[T]       // never waited before, in place order (flag inFresh)
	ret   run[T]       // came back, in place order
	back  entryHeap[T] // came back, by place
	fair  bool         // FairKeys: the runs and the heap are by turn, then place (see before)
}

func (r *ready[T]) len() int { return r.n }

// push adds e. Entries that never waited before and come after everything
// in their lane's fresh run go there in O(1); others go to the lane's
// other run if they come after everything in it, else to the lane's heap.
func (r *ready[T]) push(e *entry[T], fresh bool) {
	l := &r.lanes[e.prio]
	e.state = stateReady
	if r.fair != nil {
		e.stamp = r.fair.turn(e.key(), r.n == 0)
	}
	r.n++
	switch {
	case fresh && (l.fresh.len() == 0 || l.before(l.fresh.last(), e)):
		e.flags |= inFresh
		l.fresh.push(e)
	case l.ret.len() == 0 || l.before(l.ret.last(), e):
		l.ret.push(e)
	default:
		l.back.push(e)
	}
}

// peekLane returns the highest non-empty lane, or nil.
func (r *ready[T]) peekLane() *lane[T] {
	if r.n == 0 {
		return nil
	}
	for p := numPriorities - 1; p >= 0; p-- {
		if l := &r.lanes[p]; l.len() > 0 {
			return l
		}
	}
	return nil
}

// pop removes and returns the next entry to deliver.
func (r *ready[T]) pop() *entry[T] {
	l := r.peekLane()
	if l == nil {
		return nil
	}
	r.n--
	e := l.pop()
	if r.fair != nil {
		r.fair.served(e.key(), e.stamp)
	}
	return e
}

// oldest returns the earliest PublishedAt of the lanes' next entries.
// Within a lane place order is publish order, so that is the earliest of
// all visible entries unless the clock went back between publishes. A
// zero PublishedAt (an Offer that left it to the queue; the broker always
// sets it) is not counted.
func (r *ready[T]) oldest() (t time.Time, ok bool) {
	if r.n == 0 {
		return time.Time{}, false
	}
	for p := range r.lanes {
		l := &r.lanes[p]
		if l.len() == 0 {
			continue
		}
		if at := l.peek().msg.PublishedAt; !at.IsZero() && (!ok || at.Before(t)) {
			t, ok = at, true
		}
	}
	return t, ok
}

// popOldestLowest removes the oldest entry of the lowest non-empty
// priority (the one OverflowDropOldest gives up).
func (r *ready[T]) popOldestLowest() *entry[T] {
	for p := range numPriorities {
		if l := &r.lanes[p]; l.len() > 0 {
			r.n--
			return l.pop()
		}
	}
	return nil
}

// remove takes e, which must be in r, out of it.
func (r *ready[T]) remove(e *entry[T]) {
	l := &r.lanes[e.prio]
	r.n--
	switch {
	case e.index >= 0:
		l.back.remove(int(e.index))
	case e.is(inFresh):
		e.flags &^= inFresh
		l.fresh.remove(e)
	default:
		l.ret.remove(e)
	}
}

func (l *lane[T]) len() int { return l.fresh.len() + l.ret.len() + l.back.len() }

// before reports whether a comes before b in the lane: by place, or, with
// FairKeys, by turn, then place.
func (l *lane[T]) before(a, b *entry[T]) bool {
	if l.fair {
		return byTurn(a, b)
	}
	return a.place < b.place
}

// peek returns the entry with the lowest place, which must exist.
func (l *lane[T]) peek() *entry[T] {
	e, _ := l.next()
	return e
}

// next returns the entry with the lowest place (there must be one) and
// where it is: 1 the fresh run, 2 the other run, 3 the heap.
func (l *lane[T]) next() (*entry[T], int) {
	var e *entry[T]
	from := 0
	if l.fresh.len() > 0 {
		e, from = l.fresh.first(), 1
	}
	if l.ret.len() > 0 && (e == nil || l.before(l.ret.first(), e)) {
		e, from = l.ret.first(), 2
	}
	if l.back.len() > 0 && (e == nil || l.before(l.back.top(), e)) {
		e, from = l.back.top(), 3
	}
	return e, from
}

// pop removes and returns the entry with the lowest place.
func (l *lane[T]) pop() *entry[T] {
	switch _, from := l.next(); from {
	case 1:
		e := l.fresh.pop()
		e.flags &^= inFresh
		return e
	case 2:
		return l.ret.pop()
	default:
		return l.back.remove(0)
	}
}

// entryHeap is a min-heap of entries that keeps each entry's index, so any
// entry is removed in O(log n). The delayed heap and the lanes' heaps keep
// it in the entry's index; the TTL heap in its ttlInfo.
type entryHeap[T any] struct {
	h minheap.Heap[*entry[T]]
}

func newEntryHeap[T any](less func(a, b *entry[T]) bool) entryHeap[T] {
	return entryHeap[T]{h: minheap.Heap[*entry[T]]{Less: less, SetIndex: func(e *entry[T], i int) { e.index = int32(i) }}}
}

// newTTLHeap returns the heap of q's entries that have a TTL, by expiry.
func newTTLHeap[T any](q *Queue[T]) entryHeap[T] {
	return entryHeap[T]{h: minheap.Heap[*entry[T]]{
		Less: func(a, b *entry[T]) bool {
			if x, y := q.ttlOf(a).expires, q.ttlOf(b).expires; x != y {
				return x < y
			}
			return a.place < b.place
		},
		SetIndex: func(e *entry[T], i int) { q.ttlOf(e).index = int32(i) },
	}}
}

func byPlace[T any](a, b *entry[T]) bool { return a.place < b.place }

func byVisibleAt[T any](a, b *entry[T]) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.place < b.place
}

func (h *entryHeap[T]) len() int               { return h.h.Len() }
func (h *entryHeap[T]) top() *entry[T]         { return h.h.S[0] }
func (h *entryHeap[T]) push(e *entry[T])       { h.h.Push(e) }
func (h *entryHeap[T]) remove(i int) *entry[T] { return h.h.Remove(i) }

// keyQueue holds one ordering key's messages: how many are out (they may
// be delivered: ready, delayed or in flight; at most KeyConcurrency), and
// the others waiting behind them in place order (stateHeld).
type keyQueue[T any] struct {
	out     int
	waiting []*entry[T] // waiting[start:], by place
	start   int
}

func (k *keyQueue[T]) len() int { return len(k.waiting) - k.start }

// hold queues e behind the head, in place order (a redriven message can
// have an older place than those already waiting).
func (k *keyQueue[T]) hold(e *entry[T]) {
	e.state = stateHeld
	live := k.waiting[k.start:]
	if len(live) == 0 || live[len(live)-1].place < e.place {
		k.waiting = append(k.waiting, e)
		return
	}
	i, _ := slices.BinarySearchFunc(live, e.place, func(x *entry[T], p uint64) int { return cmp.Compare(x.place, p) })
	k.waiting = slices.Insert(k.waiting, k.start+i, e)
}

// next removes and returns the first waiting entry, or nil.
func (k *keyQueue[T]) next() *entry[T] {
	if k.len() == 0 {
		return nil
	}
	e := k.waiting[k.start]
	k.waiting[k.start] = nil
	k.start++
	if k.start == len(k.waiting) {
		k.waiting, k.start = k.waiting[:0], 0
	} else if k.start >= 64 && k.start*2 >= len(k.waiting) {
		n := copy(k.waiting, k.waiting[k.start:])
		clear(k.waiting[n:])
		k.waiting, k.start = k.waiting[:n], 0
	}
	return e
}

// drop removes a waiting entry and reports whether it was there.
func (k *keyQueue[T]) drop(e *entry[T]) bool {
	i := slices.Index(k.waiting[k.start:], e)
	if i < 0 {
		return false
	}
	k.waiting = slices.Delete(k.waiting, k.start+i, k.start+i+1)
	return true
}

// hasAfter reports whether a message with a later place is waiting.
func (k *keyQueue[T]) hasAfter(place uint64) bool {
	live := k.waiting[k.start:]
	return len(live) > 0 && live[len(live)-1].place > place
}
