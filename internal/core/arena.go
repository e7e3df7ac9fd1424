package core

import (
	"time"

	"github.com/leasebus/leasebus/queue"
)

// entryAt returns the entry in a slot, which must be below q.slots.
func (q *Queue[T]) entryAt(slot uint32) *entry[T] { return &q.arena[slot/chunk][slot%chunk] }

// tickOf returns t as a tick of q's clock.
func (q *Queue[T]) tickOf(t time.Time) tick { return tick(t.Sub(q.epoch)) }

// timeOf returns the time a tick stands for; noTick is the zero time.
func (q *Queue[T]) timeOf(k tick) time.Time {
	if k == noTick {
		return time.Time{}
	}
	return q.epoch.Add(time.Duration(k))
}

// after returns k + d (d >= 0), saturating at farTick.
func (k tick) after(d time.Duration) tick {
	if k > farTick-tick(d) {
		return farTick
	}
	return k + tick(d)
}

// ttlOf returns the TTL of e, which must have one (hasTTL).
func (q *Queue[T]) ttlOf(e *entry[T]) *ttlInfo { return &q.ttls[e.slot/chunk][e.slot%chunk] }

// setTTLLocked gives e a time to live of d that passes at expires. It does
// not put e in the TTL heap: placeLocked does.
func (q *Queue[T]) setTTLLocked(e *entry[T], expires tick, d time.Duration) {
	for int(e.slot/chunk) >= len(q.ttls) { // the side arena grows only for a queue that has TTLs
		q.ttls = append(q.ttls, make([]ttlInfo, chunk))
	}
	*q.ttlOf(e) = ttlInfo{expires: expires, ttl: d, index: -1}
	e.flags |= hasTTL
}

// ttlWaitingLocked reports whether e has a TTL and sits in the TTL heap.
func (q *Queue[T]) ttlWaitingLocked(e *entry[T]) bool { return e.is(hasTTL) && q.ttlOf(e).index >= 0 }

// expiresLocked returns when e's TTL passes, or the zero time for none.
func (q *Queue[T]) expiresLocked(e *entry[T]) (time.Time, time.Duration) {
	if !e.is(hasTTL) {
		return time.Time{}, 0
	}
	t := q.ttlOf(e)
	return q.timeOf(t.expires), t.ttl
}

// lastErrLocked returns e's LastError.
func (q *Queue[T]) lastErrLocked(e *entry[T]) string {
	switch e.lastErr {
	case errExpired:
		return errExpiredText
	case errNacked:
		return nackedText
	case errFailed:
		return failedText
	case errCustom:
		return q.errs[e.slot]
	}
	return ""
}

// setLastErrLocked sets e's LastError; a text other than the queue's own
// is kept in q.errs.
func (q *Queue[T]) setLastErrLocked(e *entry[T], text string) {
	k := errCustom
	switch text {
	case "":
		k = errNone
	case errExpiredText:
		k = errExpired
	case nackedText:
		k = errNacked
	case failedText:
		k = errFailed
	}
	q.setErrKindLocked(e, k)
	if k == errCustom {
		if q.errs == nil {
			q.errs = make(map[uint32]string)
		}
		q.errs[e.slot] = text
	}
}

// setErrKindLocked sets e's LastError to one of the queue's own texts (or
// errCustom, whose text the caller stores), forgetting a custom one.
func (q *Queue[T]) setErrKindLocked(e *entry[T], k errKind) {
	if e.lastErr == errCustom && k != errCustom {
		delete(q.errs, e.slot)
	}
	e.lastErr = k
}

// placeLocked puts a new (or redriven) entry where it waits: behind its
// key's head, or delayed, or ready.
func (q *Queue[T]) placeLocked(now time.Time, e *entry[T], fresh bool) {
	if e.is(hasTTL) {
		q.ttl.push(e)
		q.dueAt(q.ttlOf(e).expires)
	}
	if key := e.key(); key != "" {
		kq := q.keyQueueLocked(key)
		if kq.out >= q.cfg.KeyConcurrency {
			kq.hold(e)
			q.heldBack++
			return
		}
		kq.out++
	}
	q.showLocked(now, e, fresh)
}

// keyQueueLocked returns key's queue, made if it has none.
func (q *Queue[T]) keyQueueLocked(key string) *keyQueue[T] {
	if q.keys == nil {
		q.keys = make(map[string]*keyQueue[T])
	}
	kq := q.keys[key]
	if kq == nil {
		kq = &keyQueue[T]{}
		q.keys[key] = kq
	}
	return kq
}

// showLocked puts an entry that may be delivered in the delayed heap or
// the ready lanes.
func (q *Queue[T]) showLocked(now time.Time, e *entry[T], fresh bool) {
	if e.at != noTick && e.at > q.tickOf(now) { // noTick: visible at once, without converting now
		e.state = stateDelayed
		q.delayed.push(e)
		q.dueAt(e.at)
	} else {
		q.ready.push(e, fresh)
	}
	q.wakeLocked()
}

// unplaceLocked takes a waiting entry out of the ready lanes, the
// delayed heap or the limited heap (a held entry leaves its key in finishLocked).
func (q *Queue[T]) unplaceLocked(e *entry[T]) {
	switch e.state {
	case stateReady:
		q.ready.remove(e)
	case stateDelayed:
		q.delayed.remove(int(e.index))
	case stateLimited:
		q.limited.remove(int(e.index))
	}
}

func (q *Queue[T]) newEntryLocked(m *queue.Message[T]) *entry[T] {
	var slot uint32
	if q.freeHead > 0 { // the free list runs through the free entries
		slot = q.freeHead - 1
		q.freeHead = uint32(q.entryAt(slot).place)
	} else {
		if q.slots%chunk == 0 {
			c := make([]entry[T], chunk)
			for i := range c {
				c[i].gen = q.maxGen // above every generation handed out before
			}
			q.arena = append(q.arena, c)
		}
		slot = q.slots
		q.slots++
	}
	e := q.entryAt(slot)
	gen := e.gen + 1
	q.maxGen = max(q.maxGen, gen)
	q.nextSeq++
	// Cleared, then field by field: a literal is built on the stack and
	// copied over in 16-byte loads that wait for its own narrower stores.
	*e = entry[T]{}
	e.msg = m
	e.place = q.nextSeq
	e.at = noTick
	e.leased = noTick
	e.slot = slot
	e.gen = gen
	e.prio = uint8(m.Priority + 1)
	e.index = -1
	if m.Key != "" {
		e.flags = keyed
	}
	q.nheld++
	return e
}

// finishLocked lets go of e for good (acked, dead-lettered or dropped): it
// leaves the TTL heap and its key (the key's next message gets its turn),
// its leases become unknown, and there is room for another message. e must
// be out of the ready lanes, the delayed heap and the in-flight table.
func (q *Queue[T]) finishLocked(now time.Time, e *entry[T]) {
	if q.ttlWaitingLocked(e) {
		q.ttl.remove(int(q.ttlOf(e).index))
	}
	if key := e.key(); key != "" {
		q.leaveKeyLocked(now, e, key)
	}
	q.recycleLocked(e)
}

// leaveKeyLocked takes e out of its key's queue: if e was out, the key's
// next message gets its turn. e's state is still where it was (stateHeld:
// waiting behind the others).
func (q *Queue[T]) leaveKeyLocked(now time.Time, e *entry[T], key string) {
	kq := q.keys[key]
	if kq == nil {
		return
	}
	if e.state == stateHeld {
		if kq.drop(e) {
			q.heldBack--
		}
	} else {
		kq.out--
		q.admitLocked(now, kq)
	}
	if kq.out == 0 && kq.len() == 0 {
		delete(q.keys, key)
	}
}

// admitLocked lets the messages waiting in kq out, in place order, while
// fewer than KeyConcurrency are.
func (q *Queue[T]) admitLocked(now time.Time, kq *keyQueue[T]) {
	for kq.out < q.cfg.KeyConcurrency {
		e := kq.next()
		if e == nil {
			return
		}
		kq.out++
		q.heldBack--
		q.showLocked(now, e, false)
	}
}

// recycleLocked forgets e and frees its slot. The slot keeps its
// generation, so e's leases become unknown.
func (q *Queue[T]) recycleLocked(e *entry[T]) {
	q.setErrKindLocked(e, errNone)
	q.dropHistLocked(e)
	*e = entry[T]{slot: e.slot, gen: e.gen, place: uint64(q.freeHead)}
	q.freeHead = e.slot + 1
	q.nheld--
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	if q.cfg.MaxInFlight > 0 {
		q.wakeLocked() // in-flight room for a poller held back by MaxInFlight
	}
	// Otherwise a message leaving wakes no poller: what it makes visible
	// (the next of its key) wakes them as it is placed.
}
