package core

import (
	"context"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// WithTTL gives an offered message a time to live from its publish,
// overriding Config.TTL: if it has not been acked by then it is
// dead-lettered with ReasonExpired instead of being delivered (a message in
// flight may still be acked). d must be > 0.
func WithTTL(d time.Duration) OfferOption { return OfferOption{ttl: d} }

// Offer adds m to the queue, visible after delay (0: at once). m is shared,
// not copied: neither the caller nor the queue may change it afterwards.
// When the queue is full its overflow policy decides (see OverflowPolicy).
//
// With an ordering key (m.Key), the message is held back while an earlier
// message of its key is held, so a key's messages are delivered one at a
// time, in publish order.
//
// A plain message (no key, delay or TTL, on a queue in memory with room
// to spare) does not wait for the queue's lock: it goes to the queue's
// inbox, which the next call that takes the lock drains first, so that
// every call after Offer returns sees m, in publish order.
//
// Offer takes m.PublishedAt, when set, as the current time: the delay
// counts from the publish, so every subscription of one publish agrees,
// and a fan-out reads the clock once. A zero PublishedAt means the clock's
// now.
func (q *Queue[T]) Offer(ctx context.Context, m *queue.Message[T], delay time.Duration, opts ...OfferOption) error {
	oa, err := offerArgs(ctx, m, delay, opts)
	if err != nil {
		return err
	}
	if q != nil && len(opts) == 0 && delay == 0 && m.Key == "" && !m.PublishedAt.IsZero() && q.in.push(m) {
		if q.in.waiting.Load() { // a Poll may be parked: wake it
			q.mu.Lock()
			q.drainLocked()
			return q.unlock()
		}
		return nil
	}
	ttl := oa.ttl // 0: the queue's, read under the lock
	at := m.PublishedAt
	for {
		now, err := q.lockUnsettled(at)
		if err != nil {
			return err
		}
		q.roomLocked() // before the room is weighed (offerNeedsNoSettleLocked too)
		if q.offerNeedsNoSettleLocked(now, m) {
			q.leaveSettleLocked(now)
		} else if err := q.settleOpenLocked(now); err != nil {
			return err
		}
		if ttl == 0 {
			ttl = q.cfg.TTL
		}
		if q.nheld < q.cfg.MaxQueue {
			q.insertLocked(now, m, delay, ttl, oa.note)
			return q.unlockOffer(oa.deferred)
		}
		switch q.cfg.Overflow {
		case queue.OverflowReject:
			q.stats.Rejected++
			q.unlock()
			return &queue.FullError{Subscription: q.cfg.Name, Limit: q.cfg.MaxQueue}
		case queue.OverflowDropOldest:
			q.dropOldestLocked(now, m, delay, ttl, oa.note)
			return q.unlockOffer(oa.deferred)
		case queue.OverflowBlock:
			if err := ctx.Err(); err != nil {
				q.stats.Rejected++
				q.unlock()
				return &queue.FullError{Subscription: q.cfg.Name, Limit: q.cfg.MaxQueue, Err: err}
			}
			if q.room == nil {
				q.room = make(chan struct{})
			}
			room := q.room
			q.unlock()
			select {
			case <-room:
			case <-ctx.Done():
			}
			at = time.Time{} // time has passed: read the clock from now on
			continue         // re-check: closed, room, or ctx
		default: // OverflowDeadLetter
			q.overflowDeadLetterLocked(now, m, ttl, oa.note)
			return q.unlockOffer(oa.deferred)
		}
	}
}

// offerNeedsNoSettleLocked reports whether an Offer of m at now may leave
// the settle due (another call's unfinished one, between two chunks, or
// one nobody has begun; see sweepLocked) for later, because its outcome
// is the same before and after that settle and its own at now: there is
// room whatever the settle frees, m's key (if any) holds nothing the
// settle could change, the queue takes no fair turns (which go by the
// order messages become visible in), and now is no earlier than the
// settle's time, so that m is not due in it (neither its delay nor its TTL
// can have passed).
//
// With nothing due it reports false: the settle costs nothing.
func (q *Queue[T]) offerNeedsNoSettleLocked(now time.Time, m *queue.Message[T]) bool {
	switch {
	case q.nheld >= q.cfg.MaxQueue, m.Key != "" && q.keys[m.Key] != nil, q.ready.fair != nil:
		return false
	case q.sweeping:
		return !now.Before(q.sweepAt)
	}
	return q.tickOf(now) >= q.due
}

// leaveSettleLocked leaves the settle due at now, which an Offer need not
// do, to the next call that settles: it does it at now first, as the
// Offer would have (sweepLocked). With another call's settle unfinished
// there is nothing to mark: that call finishes its own, and the next one
// settles at its time. So a publish never does the sweep of a million
// expiries it happened to find, and a single goroutine sees no
// difference.
func (q *Queue[T]) leaveSettleLocked(now time.Time) {
	if !q.sweeping {
		q.sweeping, q.sweepAt, q.sweepLeft = true, now, true
	}
}

// offerSpec is what an Offer's options say.
type offerSpec struct {
	ttl      time.Duration
	note     any
	deferred bool
}

// offerArgs checks an Offer's arguments and reads its options.
func offerArgs[T any](ctx context.Context, m *queue.Message[T], delay time.Duration, opts []OfferOption) (offerSpec, error) {
	var oa offerSpec
	for _, o := range opts {
		switch {
		case o.kind == offerDeferred:
			oa.deferred = true
		case o.kind == offerNote:
			oa.note = o.note
		case o.ttl <= 0:
			return oa, invalid("Offer: TTL = %v, must be > 0", o.ttl)
		default:
			oa.ttl = o.ttl
		}
	}
	switch {
	case ctx == nil:
		return oa, invalid("Offer: nil context")
	case m == nil:
		return oa, invalid("Offer: nil message")
	case !ValidPriority(m.Priority):
		return oa, invalid("Offer: priority %v, must be PriorityLow..PriorityCritical", m.Priority)
	case delay < 0:
		return oa, invalid("Offer: delay = %v, must be >= 0", delay)
	}
	return oa, nil
}

// dropOldestLocked makes room for m by dropping the oldest visible message
// of the lowest priority (OverflowDropOldest); with nothing visible to
// drop, the newcomer goes.
func (q *Queue[T]) dropOldestLocked(now time.Time, m *queue.Message[T], delay, ttl time.Duration, note any) {
	e := q.ready.popOldestLowest()
	if e == nil {
		q.stats.Published++
		q.stats.Dropped++
		return
	}
	q.stats.Dropped++
	if q.rec != nil {
		q.dirty = true
		q.rec.Removed(e.msg, nil)
	}
	q.finishLocked(now, e)
	q.insertLocked(now, m, delay, ttl, note)
}

// overflowDeadLetterLocked dead-letters m, which does not fit
// (OverflowDeadLetter), with the place it would have had: a redrive puts
// it there.
func (q *Queue[T]) overflowDeadLetterLocked(now time.Time, m *queue.Message[T], ttl time.Duration, note any) {
	q.stats.Published++
	q.countDeadLocked(queue.ReasonOverflow)
	q.nextSeq++
	n := deadNote[T]{msg: m, reason: queue.ReasonOverflow, at: now, place: q.nextSeq, ttl: ttl}
	q.pending = append(q.pending, n)
	if q.rec != nil {
		q.dirty = true
		q.rec.Offered(Entry[T]{Message: m, Place: n.place, TTL: ttl}, note)
		q.rec.DeadLettered(q.letter(n))
	}
}

// unlockOffer is unlock for Offer: with WithDeferredCommit it leaves the
// Recorder's Commit to the caller.
func (q *Queue[T]) unlockOffer(deferred bool) error {
	if deferred {
		q.dirty = false
	}
	return q.unlock()
}

// Redrive puts a dead letter back as a fresh message: attempts start again
// from zero, its TTL (if any) counts again from now, and it is visible at
// once (or, with an ordering key, when its key's turn comes). A dead letter of this queue keeps
// its place (priority and publish order); one from elsewhere queues as if
// just published. It never blocks, drops or dead-letters: when the queue
// is full it returns an error matching ErrQueueFull and changes nothing.
//
// Of opts, only WithNote counts: the note the Recorder's Offered gets (nil
// without it).
func (q *Queue[T]) Redrive(dl Letter[T], opts ...OfferOption) error {
	var note any
	for _, o := range opts {
		if o.kind == offerNote {
			note = o.note
		}
	}
	if !ValidPriority(dl.Message.Priority) {
		return invalid("Redrive: priority %v, must be PriorityLow..PriorityCritical", dl.Message.Priority)
	}
	now, err := q.lock()
	if err != nil {
		return err
	}
	q.roomLocked()
	if q.nheld >= q.cfg.MaxQueue {
		full := fmt.Errorf("redrive: %w", &queue.FullError{Subscription: q.cfg.Name, Limit: q.cfg.MaxQueue})
		if err := q.unlock(); err != nil {
			return err
		}
		return full
	}
	m := dl.Message
	e := q.newEntryLocked(&m)
	ttl := q.cfg.TTL // a stranger queues as if just published here
	if dl.origin == q.scope {
		e.place, ttl = dl.Place, dl.TTL
	}
	if ttl > 0 {
		q.setTTLLocked(e, q.tickOf(now).after(ttl), ttl)
	}
	if len(dl.History) > 0 { // its attempts so far go on with it
		q.setAttemptsLocked(e, dl.History)
	}
	q.stats.Redriven++
	if q.rec != nil {
		q.dirty = true
		expires, ttl := q.expiresLocked(e)
		q.rec.Offered(Entry[T]{Message: e.msg, Place: e.place, TTL: ttl, ExpiresAt: expires}, note)
	}
	q.placeLocked(now, e, false)
	return q.unlock()
}

func (q *Queue[T]) insertLocked(now time.Time, m *queue.Message[T], delay, ttl time.Duration, note any) {
	e := q.newEntryLocked(m)
	q.stats.Published++
	if delay > 0 || ttl > 0 {
		t := q.tickOf(now)
		if delay > 0 {
			e.at = t.after(delay)
		}
		if ttl > 0 {
			q.setTTLLocked(e, t.after(ttl), ttl)
		}
	}
	if q.rec != nil {
		q.dirty = true
		expires, _ := q.expiresLocked(e)
		q.rec.Offered(Entry[T]{Message: m, Place: e.place, VisibleAt: q.timeOf(e.at), TTL: ttl, ExpiresAt: expires}, note)
	}
	q.placeLocked(now, e, true)
}
