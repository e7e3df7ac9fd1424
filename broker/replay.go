package broker

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// replay is the state the journal's records build, before it becomes a
// broker.
type replay struct {
	records int // replayed so far
	topics  map[string]bool
	subs    map[uint32]*rsub
	deadSeq uint64
	dedup   map[string]*rdedups // by topic
	// envs holds the envelopes of puts that a later record may name by
	// the message's ID: every put's in a journal of format 2 (its
	// recDedupRef), the puts of the group being replayed in a later one
	// (recPutRef names a put of its own group, and is the only record that
	// does): keeping every put's made each one a map insert.
	envs     map[uuid.UUID][]byte
	version  uint64 // the format of the segment being replayed
	grouping bool   // a group's records are being replayed
	// early holds the records about a message of a live subscription that
	// came before its put: a consumer's, made between the offer and the
	// append of the publish's group (see group). A put applies them.
	early map[dlKey][][]byte
}

// addDedup adds d to topic's IDs.
func (rs *replay) addDedup(topic string, d rdedup) {
	ds := rs.dedup[topic]
	if ds == nil {
		ds = &rdedups{}
		rs.dedup[strings.Clone(topic)] = ds // topic may be a view
	}
	ds.add(d)
}

type rsub struct {
	id          uint32
	topic, name string
	spec        subSpec
	gone        bool
	paused      bool // Pause (recPause), until Resume
	msgs        rmsgs
}

// putOverhead is about what a put record takes besides its envelope and
// last error: frame, type, subscription, place, attempts, flags and times.
const putOverhead = 8 + 1 + 2 + 3 + 1 + 1 + 4*9 + 2

// expiredText is the LastError the queue gives a message whose lease
// expired: replay must spell it as the queue does.
const expiredText = backend.LeaseExpired

func newReplay() *replay {
	return &replay{topics: map[string]bool{}, subs: map[uint32]*rsub{}, dedup: map[string]*rdedups{},
		envs: map[uuid.UUID][]byte{}, early: map[dlKey][][]byte{}}
}

// group replays a group's records in order: all of them, since the frame
// that holds them is whole.
func (rs *replay) group(d *dec) error {
	rs.grouping = true
	defer func() {
		rs.grouping = false
		if rs.version >= 3 {
			clear(rs.envs) // no later record names these puts
		}
	}()
	n := d.uint()
	if n > uint64(len(d.b)) { // each record takes at least a byte
		d.fail()
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		body := d.bytes()
		if d.err != nil {
			break
		}
		if len(body) == 0 {
			return fmt.Errorf("empty record %d in a group", i)
		}
		if err := rs.applyOne(body, true); err != nil {
			return fmt.Errorf("record %d of a group: %w", i, err)
		}
	}
	if d.err == nil && len(d.b) > 0 {
		return fmt.Errorf("%d bytes after a group's records", len(d.b))
	}
	return nil
}

// keyed replays a record about one message of one subscription (retry,
// release, remove, dead, forget); one that comes before the message's put
// waits for it in early.
func (rs *replay) keyed(typ byte, body []byte, d *dec) {
	sub, id := d.sub(), d.id()
	if d.err != nil {
		return
	}
	if rs.waits(sub, id, body) {
		return
	}
	switch typ {
	case recRetry:
		rs.retry(sub, id, d)
	case recRelease:
		rs.release(sub, id)
	case recRemove:
		rs.remove(sub, id, false)
	case recDead:
		rs.dead(sub, id, d)
	case recForget:
		rs.remove(sub, id, true)
	case recHistory:
		if h := d.history(); d.err == nil {
			if m := rs.msg(sub, id); m != nil {
				m.extra().hist = h
			}
		}
	}
}

// waits keeps body for the put of (sub, id) if the subscription is live
// and does not hold that message (yet), and reports whether it did.
func (rs *replay) waits(sub uint32, id uuid.UUID, body []byte) bool {
	s := rs.subs[sub]
	if s == nil || s.gone || s.msgs.get(id) != nil {
		return false
	}
	k := dlKey{sub, id}
	rs.early[k] = append(rs.early[k], bytes.Clone(body))
	return true
}

// arrived applies the records that came before the put of (sub, id).
func (rs *replay) arrived(sub uint32, id uuid.UUID) error {
	k := dlKey{sub, id}
	bodies := rs.early[k]
	if bodies == nil {
		return nil
	}
	delete(rs.early, k)
	for _, b := range bodies {
		if err := rs.applyOne(b, true); err != nil {
			return err
		}
	}
	return nil
}

func (rs *replay) msg(sub uint32, id uuid.UUID) *rmsg {
	if s := rs.subs[sub]; s != nil {
		return s.msgs.get(id)
	}
	return nil
}

// apply replays one record of the journal.
func (rs *replay) apply(body []byte) error {
	rs.records++
	if len(body) > 0 && (body[0] == recFormat) != (rs.records == 1) {
		return fmt.Errorf("not a leasebus journal: record %d is of type %d", rs.records, body[0])
	}
	return rs.applyOne(body, false)
}

// applyOne replays one record, with one small handler per record type.
// Records may name messages or subscriptions that are gone (a call racing
// an Unsubscribe): they are ignored. inGroup: body is a part of a group,
// which holds neither a format record nor another group.
func (rs *replay) applyOne(body []byte, inGroup bool) error {
	d := &dec{b: body}
	typ := d.byte()
	if inGroup && (typ == recFormat || typ == recGroup) {
		return fmt.Errorf("record of type %d inside a group", typ)
	}
	var err error
	switch typ {
	case recGroup:
		err = rs.group(d)
	case recPutRef:
		err = rs.putRef(d)
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
	case recDedupID:
		rs.dedupID(d)
	case recSub:
		err = rs.sub(d)
	case recUnsub:
		rs.unsub(d)
	case recPut:
		err = rs.put(d, nil)
	case recDeliver:
		rs.deliver(d)
	case recRetry, recRelease, recRemove, recDead, recForget, recHistory:
		rs.keyed(typ, body, d)
	case recPurge:
		rs.purge(d)
	case recDiscard:
		rs.discard(d)
	case recPause:
		rs.pause(d)
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
	rs.version = version
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

// dedupRec replays a recDedup (format 1 and 2): the ID with the envelope of
// its message.
func (rs *replay) dedupRec(d *dec) {
	topic, id, env := d.view(), d.view(), d.rest()
	if d.err != nil {
		return
	}
	msg, at, err := envelopeHead(env)
	if err != nil {
		d.err = err
		return
	}
	rs.addDedup(topic, rdedup{id, msg, stamp(at)})
}

// dedupRef replays a recDedupRef (format 2): the ID with the ID of a
// message whose put came before it.
func (rs *replay) dedupRef(d *dec) error {
	topic, id, mid := d.view(), d.view(), d.id()
	if d.err != nil {
		return nil
	}
	env := rs.envs[mid]
	if env == nil {
		return fmt.Errorf("dedup record of message %v, which no earlier record holds", mid)
	}
	_, at, err := envelopeHead(env)
	if err != nil {
		return err
	}
	rs.addDedup(topic, rdedup{id, mid, stamp(at)})
	return nil
}

// dedupID replays a recDedupID.
func (rs *replay) dedupID(d *dec) {
	topic, id, mid, at := d.view(), d.view(), d.id(), d.int()
	if d.err == nil {
		rs.addDedup(topic, rdedup{id, mid, at})
	}
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
		rs.subs[id] = &rsub{id: id, topic: topic, name: name, spec: spec}
	}
	return nil
}

// unsub: the subscription's messages go, its dead letters stay.
func (rs *replay) unsub(d *dec) {
	if s := rs.subs[d.sub()]; s != nil {
		s.gone = true
		s.msgs.removeIf(func(m *rmsg) bool { return !m.dead })
	}
}

// put replays a recPut, or, with env, a recPutRef whose envelope that is.
func (rs *replay) put(d *dec, env []byte) error {
	sub := d.sub()
	var m rmsg
	m.place, m.attempts = d.uint(), int(d.uint())
	flags := d.byte()
	m.inFlight, m.dead = flags&putInFlight != 0, flags&putDead != 0
	m.visibleAt = d.int()
	m.setTTL(d.dur(), d.int())
	m.setLastErr(d.view())
	if reason, deadAt := queue.Reason(d.byte()), d.int(); reason != 0 || deadAt != 0 {
		m.extra().reason, m.more.deadAt = reason, deadAt
	}
	if env == nil {
		env = d.rest()
	}
	m.env = env
	if d.err == nil && len(m.env) < 16 {
		d.fail()
	}
	if d.err != nil {
		return nil
	}
	id := uuid.UUID(m.env[:16])
	if rs.grouping || rs.version < 3 {
		rs.envs[id] = m.env // for a recPutRef after it in its group, or a format 2 recDedupRef
	}
	if s := rs.subs[sub]; s != nil && (!s.gone || m.dead) {
		if m.dead {
			rs.deadSeq++
			m.extra().deadSeq = rs.deadSeq
		}
		s.msgs.add(id, m)
		return rs.arrived(sub, id)
	}
	return nil
}

// putRef replays a recPutRef: a put whose envelope is that of an earlier
// put of the message, named by its ID at the end of the record.
func (rs *replay) putRef(d *dec) error {
	if len(d.b) < 16 {
		d.fail()
		return nil
	}
	id := uuid.UUID(d.b[len(d.b)-16:])
	env := rs.envs[id]
	if env == nil {
		return fmt.Errorf("put of message %v, which no earlier record holds", id)
	}
	d.b = d.b[:len(d.b)-16]
	if err := rs.put(d, env); err != nil {
		return err
	}
	if d.err == nil && len(d.b) > 0 {
		return fmt.Errorf("%d bytes after a put's fields", len(d.b))
	}
	return nil
}

func (rs *replay) deliver(d *dec) {
	sub, n := d.sub(), d.uint()
	if n > uint64(len(d.b))/16 { // each ID takes 16 bytes
		d.fail()
		return
	}
	for range n {
		id := d.id()
		m := rs.msg(sub, id)
		if m == nil { // perhaps its put comes later: this delivery alone waits for it
			var one enc
			one.start(recDeliver).sub(sub)
			one.uint(1)
			one.id(id)
			if rs.waits(sub, id, one.b) {
				continue
			}
		}
		if m != nil && !m.dead {
			if m.inFlight { // delivered again unsettled: its lease expired in between
				m.setLastErr(expiredText)
			}
			m.attempts++
			m.inFlight = true
			m.visibleAt = 0
		}
	}
}

func (rs *replay) retry(sub uint32, id uuid.UUID, d *dec) {
	at, lastErr := d.int(), d.view()
	if m := rs.msg(sub, id); m != nil && !m.dead && d.err == nil {
		m.inFlight, m.visibleAt = false, at
		m.setLastErr(lastErr)
	}
}

func (rs *replay) release(sub uint32, id uuid.UUID) {
	if m := rs.msg(sub, id); m != nil && !m.dead {
		m.inFlight = false
		m.attempts = max(m.attempts-1, 0)
	}
}

// remove deletes a live message (recRemove: acked or dropped), or a dead
// letter (recForget: it left the store).
func (rs *replay) remove(sub uint32, id uuid.UUID, dead bool) {
	if s := rs.subs[sub]; s != nil {
		s.msgs.remove(id, dead)
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
		if d.err != nil {
			return
		}
		var one enc // this letter alone, to wait for the put
		if !rs.waits(sub, id, one.start(recForget).key(sub, id).b) {
			rs.remove(sub, id, true)
		}
	}
}

func (rs *replay) dead(sub uint32, id uuid.UUID, d *dec) {
	reason, attempts, lastErr, at := queue.Reason(d.byte()), int(d.uint()), d.view(), d.int()
	if m := rs.msg(sub, id); m != nil && d.err == nil {
		rs.deadSeq++
		m.dead, m.inFlight, m.attempts = true, false, attempts
		m.setLastErr(lastErr)
		x := m.extra()
		x.reason, x.deadAt, x.deadSeq = reason, at, rs.deadSeq
	}
}

func (rs *replay) pause(d *dec) {
	id, paused := d.sub(), d.byte() == 1
	if s := rs.subs[id]; s != nil && d.err == nil {
		s.paused = paused
	}
}

func (rs *replay) purge(d *dec) {
	if s := rs.subs[d.sub()]; s != nil {
		s.msgs.removeIf(func(m *rmsg) bool { return !m.dead })
	}
}
