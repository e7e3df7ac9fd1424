package core

import (
	"time"
	"unicode/utf8"

	"github.com/leasebus/leasebus/queue"
)

// deadLetterLocked records e as a dead letter and lets go of it. e must be
// out of every structure already.
func (q *Queue[T]) deadLetterLocked(now time.Time, e *entry[T], reason queue.Reason) {
	q.countDeadLocked(reason)
	_, ttl := q.expiresLocked(e)
	n := deadNote[T]{msg: e.msg, reason: reason, attempts: e.attempt, lastErr: q.lastErrLocked(e), at: now, place: e.place, ttl: ttl}
	if e.is(hasHistory) {
		n.hist = q.historyLocked(e) // the entry lets go of it (recycleLocked)
	}
	if key := e.key(); key != "" {
		if kq := q.keys[key]; kq != nil {
			n.continued = kq.hasAfter(e.place)
		}
	}
	q.pending = append(q.pending, n)
	if q.rec != nil {
		q.dirty = true
		q.rec.DeadLettered(q.letter(n))
	}
	q.finishLocked(now, e)
}

// countDeadLocked counts a dead letter, in all and by its reason.
func (q *Queue[T]) countDeadLocked(reason queue.Reason) {
	q.stats.DeadLettered++
	c := &q.stats.DeadLetteredBy
	switch reason {
	case queue.ReasonMaxAttempts:
		c.MaxAttempts++
	case queue.ReasonOverflow:
		c.Overflow++
	case queue.ReasonExpired:
		c.Expired++
	case queue.ReasonRejected:
		c.Rejected++
	case queue.ReasonCancelled:
		c.Cancelled++
	}
}

// deadNote is a dead letter on its way to onDead: the shared envelope and
// what the letter adds to it, a third of a Letter's size, so that a sweep
// that dead-letters a million messages allocates (and keeps, until it is
// done) less under the lock. letter makes the Letter, outside the lock.
type deadNote[T any] struct {
	msg       *queue.Message[T]
	reason    queue.Reason
	continued bool // KeyContinued
	attempts  int32
	lastErr   string
	at        time.Time
	place     uint64
	ttl       time.Duration
	hist      history // made a []queue.Attempt by letter, outside the lock
}

// letter returns the dead letter n stands for. It reads no state that
// changes after New, so it needs no lock.
func (q *Queue[T]) letter(n deadNote[T]) Letter[T] {
	return Letter[T]{
		DeadLetter: queue.DeadLetter[T]{
			Subscription: q.cfg.Name,
			Message:      *n.msg,
			Reason:       n.reason,
			Attempts:     int(n.attempts),
			LastError:    n.lastErr,
			At:           n.at,
			KeyContinued: n.continued,
			History:      q.attempts(n.hist),
		},
		origin: q.scope,
		Place:  n.place,
		TTL:    n.ttl,
	}
}

func errText(err error) string {
	if err == nil {
		return failedText
	}
	return clipText(err.Error())
}

// maxErrText bounds the text of a failure's cause that a message keeps
// (LastError): a dead letter needs the gist, and a durable broker's journal
// records it beside the message.
const maxErrText = 4 << 10

// clipText cuts s to at most maxErrText bytes, at a rune boundary, marking
// the cut with an ellipsis.
func clipText(s string) string { return clipTo(s, maxErrText) }

// clipTo cuts s to at most n bytes, as clipText does.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
