package core

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// The subscription's rate limits (queue.Config's RateLimit and
// KeyRateLimit) are token buckets on the queue's clock, each kept as the
// time it is full again (see queue.Rate). RateLimit's bucket bounds how
// many a Poll leases (leaseLocked) and, with visible messages and no
// token, sets the Poll's wake-up (nextEventLocked). A key's bucket is
// read per message: a message whose key has no token goes into the
// limited heap until the token is due, and counts as visible there (Stats,
// Peek); the sweep brings it back to the ready lanes in its place. A key whose bucket is full again is forgotten, so
// the buckets kept are those of keys served within about the last two periods.

// takeKeyTokenLocked takes a token of e's key's bucket and reports true,
// or, with none to take, puts e (popped from the ready lanes) in the
// limited heap until its key's next token is due and reports false.
func (q *Queue[T]) takeKeyTokenLocked(now time.Time, e *entry[T]) bool {
	r := q.cfg.KeyRateLimit
	key := e.msg.Key
	full := q.keyFullOf(key)
	if r.Tokens(full, now) > 0 {
		q.setKeyFullLocked(now, r.Per, key, r.Take(full, now, 1))
		return true
	}
	e.at = q.tickOf(r.NextToken(full, now))
	e.state = stateLimited
	q.limited.push(e)
	q.dueAt(e.at)
	return false
}

// keyFullOf returns when key's bucket is full again.
func (b *buckets) keyFullOf(key string) time.Time {
	if full, ok := b.keyFull[key]; ok {
		return full
	}
	return b.keyFloor
}

// setKeyFullLocked keeps when key's bucket, of period per, is full again.
// A new key first forgets the buckets full again at now, whenever the map
// has doubled or a period has passed since that was last done: forgetting
// costs O(1) a key served, and a bucket is kept at most a period after it
// is full again.
func (b *buckets) setKeyFullLocked(now time.Time, per time.Duration, key string, full time.Time) {
	if b.keyFull == nil {
		b.keyFull = make(map[string]time.Time)
	}
	if _, ok := b.keyFull[key]; !ok && (len(b.keyFull) >= 2*b.keyFullKept+64 || !now.Before(b.keyFullAt.Add(per))) {
		b.keyFull = forget(b.keyFull, func(f time.Time) bool { return !now.Before(f) })
		b.keyFullKept, b.keyFullAt = len(b.keyFull), now
	}
	b.keyFull[key] = full
}

// EmptyBuckets empties the rate limits' buckets at now, the
// subscription's and every key's: each is full again a Per from now. A
// durable store calls it on each queue it restores, because a restart, a
// crash included, must not refill them: whatever was delivered before it,
// a bucket holds at least as many tokens as an empty one, so a limit held
// before the restart holds across it. The cost is the first delivery
// after a restart: it waits for a token (Per/N).
func (q *Queue[T]) EmptyBuckets() {
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if r := q.cfg.RateLimit; !r.IsZero() {
		q.rateFull = now.Add(r.Per)
	}
	if r := q.cfg.KeyRateLimit; !r.IsZero() {
		q.keyFloor = now.Add(r.Per)
		clear(q.keyFull)
	}
}

// limitedLocked returns how many visible messages a rate limit keeps from
// being leased at now: those waiting for their key's token, and those
// beyond the subscription's tokens.
func (q *Queue[T]) limitedLocked(now time.Time) int {
	n := q.limited.len()
	if r := q.cfg.RateLimit; !r.IsZero() {
		n += max(0, q.ready.len()-r.Tokens(q.rateFull, now))
	}
	return n
}

// reorderLocked puts the ready lanes in the order FairKeys now asks for:
// by turn, the visible messages taking turns in the order they had, or by
// place.
func (q *Queue[T]) reorderLocked() {
	es := make([]*entry[T], 0, q.ready.len())
	for e := q.ready.pop(); e != nil; e = q.ready.pop() {
		es = append(es, e)
	}
	if !q.cfg.FairKeys {
		slices.SortFunc(es, func(a, b *entry[T]) int { return cmp.Compare(a.place, b.place) })
	}
	q.ready.reset(q.cfg.FairKeys)
	for _, e := range es {
		q.ready.push(e, false)
	}
}

// forget deletes the entries of m whose value is gone and returns m, or,
// when that cut a large m (1,024 entries or more) to a quarter, a copy no
// larger than it needs to be: a map never shrinks its table.
func forget[K comparable, V any](m map[K]V, gone func(V) bool) map[K]V {
	before := len(m)
	maps.DeleteFunc(m, func(_ K, v V) bool { return gone(v) })
	if before < 1024 || len(m) > before/4 {
		return m
	}
	c := make(map[K]V, len(m)) // not maps.Clone, which keeps the table's size
	for k, v := range m {
		c[k] = v
	}
	return c
}
