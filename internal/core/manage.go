package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// This file is what an operator does to one held message, found by its
// ID: delete it, make a delayed one visible now, change its payload.

// DeleteMessages drops the messages with the IDs given, wherever each
// waits: visible, delayed, held back or in flight (its lease is then
// unknown: the consumer's Ack returns ErrLeaseNotFound). Each counts as
// Dropped, and the next message of its ordering key gets its turn. It
// returns how many it dropped, and an error matching ErrMessageNotFound
// naming the IDs it does not hold (having dropped the rest). A queue with
// a Recorder records it. After Close, ErrClosed.
func (q *Queue[T]) DeleteMessages(ids ...uuid.UUID) (int, error) {
	return q.manage(ids, func(now time.Time, e *entry[T]) (bool, error) {
		q.stats.Dropped++
		q.removeLocked(now, e, nil)
		return true, nil
	})
}

// MakeVisible makes the delayed messages with the IDs given (waiting out
// a publish delay or a retry's backoff) visible now, each in its place,
// and returns how many. A visible one is left as it is (not counted); one
// in flight or held back behind its key cannot be, and is an error
// matching ErrInvalidArgument; an ID the queue does not hold is one
// matching ErrMessageNotFound. The others are made visible all the same.
// A queue with a Recorder records it. After Close, ErrClosed.
func (q *Queue[T]) MakeVisible(ids ...uuid.UUID) (int, error) {
	return q.manage(ids, func(now time.Time, e *entry[T]) (bool, error) {
		switch {
		case e.state == stateReady || e.state == stateLimited: // a key-limited one is visible, waiting for its key's token
			return false, nil
		case e.state != stateDelayed:
			return false, fmt.Errorf("%w: message %v is %s: only a delayed message can be made visible", queue.ErrInvalidArgument, e.msg.ID, heldState(e.state))
		}
		q.delayed.remove(int(e.index))
		e.at = noTick
		q.ready.push(e, false)
		q.wakeLocked()
		q.recordPutLocked(e)
		return true, nil
	})
}

// EditPayload replaces the payload of the message with ID id, which keeps
// its ID, place, attempts and everything else: the next delivery carries
// the new payload (one in flight now keeps the one it has). Only this
// queue's copy changes; the other subscriptions of a fan-out keep theirs.
// A queue with a Recorder records it. A message the queue does not hold
// is ErrMessageNotFound; after Close, ErrClosed.
func (q *Queue[T]) EditPayload(id uuid.UUID, payload T) error {
	_, err := q.manage([]uuid.UUID{id}, func(now time.Time, e *entry[T]) (bool, error) {
		m := *e.msg // the envelope is shared (fan-out, dedup): a copy of its own
		m.Payload = payload
		e.msg = &m
		q.recordPutLocked(e)
		return true, nil
	})
	return err
}

// recordPutLocked records e whole, as it is now: a durable store's put
// replaces the message it held under that ID.
func (q *Queue[T]) recordPutLocked(e *entry[T]) {
	if q.rec != nil {
		q.dirty = true
		q.rec.Offered(q.entryLocked(e), nil)
	}
}

// manage runs f on the entry of each message in ids, under the lock, and
// returns how many f counted, with f's errors and one for each ID the
// queue does not hold, joined. It finds them with one pass over the
// arena, a chunk at a time, letting go of the lock between chunks as Peek
// does.
func (q *Queue[T]) manage(ids []uuid.UUID, f func(now time.Time, e *entry[T]) (bool, error)) (int, error) {
	want := make(map[uuid.UUID]bool, len(ids)) // true once found
	for _, id := range ids {
		want[id] = false
	}
	now, err := q.lock()
	if err != nil {
		return 0, err
	}
	var (
		n    int
		errs []error
		left = len(want)
	)
	for slot := uint32(0); slot < q.slots && left > 0; {
		end := min(q.slots, slot+peekChunk)
		for ; slot < end && left > 0; slot++ {
			e := q.entryAt(slot)
			if e.msg == nil || e.state == stateFree {
				continue
			}
			if found, ok := want[e.msg.ID]; !ok || found {
				continue
			}
			want[e.msg.ID] = true
			left--
			counted, err := f(now, e)
			if counted {
				n++
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		if slot >= q.slots || left == 0 {
			break
		}
		if err := q.unlock(); err != nil {
			return n, err
		}
		if now, err = q.lock(); err != nil {
			return n, err
		}
	}
	if err := q.unlock(); err != nil {
		return n, err
	}
	for _, id := range ids {
		if !want[id] {
			want[id] = true // named once
			errs = append(errs, fmt.Errorf("%w: %v", queue.ErrMessageNotFound, id))
		}
	}
	return n, errors.Join(errs...)
}

// entryLocked returns e as a durable store logs it.
func (q *Queue[T]) entryLocked(e *entry[T]) Entry[T] {
	r := Entry[T]{
		Message: e.msg, Place: e.place, Attempts: int(e.attempt), InFlight: e.state == stateLeased,
		LastError: q.lastErrLocked(e),
	}
	if e.state != stateLeased && e.state != stateLimited { // a leased entry's at is its deadline; a key-limited one is visible
		r.VisibleAt = q.timeOf(e.at)
	}
	r.ExpiresAt, r.TTL = q.expiresLocked(e)
	return r
}
