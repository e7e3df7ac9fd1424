package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// dedup remembers one topic's publish dedup IDs for a fixed window from
// their first publish, at most limit of them: never forgets one inside its
// window, but refuses a new ID (ErrDedupFull) when limit are.
//
// An ID is first reserved, pending, while its publish offers the message;
// it is confirmed once the message is stored (on a durable broker, as the
// group that records the message and the ID is appended, under d.mu), or
// forgotten if no subscription took it. A pending ID is never in a
// snapshot, so a journal never holds an ID without its message; a second
// publish of a pending ID waits for the first to end.
type dedup[T any] struct {
	mu    sync.Mutex // guards everything below
	byID  map[string]*dedupEntry[T]
	order []*dedupEntry[T] // order[head:], by first publish
	head  int
	// settled is closed (and dropped) when a pending ID is confirmed or
	// forgotten; nil while no publish waits for one.
	settled chan struct{}
}

type dedupEntry[T any] struct {
	id      string
	msg     queue.Message[T]
	at      time.Time
	pending bool // while the publish that reserved the ID runs
}

// reserve returns the message already published with id inside the
// window (dup), or reserves id for m, pending, and returns the entry to
// confirm or forget. It waits while another publish of id is pending, and
// returns ctx's error if ctx ends first.
func (d *dedup[T]) reserve(ctx context.Context, id string, m queue.Message[T], window time.Duration, limit int) (e *dedupEntry[T], orig queue.Message[T], dup bool, err error) {
	now := m.PublishedAt
	d.mu.Lock()
	for {
		e, ok := d.byID[id]
		if !ok || !now.Before(e.at.Add(window)) {
			break
		}
		if !e.pending {
			d.mu.Unlock()
			return nil, e.msg, true, nil
		}
		if d.settled == nil {
			d.settled = make(chan struct{})
		}
		ch := d.settled
		d.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, queue.Message[T]{}, false, ctx.Err()
		}
		d.mu.Lock()
	}
	defer d.mu.Unlock()
	d.expireLocked(now, window)
	if len(d.byID) >= limit { // every one inside its window: forgetting one would break its promise
		return nil, queue.Message[T]{}, false, fmt.Errorf("%w: %d IDs inside the %v window (see WithDedupLimit)", ErrDedupFull, len(d.byID), window)
	}
	if d.byID == nil {
		d.byID = make(map[string]*dedupEntry[T])
	}
	e = &dedupEntry[T]{id: id, msg: m, at: now, pending: true}
	d.byID[id] = e
	d.order = append(d.order, e)
	return e, queue.Message[T]{}, false, nil
}

// expireLocked forgets the IDs whose window has passed at now.
func (d *dedup[T]) expireLocked(now time.Time, window time.Duration) {
	for d.head < len(d.order) {
		e := d.order[d.head]
		if e != nil && now.Before(e.at.Add(window)) {
			break // and so are all after it: order is by first publish
		}
		if e != nil && d.byID[e.id] == e {
			delete(d.byID, e.id)
		}
		d.order[d.head] = nil
		d.head++
	}
	if d.head > 0 && d.head*2 >= len(d.order) {
		n := copy(d.order, d.order[d.head:])
		clear(d.order[n:])
		d.order, d.head = d.order[:n], 0
	}
}

// confirm ends e's pending state: its message is stored. (On a durable
// broker the group that records the ID confirms it: see store.flush.)
func (d *dedup[T]) confirm(e *dedupEntry[T]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.settleLocked(e)
}

// forget drops e, whose publish failed, if it is still the one recorded
// for its ID, and wakes the publishes waiting for it.
func (d *dedup[T]) forget(e *dedupEntry[T]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byID[e.id] == e {
		delete(d.byID, e.id) // its order slot expires harmlessly
	}
	d.settleLocked(e)
}

func (d *dedup[T]) settleLocked(e *dedupEntry[T]) {
	e.pending = false
	if d.settled != nil {
		close(d.settled)
		d.settled = nil
	}
}

// forgetMessage drops the ID recorded for m's publish, if it still is: a
// publish whose records could not be committed.
func (d *dedup[T]) forgetMessage(id string, m queue.Message[T]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.byID[id]; ok && e.msg.ID == m.ID {
		delete(d.byID, id)
	}
}

// put restores an entry from a durable broker's journal, with its first
// publish's time.
func (d *dedup[T]) put(id string, m queue.Message[T]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byID == nil {
		d.byID = make(map[string]*dedupEntry[T])
	}
	e := &dedupEntry[T]{id: id, msg: m, at: m.PublishedAt}
	d.byID[id] = e
	d.order = append(d.order, e)
}

// liveLocked returns the confirmed entries still remembered at now, oldest
// first.
func (d *dedup[T]) liveLocked(now time.Time, window time.Duration) []*dedupEntry[T] {
	var live []*dedupEntry[T]
	for _, e := range d.order[d.head:] {
		if e != nil && !e.pending && d.byID[e.id] == e && now.Before(e.at.Add(window)) {
			live = append(live, e)
		}
	}
	return live
}
