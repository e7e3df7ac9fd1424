package broker

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// rmsg is a message's state as replay builds it. A journal of millions of
// puts makes millions of these, most of them acked later in it: it is kept
// to 64 bytes (its times as stamps, what few messages have apart), the
// size of a cache line, since what a replay writes first is fresh memory.
type rmsg struct {
	env       []byte // nil: a slot whose message was removed
	place     uint64
	attempts  int
	visibleAt int64  // stamp
	more      *rmore // nil: none of what rmore holds
	inFlight  bool
	dead      bool
	expired   bool // its last error is expiredText (a lease that expired)
}

// rmore is what few messages have: a dead letter's reason, time and order,
// a history of attempts, a last error other than an expiry's, a TTL.
type rmore struct {
	reason    queue.Reason
	deadAt    int64 // stamp
	deadSeq   uint64
	hist      []queue.Attempt
	lastErr   string
	ttl       time.Duration
	expiresAt int64 // stamp
}

// extra returns m's rmore, made if it has none.
func (m *rmsg) extra() *rmore {
	if m.more == nil {
		m.more = &rmore{}
	}
	return m.more
}

// lastErr returns the message's last error.
func (m *rmsg) lastErr() string {
	switch {
	case m.expired:
		return expiredText
	case m.more != nil:
		return m.more.lastErr
	}
	return ""
}

// setLastErr makes s the message's last error. s may be a view of the
// journal (dec.view): it is copied if kept.
func (m *rmsg) setLastErr(s string) {
	m.expired = s == expiredText
	if m.expired || s == "" {
		if m.more != nil {
			m.more.lastErr = ""
		}
		return
	}
	m.extra().lastErr = strings.Clone(s)
}

// setTTL sets the message's TTL and when it expires, if it has one.
func (m *rmsg) setTTL(ttl time.Duration, expiresAt int64) {
	if ttl != 0 || expiresAt != 0 {
		x := m.extra()
		x.ttl, x.expiresAt = ttl, expiresAt
	}
}

// ttl returns the message's TTL and when it expires (zeros: none).
func (m *rmsg) ttl() (time.Duration, int64) {
	if m.more == nil {
		return 0, 0
	}
	return m.more.ttl, m.more.expiresAt
}

// rmsgs is a subscription's messages during replay: their states in put
// order, in pages, so that a million puts never copy the ones before them,
// found by their IDs through runs. Put order is place order but for rare
// puts (which the restore sorts), so a restore of a million messages need
// not sort them.
type rmsgs struct {
	pages []*[rpage]rmsg
	spare []*[rpage]rmsg // empty pages compact left, for the puts after
	n     int            // slots used, holes included
	live  int            // messages held
	holes int            // removed slots, given back by compact
	ids   idRuns
	last  uint64 // the place of the latest put
	mixed bool   // a put's place came below its predecessor's
}

const rpage = 1024 // slots in a page: 64 KiB of them

func (t *rmsgs) slot(i int) *rmsg { return &t.pages[i/rpage][i%rpage] }

// holds reports whether slot i holds the message with that ID.
func (t *rmsgs) holds(i int, id uuid.UUID) bool {
	env := t.slot(i).env
	return env != nil && uuid.UUID(env[:16]) == id
}

// get returns the message with that ID, or nil.
func (t *rmsgs) get(id uuid.UUID) *rmsg {
	if i, ok := t.ids.find(id, t.holds); ok {
		return t.slot(i)
	}
	return nil
}

// add holds m under id, in place of any message with that ID.
func (t *rmsgs) add(id uuid.UUID, m rmsg) {
	if i, ok := t.ids.find(id, t.holds); ok {
		t.free(i, id)
	}
	if t.n > 0 && m.place < t.last {
		t.mixed = true
	}
	t.last = m.place
	if t.n == len(t.pages)*rpage {
		if k := len(t.spare); k > 0 {
			t.pages = append(t.pages, t.spare[k-1])
			t.spare = t.spare[:k-1]
		} else {
			t.pages = append(t.pages, new([rpage]rmsg))
		}
	}
	*t.slot(t.n) = m
	t.ids.note(id, t.n, t.holds)
	t.n++
	t.live++
}

// remove forgets the message with that ID if it is there and is a dead
// letter or not as dead says.
func (t *rmsgs) remove(id uuid.UUID, dead bool) {
	if i, ok := t.ids.find(id, t.holds); ok && t.slot(i).dead == dead {
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
	t.ids.forget(id)
	t.holes++
	t.live--
}

// compact closes the holes once they are more than half the messages
// held (and more than a page): the slots stay within about one and a half
// times the messages, at a cost spread over the removes that made the
// holes (two moves each). It moves the messages down in place, finds them
// anew, and keeps the pages left empty (zeroed: a removed or moved slot is
// cleared) for the puts after, which would otherwise fault in fresh ones.
func (t *rmsgs) compact() {
	if t.holes < rpage || 2*t.holes <= t.live {
		return
	}
	t.ids.reset()
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
		t.ids.note(uuid.UUID(t.slot(n).env[:16]), n, t.holds)
		n++
	}
	keep := (n + rpage - 1) / rpage
	t.spare = append(t.spare, t.pages[keep:]...)
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

// rdedup is a dedup ID as replay found it.
type rdedup struct {
	id  string // a view of the journal's bytes (dec.view): the restore copies it
	msg uuid.UUID
	at  int64 // stamp
}

// rdedups is a topic's dedup IDs, oldest first, in pages: a journal may
// hold millions, which one slice would copy each time it grew.
type rdedups struct{ pages [][]rdedup }

func (ds *rdedups) add(d rdedup) {
	if n := len(ds.pages); n == 0 || len(ds.pages[n-1]) == cap(ds.pages[n-1]) {
		ds.pages = append(ds.pages, make([]rdedup, 0, rpage))
	}
	last := &ds.pages[len(ds.pages)-1]
	*last = append(*last, d)
}
