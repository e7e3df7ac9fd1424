package core

import (
	"time"

	"github.com/leasebus/leasebus/queue"
)

// A message's attempts that did not end in an ack (queue.Attempt) are
// kept beside the queue, by slot, for the entries that had one (flag
// hasHistory): a message acked at its first delivery costs nothing.
//
// An attempt is kept as an attemptRec, which holds no pointer, in an
// arena of chunks (histArena), and a slot's page of the table (histPage)
// holds where its records are (a histRef), not a slice: nothing of a
// history is scanned by the garbage collector or written through its
// barrier, and a million leases expiring at once cost 40 bytes each of
// memory that holds no pointer, not a million allocations. Error texts,
// which only Fail and Reject give, are kept apart (q.histText). What a
// caller sees is made from the records when it asks (histOf, letter): a
// Peek, a dead letter.

// attemptRec is an attempt as the queue keeps it.
type attemptRec struct {
	end, leased tick   // when it ended; when its lease began (noTick: not known)
	text        uint64 // its error text: 0 none, failedID "failed", else a key of q.histText
	attempt     int32
	outcome     queue.AttemptOutcome
}

// failedID stands for failedText, the text of a Fail without a cause: the
// common failure keeps no text of its own.
const failedID = 1

// history is what a dead letter takes of its entry's attempts: at most
// MaxHistory records and their texts, in order (texts[i] for recs[i]; nil
// when none has one, as for most: only Fail and Reject give a text, so it
// costs the rest a word, not a slice, in every deadNote).
type history struct {
	recs  []attemptRec
	texts *[queue.MaxHistory]string
}

// histPage is a page of the table: where the attempts of histPageLen
// consecutive slots are. Pages are made as slots first need them, so the
// table never moves what it holds (a million failures cost no copy under
// the lock), and slots that never failed cost nothing past their page.
type histPage [histPageLen]histRef

const histPageLen = 512

// noteLocked adds to e's history the attempt that ended at end with
// outcome (and, for a failure, its error text).
func (q *Queue[T]) noteLocked(end tick, e *entry[T], outcome queue.AttemptOutcome, text string) {
	r := attemptRec{end: end, leased: e.leased, attempt: int32(e.attempt), outcome: outcome, text: q.keepText(text)}
	a := &q.histArena
	ref := q.refOf(e)
	if ref == 0 { // the first: a region of one
		ref = a.cut(1).withLen(1)
		a.recs(ref)[0] = r
		q.setRefLocked(e, ref)
		return
	}
	h := a.recs(ref)
	if len(h) == cap(h) && len(h) >= queue.MaxHistory {
		// Full: the latest MaxHistory-1 move to the front of the same
		// region, so a message that fails again and again copies its
		// history once every few attempts, not at each (histOf shows the
		// latest MaxHistory).
		drop := len(h) - (queue.MaxHistory - 1)
		q.forgetTexts(h[:drop])
		h = h[:copy(h, h[drop:])]
	}
	if len(h) == cap(h) { // grow in two steps: 1, 4, 16
		grown := a.cut(4 * cap(h))
		g := a.recs(grown)[:len(h)]
		copy(g, h)
		a.release(ref)
		ref, h = grown, g
	}
	h = append(h, r) // within its region's capacity
	q.setRefLocked(e, ref.withLen(len(h)))
}

// keepText keeps an attempt's error text (cut to MaxHistoryError) and
// returns what its record holds for it.
func (q *Queue[T]) keepText(text string) uint64 {
	switch text {
	case "":
		return 0
	case failedText:
		return failedID
	}
	if q.histText == nil {
		q.histText = make(map[uint64]string)
	}
	q.nextText++
	id := q.nextText + failedID
	q.histText[id] = clipTo(text, queue.MaxHistoryError)
	return id
}

// refOf returns where e's records are; 0 when it has none.
func (q *Queue[T]) refOf(e *entry[T]) histRef {
	if i := int(e.slot / histPageLen); e.is(hasHistory) && i < len(q.hist) && q.hist[i] != nil {
		return q.hist[i][e.slot%histPageLen]
	}
	return 0
}

// recsOf returns all e's records: up to a few more than MaxHistory.
func (q *Queue[T]) recsOf(e *entry[T]) []attemptRec { return q.histArena.recs(q.refOf(e)) }

// histOf returns e's history as a caller sees it: its latest MaxHistory
// attempts, oldest first; nil without one.
func (q *Queue[T]) histOf(e *entry[T]) []queue.Attempt { return q.attempts(q.historyLocked(e)) }

// attempt makes r the attempt a caller sees; text is its error text when
// it has one of its own. It reads no state that changes after New.
func (q *Queue[T]) attempt(r attemptRec, text string) queue.Attempt {
	a := queue.Attempt{Attempt: int(r.attempt), Outcome: r.outcome, At: q.timeOf(r.end)}
	if r.leased != noTick {
		a.Held = time.Duration(r.end - r.leased)
	}
	switch r.text {
	case 0:
	case failedID:
		a.Error = failedText
	default:
		a.Error = text
	}
	return a
}

// attempts makes h (a held message's, or a dead letter's) what a caller sees. It reads no
// state that changes after New, so it needs no lock.
func (q *Queue[T]) attempts(h history) []queue.Attempt {
	if len(h.recs) == 0 {
		return nil
	}
	out := make([]queue.Attempt, len(h.recs))
	for i, r := range h.recs {
		text := ""
		if h.texts != nil {
			text = h.texts[i]
		}
		out[i] = q.attempt(r, text)
	}
	return out
}

// historyLocked returns e's latest MaxHistory attempts with their texts:
// what a dead letter keeps of them once e is gone (and its texts with it,
// dropHistLocked).
func (q *Queue[T]) historyLocked(e *entry[T]) history {
	recs := q.recsOf(e)
	recs = recs[max(0, len(recs)-queue.MaxHistory):]
	h := history{recs: recs}
	for i, r := range recs {
		if r.text > failedID {
			if h.texts == nil {
				h.texts = new([queue.MaxHistory]string)
			}
			h.texts[i] = q.histText[r.text]
		}
	}
	return h
}

// setRefLocked gives e the records at ref.
func (q *Queue[T]) setRefLocked(e *entry[T], ref histRef) {
	i := int(e.slot / histPageLen)
	if i >= len(q.hist) {
		q.hist = append(q.hist, make([]*histPage, i+1-len(q.hist))...)
	}
	if q.hist[i] == nil {
		q.hist[i] = new(histPage)
	}
	q.hist[i][e.slot%histPageLen] = ref
	e.flags |= hasHistory
}

// setAttemptsLocked gives e the history h, a redriven letter's (its
// latest MaxHistory, as a letter holds no more).
func (q *Queue[T]) setAttemptsLocked(e *entry[T], h []queue.Attempt) {
	h = h[max(0, len(h)-queue.MaxHistory):]
	ref := q.histArena.cut(len(h))
	recs := q.histArena.recs(ref)[:len(h)]
	for i, a := range h {
		r := attemptRec{end: q.tickOf(a.At), leased: noTick, attempt: int32(a.Attempt), outcome: a.Outcome, text: q.keepText(a.Error)}
		if a.Held > 0 {
			r.leased = r.end - tick(a.Held)
		}
		recs[i] = r
	}
	q.setRefLocked(e, ref.withLen(len(h)))
}

// dropHistLocked forgets e's history. A dead letter made from it keeps
// its records: their region is never cut again (see histArena).
func (q *Queue[T]) dropHistLocked(e *entry[T]) {
	if !e.is(hasHistory) {
		return
	}
	p := &q.hist[e.slot/histPageLen][e.slot%histPageLen]
	q.forgetTexts(q.histArena.recs(*p))
	q.histArena.release(*p)
	*p = 0
}

// forgetTexts drops the texts of recs.
func (q *Queue[T]) forgetTexts(recs []attemptRec) {
	for _, r := range recs {
		if r.text > failedID {
			delete(q.histText, r.text)
		}
	}
}
