package broker

import (
	"encoding/binary"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/journal"
)

// A group is the records of one operation that changes more than one thing
// on a durable broker (a publish that fans out or carries a dedup ID, a
// batch with dedup IDs or fan-out, a dead letter routed to its topic, a
// Forward: its message's removal with its publish),
// appended as one journal record, so that after a crash the operation is
// there whole or not at all.
//
// Each put of a group is built under its queue's lock, as the offer makes
// the message visible, but the group is appended after the last offer,
// under the store's lock. Two things can come between:
//
//   - a compaction: its snapshot holds the message as the queue held it
//     then, so a put offered before it is left out (it would undo what the
//     snapshot recorded since);
//   - a purge of the queue: it removed the message, so the put is left out.
//
// Both are decided under the store's lock, which a compaction's Rewrite and
// a purge's record take too. Records a consumer makes about the message in
// between (a delivery, an ack, a dead letter) come before the group in the
// journal: replay holds them until the put arrives (see replay.early).
//
// A group is used by one goroutine at a time: the publisher's, whose
// offers add to it in turn.
type group[T any] struct {
	buf     []byte     // the puts' fields and the messages' envelopes, back to back
	msgs    []groupMsg // the messages, in the order of their first part
	puts    []groupPut[T]
	dedups  []groupDedup[T]
	forgets []dlKey
	removes []groupRemove[T]
}

// groupRemove is a message a Forward acked, whose removal is recorded with
// the publish that took its place: left out, like a put, when a compaction
// or a purge of its queue came between (its snapshot, or the purge,
// already has it gone).
type groupRemove[T any] struct {
	key    dlKey
	rec    *subRec[T]
	seg    int
	purges uint64
}

type span struct{ off, n int }

// groupMsg is a message of a group and its envelope in buf.
type groupMsg struct {
	id   uuid.UUID
	env  span
	kept bool // flush: a put of it is in the record, with the envelope
}

// groupPut is a put record up to its envelope, and what decides whether it
// is still wanted when the group is appended.
type groupPut[T any] struct {
	fields span // in buf
	msg    int  // in msgs
	rec    *subRec[T]
	seg    int    // the journal's segment at the offer
	purges uint64 // the queue's purges at the offer
}

// groupDedup is a dedup ID to record and then confirm.
type groupDedup[T any] struct {
	d     *dedup[T]
	e     *dedupEntry[T]
	topic string
}

// maxGroup is the size past which a batch appends its group and starts
// another: a batch is one atomic unit up to here, and each message's
// records are always in one group.
const maxGroup = 16 << 20

// size is about the bytes the group's record will take.
func (g *group[T]) size() int {
	return len(g.buf) + 24*(len(g.puts)+len(g.dedups)+len(g.forgets)+len(g.removes))
}

func (g *group[T]) empty() bool {
	return len(g.puts)+len(g.dedups)+len(g.forgets)+len(g.removes) == 0
}

func (g *group[T]) reset() {
	g.buf = g.buf[:0]
	g.msgs = g.msgs[:0]
	clear(g.puts) // drop the pointers
	g.puts = g.puts[:0]
	clear(g.dedups)
	g.dedups = g.dedups[:0]
	g.forgets = g.forgets[:0]
	clear(g.removes)
	g.removes = g.removes[:0]
}

// msgFor returns the index of the message whose envelope is env, adding it
// (a message's parts are added one after another, so only the last can be
// it).
func (g *group[T]) msgFor(env []byte) int {
	id := uuid.UUID(env[:16])
	if n := len(g.msgs); n > 0 && g.msgs[n-1].id == id {
		return n - 1
	}
	g.msgs = append(g.msgs, groupMsg{id: id, env: span{len(g.buf), len(env)}})
	g.buf = append(g.buf, env...)
	return len(g.msgs) - 1
}

// addPut adds the put r built (under its queue's lock) for the message
// whose envelope is env: body is the whole record, env at its end.
func (g *group[T]) addPut(r *subRec[T], body, env []byte, seg int) {
	m := g.msgFor(env)
	fields := span{len(g.buf), len(body) - len(env)}
	g.buf = append(g.buf, body[:fields.n]...)
	g.puts = append(g.puts, groupPut[T]{fields: fields, msg: m, rec: r, seg: seg, purges: r.purges.Load()})
}

// addDedup adds the pending dedup ID e, of topic.
func (g *group[T]) addDedup(d *dedup[T], e *dedupEntry[T], topic string) {
	g.dedups = append(g.dedups, groupDedup[T]{d, e, topic})
}

func (g *group[T]) addForget(k dlKey) { g.forgets = append(g.forgets, k) }

// addRemove adds the removal of message id from r's queue, acked under its
// lock in segment seg.
func (g *group[T]) addRemove(r *subRec[T], id uuid.UUID, seg int) {
	g.removes = append(g.removes, groupRemove[T]{key: dlKey{r.id, id}, rec: r, seg: seg, purges: r.purges.Load()})
}

// newGroup returns an empty group from the store's pool.
func (st *store[T]) newGroup() *group[T] {
	if g, _ := st.groups.Get().(*group[T]); g != nil {
		return g
	}
	return new(group[T])
}

// flush appends g as one record (or its one part bare), confirms its dedup
// IDs and gives g back to the pool. The dedup IDs' lock is taken before
// the store's, as a compaction takes them, so that a snapshot sees each ID
// either pending (and the group not yet in the journal) or confirmed with
// the group in.
func (st *store[T]) flush(g *group[T]) {
	if g == nil {
		return
	}
	defer func() {
		g.reset()
		if cap(g.buf) <= 1<<20 {
			st.groups.Put(g)
		}
	}()
	if g.empty() {
		return
	}
	var d *dedup[T]
	for _, gd := range g.dedups { // one topic's: a publish or batch has one
		d = gd.d
	}
	if d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
	}
	st.mu.Lock()
	st.appendGroupLocked(g)
	st.mu.Unlock()
	for _, gd := range g.dedups {
		d.confirmLocked(gd.e)
	}
}

// appendGroupLocked appends g's records as they stand now (see group): the
// puts no compaction or purge has overtaken, each message's envelope in
// its first kept put; its dedup IDs; its forgotten dead letters, out of
// limbo.
func (st *store[T]) appendGroupLocked(g *group[T]) {
	seg := st.j.Segment()
	b := append(st.grp[:0], recGroup)
	b = append(b, make([]byte, binary.MaxVarintLen64)...) // the count, written last
	count := 0
	single := 0 // where the last part's body starts: the record, if it is the only one
	part := func(body func([]byte) []byte, n int) {
		b = binary.AppendUvarint(b, uint64(n))
		single = len(b)
		b = body(b)
		count++
	}
	for i := range g.msgs {
		g.msgs[i].kept = false
	}
	for _, p := range g.puts {
		if p.seg != seg || p.rec.purges.Load() != p.purges {
			continue
		}
		m := &g.msgs[p.msg]
		fields := g.buf[p.fields.off : p.fields.off+p.fields.n]
		if m.kept {
			part(func(b []byte) []byte {
				b = append(b, recPutRef)
				b = append(b, fields[1:]...)
				return append(b, m.id[:]...)
			}, len(fields)+16)
			continue
		}
		m.kept = true
		env := g.buf[m.env.off : m.env.off+m.env.n]
		part(func(b []byte) []byte { return append(append(b, fields...), env...) }, len(fields)+len(env))
	}
	for _, gd := range g.dedups {
		e := st.e.start(recDedupID).strs(gd.topic, gd.e.id)
		e.id(gd.e.msg)
		e.time(gd.e.at)
		part(func(b []byte) []byte { return append(b, e.b...) }, len(e.b))
	}
	for _, k := range g.forgets {
		delete(st.limbo, k)
		e := st.e.start(recForget).key(k.sub, k.id)
		part(func(b []byte) []byte { return append(b, e.b...) }, len(e.b))
	}
	for _, r := range g.removes {
		if r.seg != seg || r.rec.purges.Load() != r.purges {
			continue
		}
		e := st.e.start(recRemove).key(r.key.sub, r.key.id)
		part(func(b []byte) []byte { return append(b, e.b...) }, len(e.b))
	}
	switch {
	case count == 0:
	case count == 1:
		st.j.Append(b[single:])
	default:
		n := binary.PutUvarint(b[1:], uint64(count))
		copy(b[1+n:], b[1+binary.MaxVarintLen64:]) // the parts, right after the count
		rec := b[:len(b)-(binary.MaxVarintLen64-n)]
		if len(rec) <= journal.MaxRecord {
			st.j.Append(rec)
			break
		}
		// Over the journal's limit (a fan-out of thousands of a message
		// near the largest): part by part.
		d := dec{b: rec[1+n:]}
		for range count {
			st.j.Append(d.bytes())
		}
	}
	if cap(b) <= 1<<20 {
		st.grp = b[:0]
	}
}
