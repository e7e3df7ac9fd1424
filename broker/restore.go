package broker

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// restore builds the broker from what the journal replayed: topics, then
// subscriptions, then the dead-letter store in its order, then the
// messages (where one in flight on its last attempt is dead-lettered).
func (b *Broker[T]) restore(rs *replay) error { return b.restoreWith(rs, b.durable(), false) }

// restoreWith is restore with the store whose codec decodes the messages
// and whose info it fills in. A copy (OpenCopy) has a store without a
// journal and commits nothing; one of a directory its owner holds keeps
// the messages in flight as in flight (holdLeases).
func (b *Broker[T]) restoreWith(rs *replay, st *store[T], holdLeases bool) error {
	r := &restorer[T]{b: b, st: st, rs: rs, holdLeases: holdLeases}
	r.own = make([]unpacker, decoders())
	copies := copiesDecoded(st.codec)
	for i := range r.own {
		r.own[i].copies = copies
	}
	// The decoded messages are kept, to find by ID, when another
	// subscription may share one (fan-out) or a dedup ID names one (a
	// restored ID holds its message, weakly, while a subscription holds it
	// again).
	if len(rs.subs) > 1 || len(rs.dedup) > 0 {
		n := 0
		for _, s := range rs.subs {
			n += s.msgs.live
		}
		r.decoded = make([]decoded[T], 0, n)
	}
	r.topics()
	dedups, wait := r.dedupIDs()
	defer wait() // however this returns (a codec may panic): it reads the journal's bytes
	for _, id := range slices.Sorted(maps.Keys(rs.subs)) {
		if err := r.sub(rs.subs[id]); err != nil {
			return err
		}
	}
	wait()
	for _, d := range dedups { // each ID gets its message, where a restored queue holds it
		d.name(r.named)
	}
	return r.finish()
}

// copiesDecoded reports whether codec is one of package queue's, which
// keep nothing of the bytes they decode. (An interface comparison panics
// only between values of one type that is not comparable: theirs are.)
func copiesDecoded[T any](codec queue.Codec[T]) bool {
	c := any(codec)
	return c == any(queue.BytesCodec()) || c == any(queue.StringCodec()) || c == any(queue.JSONCodec[T]())
}

// unpacker is what one goroutine of a restore decodes messages with: the
// last topic it made a string of, which the next message of that topic
// shares (a journal's messages are of a few topics), and the block it
// copies payloads to for a codec that may keep the bytes it decodes (see
// own).
type unpacker struct {
	topic  string
	copies bool // the codec keeps nothing of what it decodes (copiesDecoded)
	block  []byte
}

// topicOf returns b as a string, the last one's if it is the same.
func (o *unpacker) topicOf(b []byte) string {
	if string(b) != o.topic {
		o.topic = string(b)
	}
	return o.topic
}

// own returns what the codec may keep of payload p: the bytes replay has
// are views of the journal's segment, which Open lets go of once the
// broker is restored. A codec of package queue keeps nothing of them and
// gets the view; any other gets a copy, from a shared block so that a
// million payloads are not a million allocations.
func (o *unpacker) own(p []byte) []byte {
	if o.copies {
		return p
	}
	if len(p) > cap(o.block)-len(o.block) {
		o.block = make([]byte, 0, max(len(p), 64<<10))
	}
	o.block = append(o.block, p...)
	return o.block[len(o.block)-len(p) : len(o.block) : len(o.block)]
}

// restorer is the state of a restore in progress.
type restorer[T any] struct {
	b          *Broker[T]
	st         *store[T]
	rs         *replay
	holdLeases bool                // a copy of a directory its owner holds: leases stay in flight (core.Entry.StillLeased)
	decoded    []decoded[T]        // the first decoded of each ID, if kept (nil: not)
	byID       idRuns              // finds them
	letters    []letter[T]         // recovered dead letters, to order by seq
	fresh      []restored[T]       // queues with dead letters the restore itself made
	live       int64               // about what a snapshot would take
	own        []unpacker          // one for each decoding goroutine
	ms         []*queue.Message[T] // a chunk's messages (decodeAll)
	todo       []todo              // a chunk's messages to decode (decodeAll)
}

// todo is a message of a chunk to decode: its index, and whether it is the
// first of its ID, to keep (see decoded).
type todo struct {
	i    int
	keep bool
}

// decoded is a message decoded from env: the subscriptions whose envelope
// of its ID is the same bytes share it (one whose payload an operator
// edited has its own).
type decoded[T any] struct {
	m   *queue.Message[T]
	env []byte
}

type restored[T any] struct {
	s     *Subscription[T]
	fresh []core.Letter[T] // dead-lettered by the restore itself
}

// decodeAll returns the messages rms hold, in their order: one decoded
// already for another subscription is shared if its envelope is the same
// bytes, and the rest are decoded, on as many goroutines as there are
// processors for a chunk of thousands. The slice is reused by the next
// call. An envelope the codec refuses is a CorruptError, the first in
// rms's order whatever the goroutines.
func (r *restorer[T]) decodeAll(rms []*rmsg) ([]*queue.Message[T], error) {
	ms := slices.Grow(r.ms[:0], len(rms))[:len(rms)]
	clear(ms)
	r.ms = ms
	todos, kept := r.todo[:0], r.decoded != nil
	for i, rm := range rms {
		first := kept
		if kept {
			if j, ok := r.byID.find(uuid.UUID(rm.env[:16]), r.holds); ok {
				if bytes.Equal(r.decoded[j].env, rm.env) {
					ms[i] = r.decoded[j].m
					continue
				}
				first = false // an edited payload: its own message
			}
		}
		todos = append(todos, todo{i, first})
	}
	r.todo = todos
	workers := min(len(r.own), len(todos)/minDecodes)
	if workers <= 1 {
		if err := r.decodeSome(rms, todos, &r.own[0]); err != nil {
			return nil, err
		}
	} else {
		// A codec that panics panics on the caller's goroutine, as it
		// would in a decode in turn, once every goroutine has stopped
		// reading the journal's bytes.
		errs, panics := make([]error, workers), make([]any, workers)
		part := func(w int) {
			defer func() { panics[w] = recover() }()
			errs[w] = r.decodeSome(rms, todos[w*len(todos)/workers:(w+1)*len(todos)/workers], &r.own[w])
		}
		var wg sync.WaitGroup
		for w := 1; w < workers; w++ {
			wg.Go(func() { part(w) })
		}
		part(0)
		wg.Wait()
		for w, err := range errs {
			if panics[w] != nil {
				panic(panics[w])
			}
			if err != nil {
				return nil, err
			}
		}
	}
	for _, t := range todos {
		if t.keep {
			r.byID.note(ms[t.i].ID, len(r.decoded), r.holds)
			r.decoded = append(r.decoded, decoded[T]{ms[t.i], rms[t.i].env})
		}
	}
	return ms, nil
}

// minDecodes is the fewest messages a decoding goroutine is started for:
// a few hundred microseconds of work, against a few of starting it.
const minDecodes = 512

// decoders is how many goroutines decode a restore's messages.
func decoders() int { return max(runtime.GOMAXPROCS(0), 1) }

// decodeSome decodes the messages todos names into r.ms, stopping at the
// first the codec refuses; o is the goroutine's own payload block.
func (r *restorer[T]) decodeSome(rms []*rmsg, todos []todo, o *unpacker) error {
	for _, t := range todos {
		env := rms[t.i].env
		m, err := unenvelope(env, r.st.codec, o)
		if err != nil {
			return &CorruptError{Path: r.st.path(), Offset: -1,
				Reason: fmt.Sprintf("the codec cannot decode message %v", uuid.UUID(env[:16])), Err: err}
		}
		r.ms[t.i] = m
	}
	return nil
}

// holds reports whether r.decoded[i] is the message with that ID.
func (r *restorer[T]) holds(i int, id uuid.UUID) bool { return r.decoded[i].m.ID == id }

// named returns the message a dedup ID names, as the restore decoded it for
// a queue, or nil if no queue holds it.
func (r *restorer[T]) named(id uuid.UUID) *queue.Message[T] {
	if i, ok := r.byID.find(id, r.holds); ok {
		return r.decoded[i].m
	}
	return nil
}

func (r *restorer[T]) topics() {
	b := r.b
	b.mu.Lock()
	for name := range r.rs.topics {
		t := b.newTopicEntry(name)
		b.topics[name] = t
		b.rebuildLocked(t)
	}
	b.mu.Unlock()
	r.st.info.Topics = len(r.rs.topics)
}

// dedupIDs starts restoring the dedup IDs still inside their window, on a
// goroutine of its own while the queues are restored (neither touches the
// other's state, and a million IDs take about as long as a million
// messages); wait waits for it. It returns the dedups it restores: their
// messages are not known until the queues are restored, and then each
// dedup's name gives them (a duplicate published while a subscription
// holds one is answered with it).
func (r *restorer[T]) dedupIDs() (dedups []*dedup[T], wait func()) {
	b := r.b
	now, window := b.now.Now(), b.dedupWindow
	var ds []*rdedups
	for topic, ids := range r.rs.dedup {
		if t := b.topics[topic]; t != nil {
			dedups, ds = append(dedups, &t.dedup), append(ds, ids)
		}
	}
	var wg sync.WaitGroup
	if len(dedups) > 0 {
		wg.Go(func() {
			for i, d := range dedups {
				d.restore(ds[i], now, window)
			}
		})
	}
	return dedups, wg.Wait
}

// restoreChunk is how many messages a restore decodes and hands to a
// queue at a time: the entries in between are a few hundred KiB, not a copy
// of the whole journal's.
const restoreChunk = 4096

// sub restores one subscription: its queue, or, if it is gone, its dead
// letters alone.
func (r *restorer[T]) sub(rsub *rsub) error {
	st, b := r.st, r.b
	st.nextSub = max(st.nextSub, rsub.id+1)
	var s *Subscription[T]
	if !rsub.gone {
		var err error
		b.mu.Lock()
		s, err = b.recoverLocked(rsub)
		b.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if s != nil {
		st.info.Subscriptions++
		if rsub.paused {
			s.q.RestorePaused()
		}
		s.q.EmptyBuckets() // a restart must not refill a rate limit
	}
	rms := rsub.msgs.inPlaceOrder()
	es := make([]core.Entry[T], 0, min(len(rms), restoreChunk))
	var seqs []uint64
	for len(rms) > 0 {
		n := min(len(rms), restoreChunk)
		var err error
		es, seqs, err = r.entries(es[:0], seqs[:0], rms[:n])
		if err != nil {
			return err
		}
		rms = rms[n:]
		if err := r.restore(rsub, s, es, seqs); err != nil {
			return err
		}
	}
	return nil
}

// restore hands a chunk of a subscription's entries, in place order, to
// its queue, and keeps the dead letters for finish; seqs is the
// dead-letter order of the chunk's dead entries. A subscription that is
// gone (s nil) keeps its dead letters alone.
func (r *restorer[T]) restore(rsub *rsub, s *Subscription[T], es []core.Entry[T], seqs []uint64) error {
	if s == nil {
		for _, en := range es {
			if en.Dead {
				r.letters = append(r.letters, letter[T]{seqs[0], rsub.id, rsub.topic, core.DeadLetterOf(rsub.name, en)})
				seqs = seqs[1:]
			}
		}
		return nil
	}
	r.st.info.Messages += len(es) - len(seqs)
	dls, err := s.q.Restore(es) // the dead entries in order, then those it dead-lettered
	if err != nil {
		return err
	}
	for i, seq := range seqs {
		r.letters = append(r.letters, letter[T]{seq, rsub.id, rsub.topic, dls[i]})
	}
	if fresh := dls[len(seqs):]; len(fresh) > 0 {
		r.fresh = append(r.fresh, restored[T]{s, fresh})
	}
	return nil
}

// entries appends to es the messages rms as queue entries, and to seqs
// the dead-letter order of the dead ones.
func (r *restorer[T]) entries(es []core.Entry[T], seqs []uint64, rms []*rmsg) ([]core.Entry[T], []uint64, error) {
	ms, err := r.decodeAll(rms)
	if err != nil {
		return nil, nil, err
	}
	for i, rm := range rms {
		lastErr := rm.lastErr()
		ttl, expiresAt := rm.ttl()
		r.live += int64(len(rm.env) + len(lastErr) + putOverhead)
		e := core.Entry[T]{
			Message: ms[i], Place: rm.place, Attempts: rm.attempts, InFlight: rm.inFlight, StillLeased: r.holdLeases,
			VisibleAt: unstamp(rm.visibleAt), TTL: ttl, ExpiresAt: unstamp(expiresAt), LastError: lastErr,
			Dead: rm.dead,
		}
		if x := rm.more; x != nil {
			e.Reason, e.DeadAt, e.History = x.reason, unstamp(x.deadAt), x.hist
		}
		es = append(es, e)
		if rm.dead {
			seqs = append(seqs, rm.more.deadSeq)
		}
	}
	return es, seqs, nil
}

// finish fills the dead-letter store in its order, then routes the dead
// letters the restore made and commits.
func (r *restorer[T]) finish() error {
	b, st := r.b, r.st
	slices.SortFunc(r.letters, func(x, y letter[T]) int { return cmp.Compare(x.seq, y.seq) })
	for _, l := range r.letters {
		b.dead.add(l.topic, l.sub, l.dl)
	}
	st.info.DeadLetters = len(r.letters)
	if st.j != nil {
		st.j.Rebase(r.live)
	}
	// Only now that every queue is back is a dead letter made by the
	// restore (one leased on its last attempt at the crash) routed, perhaps
	// to another queue, and does anything commit, and so perhaps compact.
	for _, f := range r.fresh {
		for _, dl := range f.fresh {
			b.deadLetter(f.s, dl)
		}
	}
	return b.commit()
}

// recoverLocked makes a subscription the journal has, with its recorded
// options; nil if its topic is gone.
func (b *Broker[T]) recoverLocked(rsub *rsub) (*Subscription[T], error) {
	pattern := isPattern(rsub.topic)
	t := b.topics[rsub.topic]
	if !pattern && t == nil {
		return nil, nil
	}
	qc := rsub.spec.config()
	qc.Name, qc.Clock = rsub.name, b.now
	s := &Subscription[T]{topic: rsub.topic, name: rsub.name, jid: rsub.id, spec: rsub.spec, recovered: true}
	if err := b.attachLocked(s, t, qc, nil, rsub.spec.deadLetters); err != nil {
		return nil, fmt.Errorf("subscription %q on %q: %w", rsub.name, rsub.topic, err)
	}
	return s, nil
}
