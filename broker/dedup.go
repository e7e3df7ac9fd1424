package broker

import (
	"sync"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// dedup remembers one topic's publish dedup IDs for a fixed window from
// their first publish, at most limit of them.
type dedup[T any] struct {
	mu    sync.Mutex // guards everything below
	byID  map[string]*dedupEntry[T]
	order []*dedupEntry[T] // order[head:], by first publish
	head  int
}

type dedupEntry[T any] struct {
	id  string
	msg queue.Message[T]
	at  time.Time
}

// reserve returns the message already published with id inside the window,
// or records m under id and returns false.
func (d *dedup[T]) reserve(id string, m queue.Message[T], window time.Duration, limit int) (queue.Message[T], bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := m.PublishedAt
	for d.head < len(d.order) {
		e := d.order[d.head]
		if now.Before(e.at.Add(window)) && len(d.order)-d.head < limit {
			break
		}
		if d.byID[e.id] == e {
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
	if e, ok := d.byID[id]; ok && now.Before(e.at.Add(window)) {
		return e.msg, true
	}
	if d.byID == nil {
		d.byID = make(map[string]*dedupEntry[T])
	}
	e := &dedupEntry[T]{id: id, msg: m, at: now}
	d.byID[id] = e
	d.order = append(d.order, e)
	return queue.Message[T]{}, false
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

// liveLocked returns the entries still remembered at now, oldest first.
func (d *dedup[T]) liveLocked(now time.Time, window time.Duration) []*dedupEntry[T] {
	var live []*dedupEntry[T]
	for _, e := range d.order[d.head:] {
		if e != nil && d.byID[e.id] == e && now.Before(e.at.Add(window)) {
			live = append(live, e)
		}
	}
	return live
}

// forget drops a reservation whose publish failed, if it is still the one
// recorded for id.
func (d *dedup[T]) forget(id string, m queue.Message[T]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.byID[id]; ok && e.msg.ID == m.ID {
		delete(d.byID, id) // its order slot expires harmlessly
	}
}
