package core

import (
	"runtime"
	"sync/atomic"
)

// inbox is a bounded ring of envelopes that Offer appends to without the
// queue's lock, and that whoever takes the lock drains into the queue,
// oldest first, before doing anything else (see drainLocked). Only a plain
// message takes it: in memory, no key, no delay, no TTL (the message's or
// the queue's), while even a full inbox fits beside what the queue holds;
// every other Offer takes the lock, and drains the inbox first, so that
// messages keep their order. With 4 publishers on one subscription they
// no longer queue on its lock, and a fan-out to 10 subscriptions takes no
// lock at all while each consumer takes what piled up in one hold.
//
// It is Vyukov's bounded queue with many producers and one consumer: a
// slot's seq says whose turn it is (pos: free for the producer claiming
// pos; pos+1: written, for the consumer). The high bit of tail freezes it:
// no producer claims a slot then, and the queue counts exactly (near
// MaxQueue, closed, or durable).
type inbox[T any] struct {
	tail atomic.Uint64 // the next position to claim, | frozen
	// waiting says a Poll may park (set under the queue's lock, before it
	// looks at the inbox a last time): an Offer that took the inbox then
	// takes the lock to drain it, which wakes the Poll.
	waiting atomic.Bool
	_       [48]byte // the producers' line, apart from the consumer's
	head    uint64   // the next position to drain; under the queue's lock
	// frozen mirrors tail's bit, under the queue's lock; open says whether
	// the queue may ever thaw it (not durable, no TTL for every message,
	// not closed).
	frozen, open bool
	slots        []inboxSlot[T]
}

const frozen = 1 << 63

type inboxSlot[T any] struct {
	seq atomic.Uint64
	m   *Message[T]
}

// defaultInbox is an inbox's size: 4 KiB per subscription.
const defaultInbox = 256

// newInbox returns an inbox of n slots for a queue of at most maxQueue
// messages; open says whether it may ever be used. It starts frozen unless
// it is open and a full one fits.
func newInbox[T any](n, maxQueue int, open bool) *inbox[T] {
	b := &inbox[T]{slots: make([]inboxSlot[T], n), open: open}
	for i := range b.slots {
		b.slots[i].seq.Store(uint64(i))
	}
	if !open || n > maxQueue {
		b.frozen = true
		b.tail.Store(frozen)
	}
	return b
}

// shutLocked freezes the inbox for good (closed, or durable).
func (q *Queue[T]) shutLocked() {
	q.in.open = false
	q.freezeLocked()
}

// push appends m, or reports false: the inbox is frozen or full.
func (b *inbox[T]) push(m *Message[T]) bool {
	n := uint64(len(b.slots))
	for {
		t := b.tail.Load()
		if t&frozen != 0 {
			return false
		}
		s := &b.slots[t%n]
		switch seq := s.seq.Load(); {
		case seq == t:
			if b.tail.CompareAndSwap(t, t+1) {
				s.m = m
				s.seq.Store(t + 1)
				return true
			}
		case seq < t:
			return false // full: its oldest slot is not drained yet
		}
		// Another producer took t meanwhile: look again.
	}
}

// claimed reports whether a producer has claimed a slot not drained yet.
func (b *inbox[T]) claimed() bool { return b.tail.Load()&^frozen != b.head }

// freezeLocked stops Offers from taking the inbox and drains it:
// afterwards it is empty and stays so until thawed.
func (q *Queue[T]) freezeLocked() {
	if b := q.in; !b.frozen {
		b.frozen = true
		b.tail.Or(frozen)
	}
	q.drainLocked()
}

// drainLocked moves the envelopes appended so far into the queue, in
// order, as a locked Offer at their PublishedAt would have: then every
// Offer that returned before the call is in the queue (later ones come
// after it). A slot claimed and not yet written holds it up (its producer
// is a few instructions from writing it). Before a message that would
// leave too little room for a full inbox beside the queue's messages
// (MaxQueue), it freezes the inbox: while it is open the queue holds at
// most MaxQueue minus its size, so every Offer that took it had room.
func (q *Queue[T]) drainLocked() {
	b := q.in
	n := uint64(len(b.slots))
	end := b.tail.Load() &^ frozen // later claims come after this call
	for b.head != end {
		s := &b.slots[b.head%n]
		if s.seq.Load() != b.head+1 {
			runtime.Gosched() // claimed, not written yet
			continue
		}
		if !b.frozen && q.nheld+1+len(b.slots) > q.cfg.MaxQueue {
			b.frozen = true
			b.tail.Or(frozen)
		}
		m := s.m
		s.m = nil
		s.seq.Store(b.head + n)
		b.head++
		q.insertLocked(m.PublishedAt, m, 0, 0, nil)
	}
}

// roomLocked is called before the queue takes a message by another way
// than the inbox (a locked Offer, a redrive, a restore): it freezes the
// inbox if one more message would leave too little room for a full one.
func (q *Queue[T]) roomLocked() {
	if b := q.in; !b.frozen && q.nheld+1+len(b.slots) > q.cfg.MaxQueue {
		q.freezeLocked()
	}
}

// thawLocked opens a frozen inbox again once the queue has room for two
// full ones (the margin keeps a queue near the bound from freezing and
// thawing on every call).
func (q *Queue[T]) thawLocked() {
	if b := q.in; b.frozen && b.open && !q.closed && q.nheld+2*len(b.slots) <= q.cfg.MaxQueue {
		b.frozen = false
		b.tail.And(^uint64(frozen))
	}
}
