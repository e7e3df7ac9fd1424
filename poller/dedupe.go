package poller

import (
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
)

// ErrInProgress is returned by Deduper.Do when another call is processing
// the same message right now (a redelivery that overtook a slow first
// attempt). Treat it as a failure: by the next delivery the first call has
// either succeeded, and the duplicate is skipped, or failed, and it runs.
var ErrInProgress = errors.New("poller: message already being processed")

// Deduper turns at-least-once delivery into effectively-once processing:
// it remembers the IDs of the last Capacity messages processed
// successfully and skips a message it has already seen. An ID is recorded
// only after success, so a failed attempt is still retried. It is safe for
// concurrent use. Memory is bounded by Capacity; a duplicate that arrives
// after Capacity newer successes is processed again, so size it to cover
// the redelivery window, or make the effect idempotent in your own store.
type Deduper struct {
	capacity int

	mu      sync.Mutex // guards everything below
	done    map[uuid.UUID]struct{}
	ring    []uuid.UUID // recorded IDs, oldest at next once full; grows up to capacity
	next    int
	running map[uuid.UUID]struct{}
}

// NewDeduper returns a Deduper that remembers the last capacity successes.
// capacity < 1 is an error matching queue.ErrInvalidArgument.
func NewDeduper(capacity int) (*Deduper, error) {
	if capacity < 1 {
		return nil, backend.Invalid("NewDeduper: capacity = %d, must be >= 1", capacity)
	}
	return &Deduper{
		capacity: capacity,
		done:     make(map[uuid.UUID]struct{}, min(capacity, 1024)),
		running:  make(map[uuid.UUID]struct{}),
	}, nil
}

// Do runs fn for message id unless it already succeeded: it returns
// (false, nil) for a duplicate, (false, ErrInProgress) if another call is
// running it now, and otherwise (true, fn's error), recording id only when
// fn returns nil. fn runs without the Deduper's lock held. A panic in fn
// leaves id unrecorded and propagates.
func (d *Deduper) Do(id uuid.UUID, fn func() error) (ran bool, err error) {
	if fn == nil {
		return false, backend.Invalid("Deduper.Do: nil func")
	}
	d.mu.Lock()
	if _, ok := d.done[id]; ok {
		d.mu.Unlock()
		return false, nil
	}
	if _, ok := d.running[id]; ok {
		d.mu.Unlock()
		return false, fmt.Errorf("message %v: %w", id, ErrInProgress)
	}
	d.running[id] = struct{}{}
	d.mu.Unlock()

	ok := false
	defer func() {
		d.mu.Lock()
		delete(d.running, id)
		if ok {
			d.recordLocked(id)
		}
		d.mu.Unlock()
	}()
	err = fn()
	ok = err == nil
	return true, err
}

// seen reports whether id has been recorded as processed. It is not
// exported: a check before Do would race with another goroutine's Do, and
// Do alone answers the question atomically.
func (d *Deduper) seen(id uuid.UUID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.done[id]
	return ok
}

// Len returns how many IDs are remembered.
func (d *Deduper) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.done)
}

func (d *Deduper) recordLocked(id uuid.UUID) {
	if len(d.ring) < d.capacity {
		d.ring = append(d.ring, id)
	} else {
		delete(d.done, d.ring[d.next])
		d.ring[d.next] = id
		d.next = (d.next + 1) % len(d.ring)
	}
	d.done[id] = struct{}{}
}
