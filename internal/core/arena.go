package core

import (
	"time"
)

// entryAt returns the entry in a slot, which must be below q.slots.
func (q *Queue[T]) entryAt(slot uint32) *entry[T] { return &q.arena[slot/chunk][slot%chunk] }

// placeLocked puts a new (or redriven) entry where it waits: behind its
// key's head, or delayed, or ready.
func (q *Queue[T]) placeLocked(now time.Time, e *entry[T], fresh bool) {
	if !e.expiresAt.IsZero() {
		q.ttl.push(e)
	}
	if e.key != "" {
		if q.keys == nil {
			q.keys = make(map[string]*keyQueue[T])
		}
		kq := q.keys[e.key]
		if kq == nil {
			kq = &keyQueue[T]{}
			q.keys[e.key] = kq
		}
		if kq.head != nil {
			kq.hold(e)
			q.heldBack++
			return
		}
		kq.head = e
	}
	q.showLocked(now, e, fresh)
}

// showLocked puts an entry that may be delivered in the delayed heap or
// the ready lanes.
func (q *Queue[T]) showLocked(now time.Time, e *entry[T], fresh bool) {
	if e.visibleAt.After(now) {
		e.state = stateDelayed
		q.delayed.push(e)
	} else {
		q.ready.push(e, fresh)
	}
	q.wakeLocked()
}

// unplaceLocked takes a waiting entry out of the ready lanes or the
// delayed heap (a held entry leaves its key in finishLocked).
func (q *Queue[T]) unplaceLocked(e *entry[T]) {
	switch e.state {
	case stateReady:
		q.ready.remove(e)
	case stateDelayed:
		q.delayed.remove(e.index)
	}
}

func (q *Queue[T]) newEntryLocked(m *Message[T]) *entry[T] {
	var slot uint32
	if n := len(q.free); n > 0 {
		slot = q.free[n-1]
		q.free = q.free[:n-1]
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
	*e = entry[T]{msg: m, place: q.nextSeq, slot: slot, gen: gen, prio: int(m.Priority) + 1, index: -1, ttlIndex: -1, key: m.Key}
	q.nheld++
	return e
}

// finishLocked lets go of e for good (acked, dead-lettered or dropped): it
// leaves the TTL heap and its key (the key's next message gets its turn),
// its leases become unknown, and there is room for another message. e must
// be out of the ready lanes, the delayed heap and the in-flight table.
func (q *Queue[T]) finishLocked(now time.Time, e *entry[T]) {
	if e.ttlIndex >= 0 {
		q.ttl.remove(e.ttlIndex)
	}
	if kq := q.keys[e.key]; e.key != "" && kq != nil {
		if kq.head == e {
			kq.head = kq.next()
			if kq.head != nil {
				q.heldBack--
				q.showLocked(now, kq.head, false)
			}
		} else if kq.drop(e) {
			q.heldBack--
		}
		if kq.head == nil && kq.len() == 0 {
			delete(q.keys, e.key)
		}
	}
	q.recycleLocked(e)
}

// recycleLocked forgets e and frees its slot. The slot keeps its
// generation, so e's leases become unknown.
func (q *Queue[T]) recycleLocked(e *entry[T]) {
	*e = entry[T]{slot: e.slot, gen: e.gen}
	q.free = append(q.free, e.slot)
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
