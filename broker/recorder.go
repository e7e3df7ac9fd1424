package broker

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// record appends one broker-level record built by fill.
func (st *store[T]) record(fill func(e *enc)) {
	st.mu.Lock()
	st.e.b = st.e.b[:0]
	fill(&st.e)
	st.j.Append(st.e.b)
	st.mu.Unlock()
}

// forget records that a dead letter left the store.
func (st *store[T]) forget(sub uint32, id uuid.UUID) {
	st.mu.Lock()
	delete(st.limbo, dlKey{sub, id})
	st.j.Append(st.e.start(recForget).key(sub, id).b)
	st.mu.Unlock()
}

// discard records that dead letters left the store, all of them in one
// record (in records of maxDiscardKeys), so that after a crash all are gone
// or none.
func (st *store[T]) discard(keys []dlKey) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), maxDiscardKeys)]
		keys = keys[len(chunk):]
		e := st.e.start(recDiscard)
		e.uint(uint64(len(chunk)))
		for _, k := range chunk {
			delete(st.limbo, k)
			e.key(k.sub, k.id)
		}
		st.j.Append(e.b)
	}
}

// maxDiscardKeys bounds the dead letters of one discard record (at most 21
// bytes each: 21 MiB).
const maxDiscardKeys = 1 << 20

// landed takes a dead letter out of limbo: it is in the store now.
func (st *store[T]) landed(sub uint32, id uuid.UUID) {
	st.mu.Lock()
	delete(st.limbo, dlKey{sub, id})
	st.mu.Unlock()
}

// subRec is a subscription's Recorder: it logs the queue's changes
// under the queue's lock, with a buffer of its own.
type subRec[T any] struct {
	b     *Broker[T]
	st    *store[T]
	id    uint32
	topic string
	e     enc // under the queue's lock
	// purges counts the queue's purges, each under the store's lock (see
	// group): a put offered before a purge is left out of its group.
	purges atomic.Uint64
}

func appendPut[T any](e *enc, sub uint32, en core.Entry[T], env []byte) {
	e.start(recPut).sub(sub)
	e.uint(en.Place)
	e.uint(uint64(en.Attempts))
	var flags byte
	if en.InFlight {
		flags |= putInFlight
	}
	if en.Dead {
		flags |= putDead
	}
	e.byte(flags)
	e.time(en.VisibleAt)
	e.dur(en.TTL)
	e.time(en.ExpiresAt)
	e.str(en.LastError)
	e.byte(byte(en.Reason))
	e.time(en.DeadAt)
	e.b = append(e.b, env...)
}

func (r *subRec[T]) Offered(en core.Entry[T], note any) {
	var env []byte
	if eb, ok := note.(*envBuf[T]); ok {
		env = eb.b
		if eb.grp != nil { // appended with the rest of its operation
			appendPut(&r.e, r.id, en, env)
			eb.grp.addPut(r, r.e.b, env, r.st.j.Segment())
			return
		}
	} else { // a redrive: encode it again
		var err error
		if env, err = envelope(nil, en.Message, r.st.codec); err != nil {
			r.st.j.Fail(fmt.Errorf("encode message %v: %w", en.Message.ID, err))
			return
		}
	}
	appendPut(&r.e, r.id, en, env)
	r.st.j.Append(r.e.b)
}

func (r *subRec[T]) Delivered(ds []queue.Delivery[T]) {
	for len(ds) > 0 { // a record of at most maxDeliverIDs, so any Poll fits the journal's limit
		chunk := ds[:min(len(ds), maxDeliverIDs)]
		ds = ds[len(chunk):]
		e := r.e.start(recDeliver).sub(r.id)
		e.uint(uint64(len(chunk)))
		for i := range chunk {
			e.id(chunk[i].ID)
		}
		r.st.j.Append(e.b)
	}
}

// maxDeliverIDs bounds the message IDs in one deliver record (16 bytes
// each: 1 MiB).
const maxDeliverIDs = 1 << 16

func (r *subRec[T]) Retried(m *queue.Message[T], visibleAt time.Time, lastErr string) {
	e := r.e.start(recRetry).key(r.id, m.ID)
	e.time(visibleAt)
	e.str(lastErr)
	r.st.j.Append(e.b)
}

func (r *subRec[T]) Released(m *queue.Message[T]) {
	r.st.j.Append(r.e.start(recRelease).key(r.id, m.ID).b)
}

func (r *subRec[T]) Removed(m *queue.Message[T], note any) {
	if g, ok := note.(*group[T]); ok { // a Forward's: appended with its publish
		g.addRemove(r, m.ID, r.st.j.Segment())
		return
	}
	r.st.j.Append(r.e.start(recRemove).key(r.id, m.ID).b)
}

func (r *subRec[T]) DeadLettered(dl core.Letter[T]) {
	e := r.e.start(recDead).key(r.id, dl.Message.ID)
	e.byte(byte(dl.Reason))
	e.uint(uint64(dl.Attempts))
	e.str(dl.LastError)
	e.time(dl.At)
	r.st.mu.Lock()
	r.st.nlimbo++
	r.st.limbo[dlKey{r.id, dl.Message.ID}] = limboLetter[T]{seq: r.st.nlimbo, sub: r.id, topic: r.topic, dl: dl}
	r.st.j.Append(e.b)
	if len(dl.History) > 0 {
		e = r.e.start(recHistory).key(r.id, dl.Message.ID)
		e.history(dl.History)
		r.st.j.Append(e.b)
	}
	r.st.mu.Unlock()
}

func (r *subRec[T]) Purged() {
	r.st.mu.Lock()
	r.purges.Add(1)
	r.st.j.Append(r.e.start(recPurge).sub(r.id).b)
	r.st.mu.Unlock()
}

func (r *subRec[T]) Paused(paused bool) {
	r.st.mu.Lock()
	e := r.e.start(recPause).sub(r.id)
	e.byte(b2u(paused))
	r.st.j.Append(e.b)
	r.st.mu.Unlock()
}

func (r *subRec[T]) Commit() error { return r.b.commit() }

func (e *enc) strs(ss ...string) *enc {
	for _, s := range ss {
		e.str(s)
	}
	return e
}

func (e *enc) specs(s subSpec) *enc { e.spec(s); return e }

// The store's side of the durability seam (see durability.go).

func (st *store[T]) enter() { st.active.Add(1) }
func (st *store[T]) leave() { st.active.Done() }

func (st *store[T]) createdTopic(name string) {
	st.record(func(e *enc) { e.start(recTopic).str(name) })
}

func (st *store[T]) deletedTopic(name string) {
	st.record(func(e *enc) { e.start(recDelTopic).str(name) })
}

func (st *store[T]) newSubID() uint32 {
	id := st.nextSub
	st.nextSub++
	return id
}

func (st *store[T]) subscribed(s *Subscription[T]) {
	st.record(func(e *enc) { e.start(recSub).sub(s.jid).strs(s.topic, s.name).spec(s.spec) })
}

func (st *store[T]) unsubscribed(s *Subscription[T]) {
	st.record(func(e *enc) { e.start(recUnsub).sub(s.jid) })
}

func (st *store[T]) newQueue(s *Subscription[T], qc queue.Config, onDead func(core.Letter[T])) (*core.Queue[T], error) {
	return core.NewRecorded(qc, onDead, core.Recorder[T](&subRec[T]{b: st.b, st: st, id: s.jid, topic: s.topic}))
}

// prepare encodes m's envelope once: every subscription's offer logs it,
// and the publish commits once.
func (st *store[T]) prepare(m *queue.Message[T]) (*envBuf[T], error) { return st.encode(m) }

func (st *store[T]) release(env *envBuf[T]) { st.recycle(env) }

func (st *store[T]) close() error {
	st.active.Wait() // the calls under way append their last records
	return st.j.Close()
}
