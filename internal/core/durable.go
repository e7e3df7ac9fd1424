package core

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// This file is the queue's side of durability: the hooks a durable store
// (broker.Open's journal) uses to log every change, and to rebuild a queue
// after a restart. An in-memory queue has no Recorder and pays one nil check
// per call.

// Recorder is told of every change to a queue's messages, in order, while the
// queue's lock is held, so that a store can log them and rebuild the queue
// after a crash. Its methods other than Commit must not block on anything
// but a short lock of its own, must not fail (a store that cannot log
// reports it from Commit), and must not call back into the queue.
//
// Nothing is recorded for a lease expiring: a message delivered and never
// settled counts, after a restart, as one whose lease expired (Entry.InFlight).
// Extend and lease IDs are not recorded either; no lease survives a restart.
type Recorder[T any] interface {
	// Offered: a message was accepted (Attempts 0), or a dead letter came
	// back by Redrive. note is the OfferOption WithNote's value, or nil.
	Offered(e Entry[T], note any)
	// Delivered: each message in ds was delivered once more (its attempt
	// is spent).
	Delivered(ds []queue.Delivery[T])
	// Retried: a delivered message waits again (Nack, Fail), visible at
	// visibleAt (zero: now), its attempt spent.
	Retried(m *queue.Message[T], visibleAt time.Time, lastErr string)
	// Released: a delivered message is visible again and its attempt is
	// given back.
	Released(m *queue.Message[T])
	// Removed: a message is gone (acked, or dropped by OverflowDropOldest).
	// note is AckNoted's (nil for every other removal).
	Removed(m *queue.Message[T], note any)
	// DeadLettered: a message left the queue as a dead letter.
	DeadLettered(dl Letter[T])
	// Purged: every message the queue held is gone.
	Purged()
	// Paused: the queue was paused (true) or resumed (false).
	Paused(paused bool)
	// Commit is called without the queue's lock before a call that
	// recorded something returns (but an Offer WithDeferredCommit leaves
	// it to its caller): it returns once what was recorded is as durable
	// as the store promises, and its error is the call's. Changes that a
	// call without an error to return makes in passing (Stats settling an
	// expiry) are committed by the next Commit.
	Commit() error
}

// Entry is one message a queue holds (or dead-lettered), as a durable store
// logs it and gives it back to Restore. Times are absolute, from the queue's
// clock.
type Entry[T any] struct {
	Message  *queue.Message[T]
	Place    uint64 // its place in publish order within the queue
	Attempts int    // attempts spent
	InFlight bool   // delivered and not settled: after a restart, its lease has expired
	// StillLeased keeps an InFlight entry in flight, with no lease anyone
	// here can settle and no deadline (it never expires): how a copy of a
	// journal whose owner still runs shows the owner's leases.
	StillLeased bool
	VisibleAt   time.Time
	TTL         time.Duration // its time to live, counted again from a redrive
	ExpiresAt   time.Time     // zero: never
	LastError   string
	// Dead marks a dead letter, with its Reason and when (DeadAt).
	Dead   bool
	Reason queue.Reason
	DeadAt time.Time
	// History is a dead letter's attempts (DeadLetter.History); a live
	// message's are not kept across a restart.
	History []queue.Attempt
}

// WithNote hands v to the queue's Recorder with the offered message, so
// that a fan-out can encode a message once for every subscription.
func WithNote(v any) OfferOption { return OfferOption{kind: offerNote, note: v} }

// WithDeferredCommit makes Offer leave the Recorder's Commit to its
// caller, who calls it once after offering a message to many queues (a
// fan-out waits for the disk once, not once per subscription).
func WithDeferredCommit() OfferOption { return OfferOption{kind: offerDeferred} }

// NewRecorded is New with a Recorder that is told of every change.
func NewRecorded[T any](cfg queue.Config, onDead func(Letter[T]), rec Recorder[T]) (*Queue[T], error) {
	q, err := New(cfg, onDead)
	if err != nil {
		return nil, err
	}
	q.rec = rec
	q.mu.Lock()
	q.in = newInbox(q, defaultInbox) // frozen for good, one slot: every Offer is recorded before it returns
	q.mu.Unlock()
	return q, nil
}

// Restore puts back what a durable store logged, into a queue that has not
// been used yet (it may be called more than once before that). Live entries
// take their places, attempts and times; an entry that was in flight counts
// as an expired lease, so one on its last attempt is dead-lettered at once
// (ReasonMaxAttempts, told to the Recorder). Restored messages count as
// Published. Entries given in place order are not sorted again.
//
// Restore returns the dead letters: the dead entries, in the order given
// (a later Redrive puts each back in its place), then those it made. It
// hands none of them to onDead and does not call the Recorder's Commit: a
// store restoring many queues routes them and commits once all are back.
// It ignores the MaxQueue bound (nothing recovered is dropped) and returns
// ErrClosed on a closed queue.
func (q *Queue[T]) Restore(es []Entry[T]) ([]Letter[T], error) {
	now, err := q.lock()
	if err != nil {
		return nil, err
	}
	var dead []Letter[T]
	sorted, last := true, uint64(0)
	for i := range es {
		r := &es[i]
		q.nextSeq = max(q.nextSeq, r.Place)
		if r.Dead {
			dl := DeadLetterOf(q.cfg.Name, *r)
			dl.origin = q.scope
			dead = append(dead, dl)
			continue
		}
		sorted = sorted && r.Place >= last
		last = r.Place
	}
	live := es
	if !sorted { // rare: sort a copy, and leave the caller's slice alone
		live = slices.DeleteFunc(slices.Clone(es), func(r Entry[T]) bool { return r.Dead })
		slices.SortFunc(live, func(a, b Entry[T]) int { return cmp.Compare(a.Place, b.Place) })
	}
	for i := range live {
		r := &live[i]
		if r.Dead {
			continue
		}
		e := q.newEntryLocked(r.Message)
		q.nextSeq-- // newEntryLocked took a place; the entry keeps its own
		e.place = r.Place
		e.attempt = int32(min(r.Attempts, math.MaxInt32))
		q.setLastErrLocked(e, r.LastError)
		if !r.ExpiresAt.IsZero() {
			q.setTTLLocked(e, q.tickOf(r.ExpiresAt), r.TTL)
		}
		q.stats.Published++
		if r.InFlight && r.StillLeased {
			q.holdLeasedLocked(e)
			continue
		}
		if r.InFlight {
			q.setErrKindLocked(e, errExpired)
			if q.exhausted(e) {
				q.deadLetterLocked(now, e, queue.ReasonMaxAttempts)
				continue
			}
		} else if !r.VisibleAt.IsZero() {
			e.at = q.tickOf(r.VisibleAt)
		}
		q.placeLocked(now, e, true)
	}
	for _, b := range append(q.backlog, q.pending) { // its own settle's too, had it more than a chunk due
		for _, n := range b {
			dead = append(dead, q.letter(n))
		}
	}
	q.backlog, q.pending, q.dirty = nil, nil, false
	q.signalIdleLocked()
	q.mu.Unlock()
	return dead, nil
}

// holdLeasedLocked puts a restored entry in flight for good (see
// Entry.StillLeased), out among its key's if it has one.
func (q *Queue[T]) holdLeasedLocked(e *entry[T]) {
	if key := e.key(); key != "" {
		q.keyQueueLocked(key).out++
	}
	e.state = stateLeased
	e.at = farTick
	q.inflight.Push(e)
}

// DeadLetterOf returns a dead entry as the dead letter that the
// subscription named sub made of it, with its place and TTL. It is for a
// store restoring a dead letter whose subscription is gone: a Redrive
// treats it as coming from another queue. (Restore makes the dead letters
// of a queue that still exists.)
func DeadLetterOf[T any](sub string, e Entry[T]) Letter[T] {
	return Letter[T]{
		DeadLetter: queue.DeadLetter[T]{
			Subscription: sub, Message: *e.Message, Reason: e.Reason, Attempts: e.Attempts,
			LastError: e.LastError, At: e.DeadAt, History: e.History,
		},
		Place: e.Place, TTL: e.TTL,
	}
}

// Freeze locks the queue and returns everything it holds, and whether it
// is paused; every other call on the queue waits until thaw is called
// (exactly once). A durable store uses it to write a consistent snapshot
// of many queues. A closed queue returns no entries.
func (q *Queue[T]) Freeze() (es []Entry[T], paused bool, thaw func()) {
	q.mu.Lock()
	thaw = func() { _ = q.unlock() } // nothing recorded while frozen: no Commit to report
	if q.closed {
		return nil, false, thaw
	}
	q.drainLocked()
	es = make([]Entry[T], 0, q.nheld)
	for slot := range q.slots {
		e := q.entryAt(slot)
		if e.msg == nil {
			continue
		}
		es = append(es, q.entryLocked(e))
	}
	return es, q.paused, thaw
}

// RestorePaused pauses a queue that a store restores as paused, without
// recording it (the store has it already).
func (q *Queue[T]) RestorePaused() {
	q.mu.Lock()
	q.paused = true
	q.mu.Unlock()
}

// Reconfigure changes the queue's configuration (all but Name and Clock,
// which stay). It applies to what happens next: a lease already out keeps
// its deadline and a message already held keeps its expiry. A durable
// broker uses it when a subscription recovered from disk is declared again
// with other options. An invalid cfg is an error matching
// ErrInvalidArgument.
func (q *Queue[T]) Reconfigure(cfg queue.Config) error {
	if err := ValidateConfig(cfg); err != nil {
		return err
	}
	cfg = withDefaults(cfg)
	if _, err := q.lock(); err != nil {
		return err
	}
	q.cfg.VisibilityTimeout = cfg.VisibilityTimeout
	q.cfg.MaxAttempts = cfg.MaxAttempts
	q.cfg.Retry = cfg.Retry
	q.cfg.MaxQueue = cfg.MaxQueue
	q.cfg.Overflow = cfg.Overflow
	q.cfg.MaxInFlight = cfg.MaxInFlight
	q.cfg.TTL = cfg.TTL
	q.cfg.RateLimit = cfg.RateLimit
	q.cfg.KeyRateLimit = cfg.KeyRateLimit
	raised := cfg.KeyConcurrency > q.cfg.KeyConcurrency
	q.cfg.KeyConcurrency = cfg.KeyConcurrency
	if raised {
		now := q.clock.Now()
		for _, kq := range q.keys { // more of each key may be out now
			q.admitLocked(now, kq)
		}
	}
	if cfg.FairKeys != q.cfg.FairKeys {
		q.cfg.FairKeys = cfg.FairKeys
		q.reorderLocked()
	}
	q.wakeLocked() // a poller held back by MaxInFlight or a limit may go on
	return q.unlock()
}
