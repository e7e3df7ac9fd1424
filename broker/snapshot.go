package broker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/core"
)

// compactLocked rewrites the journal as a snapshot. It holds still every
// state that records: the broker (b.mu, held by the caller), every queue
// (Freeze), the dead-letter store and the limbo.
func (b *Broker[T]) compactLocked() error {
	st := b.store
	subs := b.allLocked()
	slices.SortFunc(subs, func(x, y *Subscription[T]) int { return cmp.Compare(x.jid, y.jid) })
	held := make([][]core.Entry[T], len(subs))
	for i, s := range subs {
		es, thaw := s.q.Freeze()
		defer thaw()
		held[i] = es
	}
	b.dead.mu.Lock()
	defer b.dead.mu.Unlock()
	topics := slices.Sorted(maps.Keys(b.topics))
	now := b.clock.Now()
	dedups := make([][]*dedupEntry[T], len(topics))
	for i, name := range topics {
		d := &b.topics[name].dedup
		d.mu.Lock()
		defer d.mu.Unlock()
		dedups[i] = d.liveLocked(now, b.dedupWindow)
	}
	st.mu.Lock()
	defer st.mu.Unlock()

	// The dead letters in the order the store has (or will have) them:
	// the store's and those a Redrive has taken out, by id, then those on
	// their way to it, by arrival.
	var dead []letter[T]
	stored := slices.Concat(b.dead.items[b.dead.head:], slices.Collect(maps.Values(b.dead.taking)))
	slices.SortFunc(stored, func(x, y storedLetter[T]) int { return cmp.Compare(x.id, y.id) })
	for _, it := range stored {
		dead = append(dead, letter[T]{sub: it.sub, topic: it.topic, dl: it.dl})
	}
	limbo := slices.SortedFunc(maps.Values(st.limbo), func(x, y limboLetter[T]) int { return cmp.Compare(x.seq, y.seq) })
	for _, l := range limbo {
		dead = append(dead, letter[T]{sub: l.sub, topic: l.topic, dl: l.dl})
	}
	live := make(map[uint32]bool, len(subs))
	for _, s := range subs {
		live[s.jid] = true
	}
	return st.j.Rewrite(func(emit func([]byte)) error {
		var e enc
		e.start(recFormat).str(formatMagic)
		e.uint(formatVersion)
		emit(e.b)
		for _, name := range topics {
			emit(e.start(recTopic).strs(name).b)
		}
		for _, s := range subs {
			emit(e.start(recSub).sub(s.jid).strs(s.topic, s.name).specs(s.spec).b)
		}
		gone := map[uint32]bool{}
		for _, d := range dead { // the subscriptions of dead letters that outlived them
			if !live[d.sub] && !gone[d.sub] {
				gone[d.sub] = true
				emit(e.start(recSub).sub(d.sub).strs(d.topic, d.dl.Subscription).specs(subSpec{}).b)
				emit(e.start(recUnsub).sub(d.sub).b)
			}
		}
		var env []byte
		var err error
		put := func(sub uint32, en core.Entry[T]) error {
			if env, err = envelope(env[:0], en.Message, st.codec); err != nil {
				return fmt.Errorf("encode message %v: %w", en.Message.ID, err)
			}
			appendPut(&e, sub, en, env)
			emit(e.b)
			return nil
		}
		for _, d := range dead {
			m := d.dl.Message
			en := core.Entry[T]{Message: &m, Place: d.dl.Place, Attempts: d.dl.Attempts, TTL: d.dl.TTL,
				LastError: d.dl.LastError, Dead: true, Reason: d.dl.Reason, DeadAt: d.dl.At}
			if err := put(d.sub, en); err != nil {
				return err
			}
		}
		for i, s := range subs {
			for _, en := range held[i] {
				if err := put(s.jid, en); err != nil {
					return err
				}
			}
		}
		var heldIDs map[uuid.UUID]bool // messages with a put in the snapshot
		for i, name := range topics {  // after the messages, as a publish writes them
			for _, dd := range dedups[i] {
				if heldIDs == nil {
					heldIDs = map[uuid.UUID]bool{}
					for _, d := range dead {
						heldIDs[d.dl.Message.ID] = true
					}
					for _, es := range held {
						for _, en := range es {
							heldIDs[en.Message.ID] = true
						}
					}
				}
				e.start(recDedup).strs(name, dd.id)
				if heldIDs[dd.msg.ID] {
					e.b[0] = recDedupRef
					emit(append(e.b, dd.msg.ID[:]...))
					continue
				}
				if env, err = envelope(env[:0], &dd.msg, st.codec); err != nil {
					return fmt.Errorf("encode message %v: %w", dd.msg.ID, err)
				}
				emit(append(e.b, env...))
			}
		}
		return nil
	})
}
