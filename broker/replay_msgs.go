package broker

import (
	"cmp"
	"encoding/binary"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// rmsg is a message's state as replay builds it. A journal of millions of
// puts makes millions of these, most of them acked later in it: it is kept
// small (its times as stamps, what only a dead letter has apart).
type rmsg struct {
	env       []byte // nil: a slot whose message was removed
	place     uint64
	attempts  int
	visibleAt int64 // stamp
	expiresAt int64 // stamp
	ttl       time.Duration
	lastErr   string
	more      *rmore // nil: no reason, dead time, order or history
	inFlight  bool
	dead      bool
}

// rmore is what few messages have: a dead letter's reason, time and order,
// and a history of attempts.
type rmore struct {
	reason  queue.Reason
	deadAt  int64 // stamp
	deadSeq uint64
	hist    []queue.Attempt
}

// extra returns m's rmore, made if it has none.
func (m *rmsg) extra() *rmore {
	if m.more == nil {
		m.more = &rmore{}
	}
	return m.more
}

// rmsgs is a subscription's messages during replay: their states in put
// order, in pages, so that a million puts never copy the ones before them.
//
// A message is found by its ID without a map for most journals: a topic's
// IDs are a prefix and a counter (see idPool), so the puts of one
// subscription come in runs of IDs one apart in consecutive slots, and a
// run finds each of its IDs by subtraction. The IDs outside the runs kept
// (a redriven message's, another topic's in a pattern subscription's) are
// in index. Put order is place order but for rare puts (which the restore
// sorts), so a restore of a million messages need not sort them.
type rmsgs struct {
	pages []*[rpage]rmsg
	n     int // slots used, holes included
	live  int // messages held
	holes int // removed slots, given back by compact
	runs  []rrun
	index map[uuid.UUID]int // the IDs no run holds; nil until one comes
	last  uint64            // the place of the latest put
	mixed bool              // a put's place came below its predecessor's
}

// rrun says that the IDs prefix|from+k, for k below n, were put in the
// slots slot+k (the counters as big-endian numbers, as idPool makes them).
// A slot that no longer holds its run's ID (removed, or compacted away)
// does not count.
type rrun struct {
	prefix, from uint64
	slot, n      int
}

const (
	rpage   = 1024 // slots in a page: about 100 KiB of them
	maxRuns = 16   // runs kept; the shortest goes to the index to make room
)

func idHalves(id uuid.UUID) (prefix, ctr uint64) {
	return binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:])
}

func (t *rmsgs) slot(i int) *rmsg { return &t.pages[i/rpage][i%rpage] }

// holds reports whether slot i holds the message with that ID.
func (t *rmsgs) holds(i int, id uuid.UUID) bool {
	env := t.slot(i).env
	return env != nil && uuid.UUID(env[:16]) == id
}

// find returns the slot of the message with that ID.
func (t *rmsgs) find(id uuid.UUID) (int, bool) {
	p, c := idHalves(id)
	for _, r := range t.runs {
		if k := c - r.from; r.prefix == p && k < uint64(r.n) && t.holds(r.slot+int(k), id) {
			return r.slot + int(k), true
		}
	}
	i, ok := t.index[id]
	return i, ok
}

// get returns the message with that ID, or nil.
func (t *rmsgs) get(id uuid.UUID) *rmsg {
	if i, ok := t.find(id); ok {
		return t.slot(i)
	}
	return nil
}

// add holds m under id, in place of any message with that ID.
func (t *rmsgs) add(id uuid.UUID, m rmsg) {
	if i, ok := t.find(id); ok {
		t.free(i, id)
	}
	if t.n > 0 && m.place < t.last {
		t.mixed = true
	}
	t.last = m.place
	if t.n == len(t.pages)*rpage {
		t.pages = append(t.pages, new([rpage]rmsg))
	}
	*t.slot(t.n) = m
	t.note(id, t.n)
	t.n++
	t.live++
}

// note finds id in slot i from now on: in the latest run if it extends it,
// else in a run of its own.
func (t *rmsgs) note(id uuid.UUID, i int) {
	p, c := idHalves(id)
	if n := len(t.runs); n > 0 {
		if r := &t.runs[n-1]; r.prefix == p && r.from+uint64(r.n) == c && r.slot+r.n == i {
			r.n++
			return
		}
	}
	if len(t.runs) == maxRuns {
		t.spill()
	}
	t.runs = append(t.runs, rrun{prefix: p, from: c, slot: i, n: 1})
}

// spill moves the shortest run's IDs to the index.
func (t *rmsgs) spill() {
	k := 0
	for j, r := range t.runs {
		if r.n < t.runs[k].n {
			k = j
		}
	}
	r := t.runs[k]
	if t.index == nil {
		t.index = map[uuid.UUID]int{}
	}
	for j := range r.n {
		var id uuid.UUID
		binary.BigEndian.PutUint64(id[:8], r.prefix)
		binary.BigEndian.PutUint64(id[8:], r.from+uint64(j))
		if t.holds(r.slot+j, id) {
			t.index[id] = r.slot + j
		}
	}
	t.runs = slices.Delete(t.runs, k, k+1)
}

// remove forgets the message with that ID if it is there.
func (t *rmsgs) remove(id uuid.UUID) {
	if i, ok := t.find(id); ok {
		t.free(i, id)
		t.compact()
	}
}

// removeIf forgets the messages drop reports true of.
func (t *rmsgs) removeIf(drop func(*rmsg) bool) {
	for i := range t.n {
		if m := t.slot(i); m.env != nil && drop(m) {
			t.free(i, uuid.UUID(m.env[:16]))
		}
	}
	t.compact()
}

// free empties slot i, which holds id.
func (t *rmsgs) free(i int, id uuid.UUID) {
	*t.slot(i) = rmsg{}
	delete(t.index, id) // if it is there
	t.holes++
	t.live--
}

// compact closes the holes once they are more than the messages held (and
// more than a page): the slots stay within about twice the messages, at a
// cost spread over the removes that made the holes. It moves the messages
// down in place, finds them anew, and lets go of the pages left empty.
func (t *rmsgs) compact() {
	if t.holes < rpage || t.holes <= t.live {
		return
	}
	t.runs, t.index = t.runs[:0], nil
	n := 0
	for i := range t.n {
		m := t.slot(i)
		if m.env == nil {
			continue
		}
		if n != i {
			*t.slot(n) = *m
			*m = rmsg{}
		}
		t.note(uuid.UUID(t.slot(n).env[:16]), n)
		n++
	}
	keep := (n + rpage - 1) / rpage
	clear(t.pages[keep:])
	t.pages, t.n, t.holes = t.pages[:keep], n, 0
}

// inPlaceOrder returns the messages held, in place order.
func (t *rmsgs) inPlaceOrder() []*rmsg {
	ms := make([]*rmsg, 0, t.live)
	for i := range t.n {
		if m := t.slot(i); m.env != nil {
			ms = append(ms, m)
		}
	}
	if t.mixed {
		slices.SortFunc(ms, func(x, y *rmsg) int { return cmp.Compare(x.place, y.place) })
	}
	return ms
}
