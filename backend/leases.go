package backend

import (
	"iter"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// LeaseTable is the client side of a remote source's leases (a JetStream
// or SQS subscription's): the leases it handed out and still holds, each
// with the source's own record H of it, and the latest lease of each
// message, by the message's key K in the remote (a stream sequence, an SQS
// MessageId). With it a source tells a current lease (held) from a stale
// one (not held, but its message's latest is another: ErrLeaseExpired)
// and from one it never issued or whose message is gone
// (ErrLeaseNotFound), and forgets what it holds long past its deadline,
// so that it keeps no more than what it received lately.
//
// It is not safe for concurrent use: the source guards it with its own
// lock. The zero LeaseTable is not usable; make one with NewLeaseTable.
type LeaseTable[K comparable, H any] struct {
	keyOf  func(H) K
	held   map[lease.ID]H
	latest map[K]lease.ID
	swept  time.Time // the last Sweep's time
}

// NewLeaseTable returns an empty table whose records' keys keyOf reads.
func NewLeaseTable[K comparable, H any](keyOf func(H) K) *LeaseTable[K, H] {
	return &LeaseTable[K, H]{keyOf: keyOf, held: make(map[lease.ID]H), latest: make(map[K]lease.ID)}
}

// Hold records id as held, with h, and as the latest lease of h's
// message. If the message had a latest lease before, Hold returns it
// (superseded) and, if it was still held, its record and true: it is no
// longer held.
func (t *LeaseTable[K, H]) Hold(id lease.ID, h H) (superseded lease.ID, prev H, wasHeld bool) {
	key := t.keyOf(h)
	if old, ok := t.latest[key]; ok {
		superseded = old
		if prev, wasHeld = t.held[old]; wasHeld {
			delete(t.held, old)
		}
	}
	t.latest[key] = id
	t.held[id] = h
	return superseded, prev, wasHeld
}

// Held returns the record of a held lease.
func (t *LeaseTable[K, H]) Held(id lease.ID) (H, bool) {
	h, ok := t.held[id]
	return h, ok
}

// Take stops holding id (a settle under way) and returns its record; the
// message's latest lease stays id, so PutBack can hold it again.
func (t *LeaseTable[K, H]) Take(id lease.ID) (H, bool) {
	h, ok := t.held[id]
	if ok {
		delete(t.held, id)
	}
	return h, ok
}

// PutBack holds id again with h (a settle that did not reach the remote),
// unless h's message has a later lease since; it reports whether it did.
func (t *LeaseTable[K, H]) PutBack(id lease.ID, h H) bool {
	if t.latest[t.keyOf(h)] != id {
		return false
	}
	t.held[id] = h
	return true
}

// Latest returns the latest lease of the message key.
func (t *LeaseTable[K, H]) Latest(key K) (lease.ID, bool) {
	id, ok := t.latest[key]
	return id, ok
}

// Forget forgets the message key (it is settled for good): its latest
// lease, and that lease's hold if held. It returns the lease and whether
// it was held.
func (t *LeaseTable[K, H]) Forget(key K) (id lease.ID, h H, wasHeld bool) {
	id, ok := t.latest[key]
	if !ok {
		return id, h, false
	}
	delete(t.latest, key)
	h, wasHeld = t.held[id]
	if wasHeld {
		delete(t.held, id)
	}
	return id, h, wasHeld
}

// ForgetIf forgets the message key if its latest lease is id (it is
// settled for good through id), and reports whether it did. Whether id is
// held is not its business: Take stops holding it.
func (t *LeaseTable[K, H]) ForgetIf(id lease.ID, key K) bool {
	if t.latest[key] != id {
		return false
	}
	delete(t.latest, key)
	return true
}

// Sweep forgets, if a sweep has not run within every of now, each held
// lease for which stale reports true, and its message's latest if that is
// it, calling drop for each; it reports whether it ran.
func (t *LeaseTable[K, H]) Sweep(now time.Time, every time.Duration, stale func(H) bool, drop func(lease.ID, H)) bool {
	if now.Sub(t.swept) <= every {
		return false
	}
	t.swept = now
	for id, h := range t.held {
		if stale(h) {
			delete(t.held, id)
			t.ForgetIf(id, t.keyOf(h))
			if drop != nil {
				drop(id, h)
			}
		}
	}
	return true
}

// All yields every held lease and its record.
func (t *LeaseTable[K, H]) All() iter.Seq2[lease.ID, H] {
	return func(yield func(lease.ID, H) bool) {
		for id, h := range t.held {
			if !yield(id, h) {
				return
			}
		}
	}
}

// Len returns how many leases are held.
func (t *LeaseTable[K, H]) Len() int { return len(t.held) }

// Clear forgets everything.
func (t *LeaseTable[K, H]) Clear() {
	clear(t.held)
	clear(t.latest)
}
