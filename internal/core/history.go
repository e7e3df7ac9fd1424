package core

import (
	"time"

	"github.com/leasebus/leasebus/queue"
)

// A message's attempts that did not end in an ack (queue.Attempt) are
// kept beside the queue, by slot, for the entries that had one (flag
// hasHistory): a message acked at its first delivery costs nothing.
//
// An attempt is kept as an attemptRec, which holds no pointer: a million
// leases expiring at once leave a million records the garbage collector
// does not scan. The first attempt of a message comes from a slab
// (q.histSlab), capped at one, so that they are not a million allocations
// either; a second one moves the history to an array of its own. Error
// texts, which only Fail and Reject give, are kept apart (q.histText).
// What a caller sees is made from the records when it asks (histOf,
// letter): a Peek, a dead letter.

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

// history is what a dead letter takes of its entry's attempts: the records
// and their texts, in order ((*texts)[i] for recs[i]; nil when none has one,
// as for most: only Fail and Reject give a text, so it costs the rest a
// word, not a slice, in every deadNote).
type history struct {
	recs  []attemptRec
	texts *[]string
}

// histSlab is how many first attempts one allocation holds (8 KiB).
const histSlab = 256

// histPage is a page of the table: the attempts of histPageLen
// consecutive slots. Pages are made as slots first need them, so the
// table never moves what it holds (a million failures cost no copy under
// the lock), and slots that never failed cost nothing past their page.
type histPage [histPageLen][]attemptRec

const histPageLen = 512

// noteLocked adds to e's history the attempt that ended at end with
// outcome (and, for a failure, its error text).
func (q *Queue[T]) noteLocked(end tick, e *entry[T], outcome queue.AttemptOutcome, text string) {
	r := attemptRec{end: end, leased: e.leased, attempt: int32(e.attempt), outcome: outcome, text: q.keepText(text)}
	if !e.is(hasHistory) {
		if len(q.histSlab) == 0 {
			q.histSlab = make([]attemptRec, histSlab)
		}
		h := q.histSlab[:1:1]
		q.histSlab = q.histSlab[1:]
		h[0] = r
		q.setHistLocked(e, h)
		return
	}
	h := q.recsOf(e)
	if len(h) == cap(h) && len(h) >= queue.MaxHistory {
		// Full: the latest MaxHistory-1 move to the front of the same
		// array, so a message that fails again and again copies its
		// history once every few attempts, not at each (histOf shows the
		// latest MaxHistory).
		drop := len(h) - (queue.MaxHistory - 1)
		q.forgetTexts(h[:drop])
		h = h[:copy(h, h[drop:])]
	}
	if len(h) == cap(h) { // grow in two steps: 1 (a slab's), 4, 16
		h = append(make([]attemptRec, 0, 4*cap(h)), h...)
	}
	q.setHistLocked(e, append(h, r))
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

// recsOf returns all e's records: up to a few more than MaxHistory.
func (q *Queue[T]) recsOf(e *entry[T]) []attemptRec {
	if i := int(e.slot / histPageLen); e.is(hasHistory) && i < len(q.hist) && q.hist[i] != nil {
		return q.hist[i][e.slot%histPageLen]
	}
	return nil
}

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
			text = (*h.texts)[i]
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
				texts := make([]string, len(recs))
				h.texts = &texts
			}
			(*h.texts)[i] = q.histText[r.text]
		}
	}
	return h
}

// setHistLocked gives e the records h.
func (q *Queue[T]) setHistLocked(e *entry[T], h []attemptRec) {
	i := int(e.slot / histPageLen)
	if i >= len(q.hist) {
		q.hist = append(q.hist, make([]*histPage, i+1-len(q.hist))...)
	}
	if q.hist[i] == nil {
		q.hist[i] = new(histPage)
	}
	q.hist[i][e.slot%histPageLen] = h
	e.flags |= hasHistory
}

// setAttemptsLocked gives e the history h, a redriven letter's.
func (q *Queue[T]) setAttemptsLocked(e *entry[T], h []queue.Attempt) {
	recs := make([]attemptRec, len(h))
	for i, a := range h {
		r := attemptRec{end: q.tickOf(a.At), leased: noTick, attempt: int32(a.Attempt), outcome: a.Outcome, text: q.keepText(a.Error)}
		if a.Held > 0 {
			r.leased = r.end - tick(a.Held)
		}
		recs[i] = r
	}
	q.setHistLocked(e, recs)
}

// dropHistLocked forgets e's history.
func (q *Queue[T]) dropHistLocked(e *entry[T]) {
	if !e.is(hasHistory) {
		return
	}
	p := &q.hist[e.slot/histPageLen][e.slot%histPageLen]
	q.forgetTexts(*p)
	*p = nil
}

// forgetTexts drops the texts of recs.
func (q *Queue[T]) forgetTexts(recs []attemptRec) {
	for _, r := range recs {
		if r.text > failedID {
			delete(q.histText, r.text)
		}
	}
}
