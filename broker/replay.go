package broker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/internal/vocab"
	"github.com/leasebus/leasebus/queue"
)

// replay is the state the journal's records build, before it becomes a
// broker.
type replay struct {
	records int // replayed so far
	topics  map[string]bool
	subs    map[uint32]*rsub
	deadSeq uint64
	dedup   map[string][]rdedup  // by topic, oldest first
	envs    map[uuid.UUID][]byte // every message's envelope seen in a put, for recDedupRef
}

type rdedup struct {
	id  string
	env []byte
}

type rsub struct {
	id          uint32
	topic, name string
	spec        subSpec
	gone        bool
	msgs        map[uuid.UUID]*rmsg
}

type rmsg struct {
	env       []byte
	place     uint64
	attempts  int
	inFlight  bool
	visibleAt time.Time
	ttl       time.Duration
	expiresAt time.Time
	lastErr   string
	dead      bool
	reason    queue.Reason
	deadAt    time.Time
	deadSeq   uint64 // dead-letter order
}

// putOverhead is about what a put record takes besides its envelope and
// last error: frame, type, subscription, place, attempts, flags and times.
const putOverhead = 8 + 1 + 2 + 3 + 1 + 1 + 4*9 + 2

// expiredText is the LastError the queue gives a message whose lease
// expired: replay must spell it as the queue does.
const expiredText = vocab.LeaseExpired

func newReplay() *replay {
	return &replay{topics: map[string]bool{}, subs: map[uint32]*rsub{}, dedup: map[string][]rdedup{}, envs: map[uuid.UUID][]byte{}}
}

func (rs *replay) msg(sub uint32, id uuid.UUID) *rmsg {
	if s := rs.subs[sub]; s != nil {
		return s.msgs[id]
	}
	return nil
}

// apply replays one record, with one small handler per record type.
// Records may name messages or subscriptions that are gone (a call racing
// an Unsubscribe): they are ignored.
func (rs *replay) apply(body []byte) error {
	d := &dec{b: body}
	typ := d.byte()
	rs.records++
	if (typ == recFormat) != (rs.records == 1) {
		return fmt.Errorf("not a leasebus journal: record %d is of type %d", rs.records, typ)
	}
	var err error
	switch typ {
	case recFormat:
		err = rs.format(d)
	case recTopic:
		err = rs.topic(d)
	case recDelTopic:
		rs.delTopic(d)
	case recDedup:
		rs.dedupRec(d)
	case recDedupRef:
		err = rs.dedupRef(d)
	case recSub:
		err = rs.sub(d)
	case recUnsub:
		rs.unsub(d)
	case recPut:
		rs.put(d)
	case recDeliver:
		rs.deliver(d)
	case recRetry:
		rs.retry(d)
	case recRelease:
		rs.release(d)
	case recRemove:
		rs.remove(d, false)
	case recDead:
		rs.dead(d)
	case recForget:
		rs.remove(d, true)
	case recPurge:
		rs.purge(d)
	case recDiscard:
		rs.discard(d)
	default:
		return fmt.Errorf("unknown record type %d", typ)
	}
	if err == nil && d.err != nil {
		err = fmt.Errorf("record type %d: %w", typ, d.err)
	}
	return err
}

// format checks the journal's first record: leasebus's, of a version this
// code reads.
func (rs *replay) format(d *dec) error {
	magic, version := d.str(), d.uint()
	if d.err == nil && (magic != formatMagic || version < 1 || version > formatVersion) {
		return fmt.Errorf("journal format %q version %d, this is %q version %d", magic, version, formatMagic, formatVersion)
	}
	return nil
}

func (rs *replay) topic(d *dec) error {
	name := d.str()
	if err := validTopic(name); err != nil && d.err == nil {
		return err // a record no broker writes
	}
	rs.topics[name] = true
	return nil
}

func (rs *replay) delTopic(d *dec) {
	name := d.str()
	delete(rs.topics, name)
	delete(rs.dedup, name)
}

func (rs *replay) dedupRec(d *dec) {
	topic, id, env := d.str(), d.str(), d.rest()
	if d.err == nil && len(env) < 16 {
		d.fail()
	}
	if d.err == nil {
		rs.dedup[topic] = append(rs.dedup[topic], rdedup{id, env})
	}
}

func (rs *replay) dedupRef(d *dec) error {
	topic, id, mid := d.str(), d.str(), d.id()
	if d.err != nil {
		return nil
	}
	env := rs.envs[mid]
	if env == nil {
		return fmt.Errorf("dedup record of message %v, which no earlier record holds", mid)
	}
	rs.dedup[topic] = append(rs.dedup[topic], rdedup{id, env})
	return nil
}

func (rs *replay) sub(d *dec) error {
	id, topic, name, spec := d.sub(), d.str(), d.str(), d.spec()
	if err := validSub(topic, name); err != nil && d.err == nil {
		return err
	}
	if s := rs.subs[id]; s != nil {
		if !s.gone {
			s.spec = spec
		}
	} else if d.err == nil {
		rs.subs[id] = &rsub{id: id, topic: topic, name: name, spec: spec, msgs: map[uuid.UUID]*rmsg{}}
	}
	return nil
}

// unsub: the subscription's messages go, its dead letters stay.
func (rs *replay) unsub(d *dec) {
	if s := rs.subs[d.sub()]; s != nil {
		s.gone = true
		maps.DeleteFunc(s.msgs, func(_ uuid.UUID, m *rmsg) bool { return !m.dead })
	}
}

func (rs *replay) put(d *dec) {
	sub := d.sub()
	m := &rmsg{place: d.uint(), attempts: int(d.uint())}
	flags := d.byte()
	m.inFlight, m.dead = flags&putInFlight != 0, flags&putDead != 0
	m.visibleAt, m.ttl, m.expiresAt, m.lastErr = d.time(), d.dur(), d.time(), d.str()
	m.reason, m.deadAt = queue.Reason(d.byte()), d.time()
	m.env = d.rest()
	if d.err == nil && len(m.env) < 16 {
		d.fail()
	}
	if d.err != nil {
		return
	}
	rs.envs[uuid.UUID(m.env[:16])] = m.env // for a recDedupRef after it
	if s := rs.subs[sub]; s != nil && (!s.gone || m.dead) {
		if m.dead {
			rs.deadSeq++
			m.deadSeq = rs.deadSeq
		}
		s.msgs[uuid.UUID(m.env[:16])] = m
	}
}

func (rs *replay) deliver(d *dec) {
	sub, n := d.sub(), d.uint()
	if n > uint64(len(d.b))/16 { // each ID takes 16 bytes
		d.fail()
		return
	}
	for range n {
		if m := rs.msg(sub, d.id()); m != nil && !m.dead {
			if m.inFlight { // delivered again unsettled: its lease expired in between
				m.lastErr = expiredText
			}
			m.attempts++
			m.inFlight = true
			m.visibleAt = time.Time{}
		}
	}
}

func (rs *replay) retry(d *dec) {
	sub, id, at, lastErr := d.sub(), d.id(), d.time(), d.str()
	if m := rs.msg(sub, id); m != nil && !m.dead {
		m.inFlight, m.visibleAt, m.lastErr = false, at, lastErr
	}
}

func (rs *replay) release(d *dec) {
	if m := rs.msg(d.sub(), d.id()); m != nil && !m.dead {
		m.inFlight = false
		m.attempts = max(m.attempts-1, 0)
	}
}

// remove deletes a live message (recRemove: acked or dropped), or a dead
// letter (recForget: it left the store).
func (rs *replay) remove(d *dec, dead bool) {
	sub, id := d.sub(), d.id()
	if s := rs.subs[sub]; s != nil && s.msgs[id] != nil && s.msgs[id].dead == dead {
		delete(s.msgs, id)
	}
}

// discard deletes the dead letters a DiscardDeadLetters removed.
func (rs *replay) discard(d *dec) {
	n := d.uint()
	if n > uint64(len(d.b))/17 { // each key takes at least 17 bytes
		d.fail()
		return
	}
	for range n {
		sub, id := d.sub(), d.id()
		if s := rs.subs[sub]; s != nil && d.err == nil && s.msgs[id] != nil && s.msgs[id].dead {
			delete(s.msgs, id)
		}
	}
}

func (rs *replay) dead(d *dec) {
	sub, id := d.sub(), d.id()
	reason, attempts, lastErr, at := queue.Reason(d.byte()), int(d.uint()), d.str(), d.time()
	if m := rs.msg(sub, id); m != nil && d.err == nil {
		rs.deadSeq++
		m.dead, m.inFlight, m.reason, m.attempts, m.lastErr, m.deadAt, m.deadSeq = true, false, reason, attempts, lastErr, at, rs.deadSeq
	}
}

func (rs *replay) purge(d *dec) {
	if s := rs.subs[d.sub()]; s != nil {
		maps.DeleteFunc(s.msgs, func(_ uuid.UUID, m *rmsg) bool { return !m.dead })
	}
}

// restore builds the broker from what the journal replayed: topics, then
// subscriptions, then the dead-letter store in its order, then the
// messages (where one in flight on its last attempt is dead-lettered).
func (b *Broker[T]) restore(rs *replay) error {
	r := &restorer[T]{b: b, st: b.durable(), rs: rs}
	// One envelope per message, shared by its subscriptions: a map only
	// when there is more than one subscription to share with.
	if len(rs.subs) > 1 {
		r.msgs = map[uuid.UUID]*queue.Message[T]{}
	}
	r.topics()
	if err := r.dedup(); err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(rs.subs)) {
		if err := r.sub(rs.subs[id]); err != nil {
			return err
		}
	}
	return r.finish()
}

// restorer is the state of a restore in progress.
type restorer[T any] struct {
	b       *Broker[T]
	st      *store[T]
	rs      *replay
	msgs    map[uuid.UUID]*queue.Message[T] // decoded envelopes, shared by subscriptions (fan-out only)
	letters []letter[T]                     // recovered dead letters, to order by seq
	fresh   []restored[T]                   // queues with dead letters the restore itself made
	live    int64                           // about what a snapshot would take
}

type restored[T any] struct {
	s     *Subscription[T]
	fresh []core.Letter[T] // dead-lettered by the restore itself
}

func (r *restorer[T]) decode(env []byte) (*queue.Message[T], error) {
	if m := r.msgs[uuid.UUID(env[:16])]; m != nil {
		return m, nil
	}
	m, err := unenvelope(env, r.st.codec)
	if err != nil {
		return nil, &CorruptError{Path: r.st.j.Path(), Offset: -1,
			Reason: fmt.Sprintf("the codec cannot decode message %v", uuid.UUID(env[:16])), Err: err}
	}
	if r.msgs != nil {
		r.msgs[m.ID] = m
	}
	return m, nil
}

func (r *restorer[T]) topics() {
	b := r.b
	b.mu.Lock()
	for name := range r.rs.topics {
		t := newTopicEntry[T](name)
		b.topics[name] = t
		b.rebuildLocked(t)
	}
	b.mu.Unlock()
	r.st.info.Topics = len(r.rs.topics)
}

// dedup restores the dedup IDs still inside their window.
func (r *restorer[T]) dedup() error {
	b := r.b
	now := b.now.Now()
	for topic, ds := range r.rs.dedup {
		t := b.topics[topic]
		if t == nil {
			continue
		}
		for _, dd := range ds {
			m, err := r.decode(dd.env)
			if err != nil {
				return err
			}
			if now.Before(m.PublishedAt.Add(b.dedupWindow)) { // (a later entry of one ID wins)
				t.dedup.put(dd.id, *m)
			}
		}
	}
	return nil
}

// sub restores one subscription: its queue, or, if it is gone, its dead
// letters alone.
func (r *restorer[T]) sub(rsub *rsub) error {
	st := r.st
	st.nextSub = max(st.nextSub, rsub.id+1)
	es, seqs, err := r.entries(rsub)
	if err != nil {
		return err
	}
	b := r.b
	var s *Subscription[T]
	if !rsub.gone {
		b.mu.Lock()
		s, err = b.recoverLocked(rsub)
		b.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if s == nil { // gone, or its topic is: only its dead letters stay
		for _, en := range es {
			if en.Dead {
				r.letters = append(r.letters, letter[T]{seqs[0], rsub.id, rsub.topic, core.DeadLetterOf(rsub.name, en)})
				seqs = seqs[1:]
			}
		}
		return nil
	}
	st.info.Subscriptions++
	st.info.Messages += len(es) - len(seqs)
	dls, err := s.q.Restore(es) // the dead entries in order, then those it dead-lettered
	if err != nil {
		return err
	}
	for i, seq := range seqs {
		r.letters = append(r.letters, letter[T]{seq, rsub.id, rsub.topic, dls[i]})
	}
	r.fresh = append(r.fresh, restored[T]{s, dls[len(seqs):]})
	return nil
}

// entries returns a subscription's messages as queue entries, in place
// order (which Restore needs, and then need not sort), and the dead-letter
// order of the dead ones.
func (r *restorer[T]) entries(rsub *rsub) ([]core.Entry[T], []uint64, error) {
	rms := slices.SortedFunc(maps.Values(rsub.msgs), func(x, y *rmsg) int { return cmp.Compare(x.place, y.place) })
	es := make([]core.Entry[T], 0, len(rms))
	var seqs []uint64
	for _, rm := range rms {
		r.live += int64(len(rm.env) + len(rm.lastErr) + putOverhead)
		m, err := r.decode(rm.env)
		if err != nil {
			return nil, nil, err
		}
		es = append(es, core.Entry[T]{
			Message: m, Place: rm.place, Attempts: rm.attempts, InFlight: rm.inFlight,
			VisibleAt: rm.visibleAt, TTL: rm.ttl, ExpiresAt: rm.expiresAt, LastError: rm.lastErr,
			Dead: rm.dead, Reason: rm.reason, DeadAt: rm.deadAt,
		})
		if rm.dead {
			seqs = append(seqs, rm.deadSeq)
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
	st.j.Rebase(r.live)
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
