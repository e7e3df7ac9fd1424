package broker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// compactLocked rewrites the journal as a snapshot. It holds still every
// state that records: the broker (b.mu, held by the caller), every queue
// (Freeze), the dead-letter store and the limbo.
func (b *Broker[T]) compactLocked() error {
	st := b.durable()
	sn := &snapshot[T]{codec: st.codec, subs: b.allLocked()}
	slices.SortFunc(sn.subs, func(x, y *Subscription[T]) int { return cmp.Compare(x.jid, y.jid) })
	sn.held = make([][]core.Entry[T], len(sn.subs))
	sn.paused = make([]bool, len(sn.subs))
	for i, s := range sn.subs {
		es, paused, thaw := s.q.Freeze()
		defer thaw()
		sn.held[i], sn.paused[i] = es, paused
	}
	b.dead.mu.Lock()
	defer b.dead.mu.Unlock()
	sn.topics = slices.Sorted(maps.Keys(b.topics))
	now := b.now.Now()
	sn.dedups = make([][]idSlot[T], len(sn.topics))
	for i, name := range sn.topics {
		d := &b.topics[name].dedup
		d.mu.Lock()
		defer d.mu.Unlock()
		sn.dedups[i] = d.liveLocked(now, b.dedupWindow)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	sn.dead = b.deadInOrderLocked()
	return st.j.Rewrite(sn.write)
}

// deadInOrderLocked returns the dead letters in the order the store has
// (or will have) them: the store's and those a Redrive has taken out, by
// id, then those on their way to it, by arrival. It needs the store's and
// the limbo's locks.
func (b *Broker[T]) deadInOrderLocked() []letter[T] {
	var dead []letter[T]
	stored := slices.Concat(b.dead.items[b.dead.head:], slices.Collect(maps.Values(b.dead.taking)))
	slices.SortFunc(stored, func(x, y storedLetter[T]) int { return cmp.Compare(x.id, y.id) })
	for _, it := range stored {
		dead = append(dead, letter[T]{sub: it.sub, topic: it.topic, dl: it.dl})
	}
	limbo := slices.SortedFunc(maps.Values(b.durable().limbo), func(x, y limboLetter[T]) int { return cmp.Compare(x.seq, y.seq) })
	for _, l := range limbo {
		dead = append(dead, letter[T]{sub: l.sub, topic: l.topic, dl: l.dl})
	}
	return dead
}

// snapshot is the frozen state a compaction writes.
type snapshot[T any] struct {
	codec  queue.Codec[T]
	topics []string           // sorted
	subs   []*Subscription[T] // by journal id
	held   [][]core.Entry[T]  // what each of subs holds
	paused []bool             // whether each of subs is paused
	dead   []letter[T]        // in the store's order
	dedups [][]idSlot[T]      // each topic's live IDs, oldest first
	e      enc                // the record being built
	env    []byte             // an envelope being encoded
}

// write emits the records that rebuild the state: the format, topics and
// subscriptions, dead letters and messages, then dedup IDs (after their
// messages, as a publish writes them).
func (sn *snapshot[T]) write(emit func([]byte)) error {
	sn.writeStructure(emit)
	if err := sn.writeMessages(emit); err != nil {
		return err
	}
	return sn.writeDedups(emit)
}

func (sn *snapshot[T]) writeStructure(emit func([]byte)) {
	e := &sn.e
	e.start(recFormat).str(formatMagic)
	e.uint(formatVersion)
	emit(e.b)
	for _, name := range sn.topics {
		emit(e.start(recTopic).strs(name).b)
	}
	live := make(map[uint32]bool, len(sn.subs))
	for i, s := range sn.subs {
		live[s.jid] = true
		emit(e.start(recSub).sub(s.jid).strs(s.topic, s.name).specs(s.spec).b)
		if sn.paused[i] {
			e.start(recPause).sub(s.jid).byte(1)
			emit(e.b)
		}
	}
	gone := map[uint32]bool{}
	for _, d := range sn.dead { // the subscriptions of dead letters that outlived them
		if !live[d.sub] && !gone[d.sub] {
			gone[d.sub] = true
			emit(e.start(recSub).sub(d.sub).strs(d.topic, d.dl.Subscription).specs(subSpec{}).b)
			emit(e.start(recUnsub).sub(d.sub).b)
		}
	}
}

func (sn *snapshot[T]) writeMessages(emit func([]byte)) error {
	for _, d := range sn.dead {
		m := d.dl.Message
		en := core.Entry[T]{Message: &m, Place: d.dl.Place, Attempts: d.dl.Attempts, TTL: d.dl.TTL,
			LastError: d.dl.LastError, Dead: true, Reason: d.dl.Reason, DeadAt: d.dl.At}
		if err := sn.put(emit, d.sub, en); err != nil {
			return err
		}
		if len(d.dl.History) > 0 {
			e := sn.e.start(recHistory).key(d.sub, m.ID)
			e.history(d.dl.History)
			emit(e.b)
		}
	}
	for i, s := range sn.subs {
		for _, en := range sn.held[i] {
			if err := sn.put(emit, s.jid, en); err != nil {
				return err
			}
		}
	}
	return nil
}

func (sn *snapshot[T]) put(emit func([]byte), sub uint32, en core.Entry[T]) error {
	var err error
	if sn.env, err = envelope(sn.env[:0], en.Message, sn.codec); err != nil {
		return fmt.Errorf("encode message %v: %w", en.Message.ID, err)
	}
	appendPut(&sn.e, sub, en, sn.env)
	emit(sn.e.b)
	return nil
}

// writeDedups emits the live dedup IDs: each with its message's ID and
// first publish.
func (sn *snapshot[T]) writeDedups(emit func([]byte)) error {
	for i, name := range sn.topics {
		for _, dd := range sn.dedups[i] {
			e := sn.e.start(recDedupID).strs(name, dd.id)
			e.id(dd.msg)
			e.time(time.Unix(0, dd.at))
			emit(e.b)
		}
	}
	return nil
}
