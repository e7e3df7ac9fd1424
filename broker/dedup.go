package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"

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
//
// A confirmed ID keeps the message's ID and when it was first published,
// and the message itself only weakly (see idTable): a duplicate is answered
// with the original message while a subscription holds it, and with its ID
// and time (and the duplicate's own payload) once it is settled.
type dedup[T any] struct {
	mu      sync.Mutex // guards everything below
	ids     idTable[T] // confirmed IDs, oldest first
	pending map[string]*dedupEntry[T]
	// settled is closed (and dropped) when a pending ID is confirmed or
	// forgotten; nil while no publish waits for one.
	settled chan struct{}

	// The janitor forgets expired IDs when no publish comes to: a timer
	// on the broker's clock, armed while IDs are held.
	clock   clock.Clock
	window  time.Duration
	janitor *clock.Timer
	ref     *janitorRef[T] // what the janitor's timer holds; nil until first armed
	stopped bool           // the topic is gone or the broker closed: no janitor
}

// janitorRef is all a janitor's timer holds of its dedup. A stopped
// runtime timer may stay in the runtime's timer heap until its time would
// have come, a window later, holding its function: through this, stop
// lets go of the topic's IDs at once, not a window after its broker is
// closed and dropped.
type janitorRef[T any] struct{ d atomic.Pointer[dedup[T]] }

// dedupEntry is a pending ID: the publish that reserved it holds it until
// it confirms or forgets it.
type dedupEntry[T any] struct {
	id   string
	msg  uuid.UUID
	at   time.Time
	orig *queue.Message[T] // the stored message
}

// reserve returns the message already published with id inside the window
// (dup: the original, or, once it is settled and collected, *m with the
// original's ID and PublishedAt), or reserves id for m, the message to
// store, pending, and returns the entry to confirm or forget. It waits
// while another publish of id is pending, and returns ctx's error if ctx
// ends first.
func (d *dedup[T]) reserve(ctx context.Context, id string, m *queue.Message[T], window time.Duration, limit int) (e *dedupEntry[T], orig queue.Message[T], dup bool, err error) {
	now := m.PublishedAt
	d.mu.Lock()
	for {
		if p := d.pending[id]; p != nil && now.Before(p.at.Add(window)) {
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
			continue
		}
		if s, ok := d.ids.get(id); ok && now.Before(time.Unix(0, s.at).Add(window)) {
			d.mu.Unlock()
			if p := s.orig.Value(); p != nil {
				return nil, *p, true, nil
			}
			orig = *m // the location of the clock that timed both
			orig.ID, orig.PublishedAt = s.msg, time.Unix(0, s.at).In(m.PublishedAt.Location())
			return nil, orig, true, nil
		}
		break
	}
	defer d.mu.Unlock()
	d.expireLocked(now, window)
	if n := d.ids.len() + len(d.pending); n >= limit { // every one inside its window: forgetting one would break its promise
		return nil, queue.Message[T]{}, false, fmt.Errorf("%w: %d IDs inside the %v window (see WithDedupLimit)", ErrDedupFull, n, window)
	}
	if d.pending == nil {
		d.pending = make(map[string]*dedupEntry[T])
	}
	e = &dedupEntry[T]{id: id, msg: m.ID, at: m.PublishedAt, orig: m}
	d.pending[id] = e
	return e, queue.Message[T]{}, false, nil
}

// expireLocked forgets the IDs whose window has passed at now.
func (d *dedup[T]) expireLocked(now time.Time, window time.Duration) {
	d.ids.expire(func(at int64) bool { return !now.Before(time.Unix(0, at).Add(window)) })
}

// confirm ends e's pending state: its message is stored. (On a durable
// broker the group that records the ID confirms it: see store.flush.)
func (d *dedup[T]) confirm(e *dedupEntry[T]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.confirmLocked(e)
}

func (d *dedup[T]) confirmLocked(e *dedupEntry[T]) {
	if d.pending[e.id] == e {
		delete(d.pending, e.id)
		d.ids.put(e.id, e.msg, e.at.UnixNano(), e.orig)
		d.armLocked()
	}
	d.wakeLocked()
}

// armLocked arms the janitor, if IDs are held and it is not armed: it
// runs a window from now, so an ID is forgotten at most a window after
// its own window passed, publishes or none.
func (d *dedup[T]) armLocked() {
	if d.janitor != nil || d.stopped || d.clock == nil || d.ids.len() == 0 {
		return
	}
	if d.ref == nil {
		d.ref = new(janitorRef[T])
		d.ref.d.Store(d)
	}
	ref := d.ref
	d.janitor = d.clock.AfterFunc(d.window, func() {
		if d := ref.d.Load(); d != nil {
			d.sweep()
		}
	})
}

// sweep is the janitor: it forgets the IDs whose window has passed and
// arms itself again while IDs remain.
func (d *dedup[T]) sweep() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.janitor = nil
	if d.stopped {
		return
	}
	d.expireLocked(d.clock.Now(), d.window)
	d.armLocked()
}

// stop disarms the janitor for good: the topic is gone.
func (d *dedup[T]) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.ref != nil {
		d.ref.d.Store(nil)
	}
	if d.janitor != nil {
		d.janitor.Stop()
		d.janitor = nil
	}
}

// forget drops e, whose publish stored its message nowhere, and wakes the
// publishes waiting for it.
func (d *dedup[T]) forget(e *dedupEntry[T]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[e.id] == e {
		delete(d.pending, e.id)
	}
	d.wakeLocked()
}

func (d *dedup[T]) wakeLocked() {
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
	if s, ok := d.ids.get(id); ok && s.msg == m.ID {
		d.ids.remove(id)
	}
}

// restore remembers the IDs of ds still inside their window at now, in
// their order (a later entry of one ID wins), without their messages (see
// name): a restore's, which has them only later. The table makes room for
// them in one rehash, and no put sweeps weak pointers there are none of.
// The IDs are views of the journal: each page's are copied to one string,
// which they share (IDs are forgotten oldest first, so a page's string
// goes soon after its last ID).
func (d *dedup[T]) restore(ds *rdedups, now time.Time, window time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	live := func(dd *rdedup) bool { return now.Before(unstamp(dd.at).Add(window)) }
	n := 0
	for _, page := range ds.pages {
		for i := range page {
			if live(&page[i]) {
				n++
			}
		}
	}
	d.ids.reserve(n)
	var kept []rdedup // a page's live IDs
	var b strings.Builder
	for _, page := range ds.pages {
		kept = kept[:0]
		size := 0
		for _, dd := range page {
			if live(&dd) {
				kept = append(kept, dd)
				size += len(dd.id)
			}
		}
		b.Reset()
		b.Grow(size)
		for _, dd := range kept {
			b.WriteString(dd.id)
		}
		ids, at := b.String(), 0
		for _, dd := range kept {
			d.ids.add(ids[at:at+len(dd.id)], dd.msg, unstamp(dd.at).UnixNano())
			at += len(dd.id)
		}
	}
	d.armLocked()
}

// name gives each ID the message named returns for the ID of the message
// it names, held weakly (see idSlot), or leaves it without one (nil).
// (Shared among goroutines, it was no faster: each weak pointer's handle
// is made under one of the runtime's locks.)
func (d *dedup[T]) name(named func(uuid.UUID) *queue.Message[T]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids.each(func(_ uint32, s *idSlot[T]) bool {
		if m := named(s.msg); m != nil {
			s.orig = weak.Make(m)
		}
		return true
	})
}

// liveLocked returns the confirmed IDs still remembered at now, oldest
// first.
func (d *dedup[T]) liveLocked(now time.Time, window time.Duration) []idSlot[T] {
	var live []idSlot[T]
	d.ids.each(func(_ uint32, s *idSlot[T]) bool {
		if now.Before(time.Unix(0, s.at).Add(window)) {
			live = append(live, *s)
		}
		return true
	})
	return live
}

// DedupRecord is a dedup ID a topic remembers: the message its first
// publish made, and when (see WithDedupID).
type DedupRecord struct {
	Topic          string
	DedupID        string
	MessageID      uuid.UUID
	FirstPublished time.Time
}

// LookupDedupID returns what each topic remembers of dedupID inside its
// window (WithDedupWindow), by topic: the ID of the message its first
// publish made, which a subscription may still hold (see
// Subscription.Peek's PeekQuery.ID) or may have settled. It costs one
// index lookup per topic. An ID none remembers gives none; so does a
// closed broker.
func (b *Broker[T]) LookupDedupID(dedupID string) []DedupRecord {
	if dedupID == "" {
		return nil
	}
	now := b.clock.Now()
	b.mu.RLock()
	topics := make([]*topicEntry[T], 0, len(b.topics))
	for _, t := range b.topics {
		topics = append(topics, t)
	}
	b.mu.RUnlock()
	var out []DedupRecord
	for _, t := range topics {
		t.dedup.mu.Lock()
		s, ok := t.dedup.ids.get(dedupID)
		t.dedup.mu.Unlock()
		if ok && now.Before(time.Unix(0, s.at).Add(b.dedupWindow)) {
			out = append(out, DedupRecord{Topic: t.name, DedupID: dedupID, MessageID: s.msg, FirstPublished: time.Unix(0, s.at).UTC()})
		}
	}
	slices.SortFunc(out, func(x, y DedupRecord) int { return cmp.Compare(x.Topic, y.Topic) })
	return out
}
