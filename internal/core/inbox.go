package core

import (
	"runtime"
	"sync/atomic"

	"github.com/leasebus/leasebus/queue"
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
// It is a bounded queue with many producers and one consumer, after
// Vyukov's: a producer claims position pos by moving tail past it (only
// while pos is less than a full ring ahead of head, which the consumer
// publishes once per drain), writes its slot and then the slot's seq,
// pos+1, which tells the consumer that the slot holds pos's message. The
// consumer writes no seq: a slot's seq is pos+1 for its latest write, and
// the next write of the slot, pos+n, is only claimed once head passed pos,
// so a drain costs no atomic write per message. The high bit of tail
// freezes it: no producer claims a slot then, and the queue counts exactly
// (near MaxQueue, closed, or durable).
type inbox[T any] struct {
	tail atomic.Uint64 // the next position to claim, | frozenBit
	// waiting is set while a Poll waits (q.wake is not nil), and by a Poll
	// before it looks at the inbox a last time on its way to park: an
	// Offer that took the inbox then takes the lock to drain it, which
	// wakes the Poll.
	waiting atomic.Bool
	_       [48]byte // the producers' line, apart from the consumer's
	// head is the next position to drain: the lock holder's, stored for
	// the producers at the end of each drain (they claim no position a
	// full ring ahead of it).
	head atomic.Uint64
	// frozen mirrors tail's bit for the queue's lock holder, who reads it
	// on every unlock: reading tail instead pulls the producers' cache line
	// into every Ack and Poll.
	frozen bool
	slots  []inboxSlot[T] // a slot's seq is the position it was last written for, plus 1
	mask   uint64         // len(slots)-1: positions map to slots by a mask, not a division
}

// frozenBit, set in tail, stops producers from claiming slots.
const frozenBit = 1 << 63

type inboxSlot[T any] struct {
	seq atomic.Uint64
	m   *queue.Message[T]
}

// defaultInbox is an inbox's size: 4 KiB per subscription.
const defaultInbox = 256

// newInbox returns an inbox of n slots for q, frozen if q may not use it.
// n must be a power of two. An inbox q may never use (thawLocked asks
// inboxAllowedLocked, which stays false) gets one slot, never written, so
// that a durable or TTL subscription does not hold n empty ones.
func newInbox[T any](q *Queue[T], n int) *inbox[T] {
	if n <= 0 || n&(n-1) != 0 {
		panic("core: inbox size not a power of two") // a constant in the package
	}
	allowed := q.inboxAllowedLocked()
	if !allowed {
		n = 1
	}
	b := &inbox[T]{slots: make([]inboxSlot[T], n), mask: uint64(n - 1)} // seq 0: never written
	if !allowed || n > q.cfg.MaxQueue {
		b.freeze()
	}
	return b
}

// inboxAllowedLocked reports whether the queue may ever take messages
// through its inbox: not once closed, not when durable (every Offer is
// recorded before it returns), not with a TTL for every message.
func (q *Queue[T]) inboxAllowedLocked() bool { return !q.closed && q.rec == nil && q.cfg.TTL == 0 }

// freeze stops producers from claiming slots.
func (b *inbox[T]) freeze() {
	if !b.frozen {
		b.frozen = true
		b.tail.Or(frozenBit)
	}
}

// claimed reports whether a producer has claimed a slot not drained yet.
func (b *inbox[T]) claimed() bool { return b.tail.Load()&^frozenBit != b.head.Load() }

// push appends m, or reports false: the inbox is frozen or full.
func (b *inbox[T]) push(m *queue.Message[T]) bool {
	for {
		t := b.tail.Load()
		if t&frozenBit != 0 {
			return false
		}
		switch h := b.head.Load(); {
		case t < h: // t is stale: others claimed it and later ones, and a drain took them
			continue
		case t-h >= uint64(len(b.slots)):
			return false // full: head only grows, so that is no guess
		}
		if b.tail.CompareAndSwap(t, t+1) {
			s := &b.slots[t&b.mask]
			s.m = m
			s.seq.Store(t + 1)
			return true
		}
		// Another producer took t meanwhile (or froze the inbox): look again.
	}
}

// freezeLocked stops Offers from taking the inbox and drains it:
// afterwards it is empty and stays so until thawed.
func (q *Queue[T]) freezeLocked() {
	q.in.freeze()
	q.drainLocked()
}

// tightLocked reports whether one more message would leave too little room
// beside the queue's for a full inbox (MaxQueue): while the inbox is open
// the queue holds at most MaxQueue minus its size, so every Offer that
// took it had room.
func (q *Queue[T]) tightLocked() bool { return q.nheld+1+len(q.in.slots) > q.cfg.MaxQueue }

// drainLocked moves the envelopes appended so far into the queue, in
// order, as a locked Offer at their PublishedAt would have: then every
// Offer that returned before the call is in the queue (later ones come
// after it). A slot claimed and not yet written holds it up (its producer
// is a few instructions from writing it). It freezes the inbox before a
// message that leaves the queue tight.
func (q *Queue[T]) drainLocked() {
	b := q.in
	head := b.head.Load()
	end := b.tail.Load() &^ frozenBit // later claims come after this call
	if head == end {
		return // the usual case under the lock: no store of head for nothing
	}
	for head != end {
		s := &b.slots[head&b.mask]
		if s.seq.Load() != head+1 {
			runtime.Gosched() // claimed, not written yet
			continue
		}
		if !b.frozen && q.tightLocked() {
			b.freeze()
		}
		m := s.m
		s.m = nil // the queue holds it now; the ring must not keep it alive
		head++
		q.insertLocked(m.PublishedAt, m, 0, 0, nil)
	}
	b.head.Store(head) // the producers may reuse the slots
}

// roomLocked is called before the queue takes a message by another way
// than the inbox (a locked Offer, a redrive): it freezes the inbox if the
// message leaves the queue tight.
func (q *Queue[T]) roomLocked() {
	if !q.in.frozen && q.tightLocked() {
		q.freezeLocked()
	}
}

// thawLocked opens a frozen inbox again once the queue has room for two
// full ones (the margin keeps a queue near the bound from freezing and
// thawing on every call), unless it may not use it at all.
func (q *Queue[T]) thawLocked() {
	if b := q.in; b.frozen && q.inboxAllowedLocked() && q.nheld+2*len(b.slots) <= q.cfg.MaxQueue {
		b.frozen = false
		b.tail.And(^uint64(frozenBit))
	}
}
