package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// deadLetters is the broker's bounded dead-letter store. No user code runs
// under its lock. It is not a leaf: in a durable broker, forget (called
// under it) takes the store's lock to append a record, and compaction
// takes it after the queues' locks; so the order is queues, then this,
// then the durable store's.
type deadLetters[T any] struct {
	mu        sync.Mutex // guards everything below
	limit     int
	items     []storedLetter[T] // items[head:], oldest first, ids ascending
	head      int
	nextID    uint64
	dropped   uint64                     // dropped because the store was full
	discarded uint64                     // removed by DiscardDeadLetters
	taking    map[uint64]storedLetter[T] // taken by a Redrive that has not finished
	// forget, in a durable broker, records a letter leaving the store for
	// good; discard records that the letters keys name did, in one record.
	// Both are called under mu.
	forget  func(sub uint32, id uuid.UUID)
	discard func(keys []dlKey)
}

type storedLetter[T any] struct {
	id    uint64
	topic string // the topic of the subscription that dead-lettered it
	sub   uint32 // that subscription's journal id (durable broker)
	dl    core.Letter[T]
}

func (s *deadLetters[T]) add(topic string, sub uint32, dl core.Letter[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	dl.Topic = topic
	s.items = append(s.items, storedLetter[T]{id: s.nextID, topic: topic, sub: sub, dl: dl})
	s.trimLocked()
}

// trimLocked drops the oldest letters beyond the limit.
func (s *deadLetters[T]) trimLocked() {
	for len(s.items)-s.head > s.limit {
		if it := s.items[s.head]; s.forget != nil {
			s.forget(it.sub, it.dl.Message.ID)
		}
		s.items[s.head] = storedLetter[T]{}
		s.head++
		s.dropped++
	}
	if s.head > 0 && s.head*2 >= len(s.items) {
		n := copy(s.items, s.items[s.head:])
		clear(s.items[n:])
		s.items, s.head = s.items[:n], 0
	}
}

func (s *deadLetters[T]) list() []queue.DeadLetter[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]queue.DeadLetter[T], 0, len(s.items)-s.head)
	for _, it := range s.items[s.head:] {
		out = append(out, it.dl.DeadLetter)
	}
	return out
}

// take removes the letter with the given id and reports whether it was
// still there. Until putBack or done, it counts as taken: a durable
// broker's snapshot keeps it.
func (s *deadLetters[T]) take(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.items[s.head:]
	i, ok := slices.BinarySearchFunc(live, id, func(it storedLetter[T], id uint64) int { return cmp.Compare(it.id, id) })
	if !ok {
		return false
	}
	if s.taking == nil {
		s.taking = make(map[uint64]storedLetter[T])
	}
	s.taking[id] = live[i]
	s.items = slices.Delete(s.items, s.head+i, s.head+i+1)
	return true
}

// remove takes the letters with the given ids (ascending) out of the store
// for good, those still there, and returns how many; a durable broker
// records their removal in one record, under the store's lock, so that a
// snapshot sees them either in the store or gone.
func (s *deadLetters[T]) remove(ids []uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []dlKey
	live := slices.DeleteFunc(s.items[s.head:], func(it storedLetter[T]) bool {
		_, ok := slices.BinarySearch(ids, it.id)
		if ok {
			gone = append(gone, dlKey{it.sub, it.dl.Message.ID})
		}
		return ok
	})
	s.items = s.items[:s.head+len(live)]
	if len(gone) > 0 && s.discard != nil {
		s.discard(gone)
	}
	s.discarded += uint64(len(gone))
	return len(gone)
}

// done forgets a taken letter: it is back on a subscription.
func (s *deadLetters[T]) done(id uint64) {
	s.mu.Lock()
	delete(s.taking, id)
	s.mu.Unlock()
}

// putBack returns a taken letter to its place.
func (s *deadLetters[T]) putBack(it storedLetter[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.taking, it.id)
	live := s.items[s.head:]
	i, _ := slices.BinarySearchFunc(live, it.id, func(it storedLetter[T], id uint64) int { return cmp.Compare(it.id, id) })
	s.items = slices.Insert(s.items, s.head+i, it)
	s.trimLocked()
}

func (s *deadLetters[T]) stats() (held int, dropped, discarded uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items) - s.head, s.dropped, s.discarded
}

// deadLetter routes a subscription's dead letter: to its dead-letter topic
// if it has one with a subscription to take it, else to the store. A
// message that already came through a dead-letter topic goes to the store
// when it dies again, so routing cannot loop (a subscription whose
// dead-letter topic feeds itself, directly or through a pattern).
func (b *Broker[T]) deadLetter(s *Subscription[T], dl core.Letter[T]) {
	if b.enter() { // else closed: the letter is in the journal already, and goes to the store
		defer b.leave()
	}
	srcTopic := s.topic
	if p := s.dlq.Load(); p != nil {
		if _, again := dl.Message.Headers.Lookup(backend.HeaderReason); !again && b.route(s, *p, dl) {
			return
		}
	}
	b.dead.add(srcTopic, s.jid, dl)
	b.dur.landed(s.jid, dl.Message.ID)
}

// route publishes a dead letter to its subscription's dead-letter topic and
// reports whether a subscription there took it.
func (b *Broker[T]) route(s *Subscription[T], dlTopic string, dl core.Letter[T]) bool {
	h := maps.Collect(dl.Message.Headers.All())
	h[backend.HeaderReason] = dl.Reason.String()
	h[backend.HeaderAttempts] = strconv.Itoa(dl.Attempts)
	h[backend.HeaderLastError] = dl.LastError
	h[backend.HeaderSubscription] = dl.Subscription
	h[backend.HeaderTopic] = s.topic
	h[backend.HeaderMessageID] = dl.Message.ID.String()
	h[backend.HeaderAt] = dl.At.Format(time.RFC3339Nano)
	pc := publishConfig{PublishOptions: queue.PublishOptions{Priority: dl.Message.Priority, Headers: h, Key: dl.Message.Key}}
	// A done context: a full OverflowBlock subscription on the
	// dead-letter topic refuses at once rather than stall the consumer
	// whose call dead-lettered the message.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// The publish's group records that the letter left its subscription,
	// with its puts on the dead-letter topic: one commit, so that a crash
	// cannot leave it in both places.
	pc.forget = &dlKey{s.jid, dl.Message.ID}
	// Taken by some subscription there (another may have refused it): it
	// is there now, and only there.
	_, n, _ := b.publish(ctx, dlTopic, dl.Message.Payload, &pc)
	return n > 0
}

// DeadLetterOf reads back the dead letter that a message taken from a
// dead-letter topic (WithDeadLetterTopic) carries in its headers: the
// subscription that gave up on it, the reason, the attempts, the last
// error and when, and the original message: its ID, key, priority, payload
// and its own headers. Its Topic, and the original's, is the source
// subscription's topic (its pattern, for a pattern subscription), and the original's PublishedAt is
// when the dead letter was published. ok is false if m did not come
// through a dead-letter topic, or its headers do not read back.
//
// The headers are named leasebus-dead-letter-reason, -attempts,
// -last-error, -subscription, -topic, -message-id and -at (RFC 3339 with
// nanoseconds); JetStream's dead letters use the same names.
func DeadLetterOf[T any](m queue.Message[T]) (dl queue.DeadLetter[T], ok bool) {
	h := m.Headers
	reason, ok := queue.ParseReason(h.Get(backend.HeaderReason))
	if !ok {
		return dl, false
	}
	attempts, err := strconv.Atoi(h.Get(backend.HeaderAttempts))
	if err != nil {
		return dl, false
	}
	id, err := uuid.Parse(h.Get(backend.HeaderMessageID))
	if err != nil {
		return dl, false
	}
	at, err := time.Parse(time.RFC3339Nano, h.Get(backend.HeaderAt))
	if err != nil {
		return dl, false
	}
	own := make(map[string]string, h.Len())
	for k, v := range h.All() {
		if !strings.HasPrefix(k, backend.HeaderPrefix) {
			own[k] = v
		}
	}
	orig := m
	orig.ID, orig.Topic, orig.Headers = id, h.Get(backend.HeaderTopic), queue.NewHeaders(own)
	return queue.DeadLetter[T]{
		Subscription: h.Get(backend.HeaderSubscription),
		Topic:        orig.Topic,
		Message:      orig,
		Reason:       reason,
		Attempts:     attempts,
		LastError:    h.Get(backend.HeaderLastError),
		At:           at,
	}, true
}

// DeadLetters returns the dead letters the broker holds, oldest first,
// after settling every subscription at the clock's now (so right after a
// mock clock moves, the list is exact).
func (b *Broker[T]) DeadLetters() []queue.DeadLetter[T] {
	b.settleAll()
	return b.dead.list()
}

// DeadLettersSeq returns an iterator over the dead letters the broker
// holds, oldest first, that never copies the whole store: it settles every
// subscription at the clock's now when iteration starts, then takes the
// letters a few hundred at a time under the store's lock and yields them
// with no lock held, so yield may call the broker (a Redrive or Discard of
// a letter already yielded is fine). A letter that leaves the store
// during the iteration and has not been yielded yet is not yielded; one
// that arrives is yielded at its place, the end. Each letter is yielded at
// most once. What DeadLetters copies at once, this costs per chunk: a
// page of a million letters reads them through one small buffer.
func (b *Broker[T]) DeadLettersSeq() iter.Seq[queue.DeadLetter[T]] {
	return func(yield func(queue.DeadLetter[T]) bool) {
		b.settleAll()
		for it := range b.dead.all() {
			if !yield(it.dl.DeadLetter) {
				return
			}
		}
	}
}

// seqChunk is how many letters the store's iteration takes under one lock.
const seqChunk = 256

// all iterates the store's letters oldest first, seqChunk at a time under
// its lock, yielding with no lock held (see DeadLettersSeq).
func (s *deadLetters[T]) all() iter.Seq[storedLetter[T]] {
	return func(yield func(storedLetter[T]) bool) {
		buf := make([]storedLetter[T], 0, seqChunk)
		var after uint64 // the id of the last letter yielded
		for {
			buf = s.chunk(buf[:0], after)
			for _, it := range buf {
				if !yield(it) {
					return
				}
			}
			if len(buf) < seqChunk {
				return
			}
			after = buf[len(buf)-1].id
			clear(buf) // drop the payloads' references until the next chunk
		}
	}
}

// chunk appends to buf up to cap(buf) letters whose id is greater than
// after, oldest first.
func (s *deadLetters[T]) chunk(buf []storedLetter[T], after uint64) []storedLetter[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.items[s.head:]
	i, found := slices.BinarySearchFunc(live, after, func(it storedLetter[T], id uint64) int { return cmp.Compare(it.id, id) })
	if found {
		i++
	}
	return append(buf, live[i:min(len(live), i+cap(buf)-len(buf))]...)
}

// DeadLetterStats returns what the dead-letter store holds now and what
// left it other than by a redrive: dropped, oldest first, because it was
// full (see WithDeadLetterLimit), or removed by DiscardDeadLetters. It
// settles every subscription at the clock's now first, as DeadLetters
// does.
func (b *Broker[T]) DeadLetterStats() queue.DeadLetterStats {
	b.settleAll()
	held, dropped, discarded := b.dead.stats()
	return queue.DeadLetterStats{Held: held, Dropped: dropped, Discarded: discarded}
}

// DiscardDeadLetters removes the dead letters for which match returns true
// from the store, for good, and returns how many it removed: how a job
// settles a poison message it has given up on (record why first; the
// letter is gone afterwards). DeadLetterStats counts them (Discarded). On a
// durable broker the removal is one journal record, committed before
// DiscardDeadLetters returns: after a crash, all of them are gone or none
// (a discard of more than 2^20 letters is committed in records of 2^20).
// match runs without any lock held; a letter redriven or dropped
// meanwhile is not counted. A nil match is queue.ErrInvalidArgument; after
// Close, queue.ErrClosed.
func (b *Broker[T]) DiscardDeadLetters(match func(queue.DeadLetter[T]) bool) (int, error) {
	if match == nil {
		return 0, backend.Invalid("DiscardDeadLetters: nil func")
	}
	if !b.enter() {
		return 0, fmt.Errorf("discard dead letters: %w", queue.ErrClosed)
	}
	defer b.leave()
	b.settleAll()
	var ids []uint64
	for it := range b.dead.all() {
		if match(it.dl.DeadLetter) {
			ids = append(ids, it.id) // ascending: the store's order
		}
	}
	n := b.dead.remove(ids)
	return n, b.commit()
}

// Redrive puts the dead letters for which match returns true back on the
// subscription that dead-lettered them, as fresh messages: attempts reset,
// place (priority and publish order) kept. It returns how many it put
// back. A letter whose subscription is gone or full stays in the store,
// and Redrive's error names it (matching ErrSubscriptionNotFound or
// queue.ErrQueueFull). match runs without any lock held.
func (b *Broker[T]) Redrive(match func(queue.DeadLetter[T]) bool) (int, error) {
	if match == nil {
		return 0, backend.Invalid("Redrive: nil func")
	}
	return b.redrive(func(dl queue.DeadLetter[T]) (T, bool) { return dl.Message.Payload, match(dl) }, false)
}

// RedriveWith is Redrive with a corrected payload: for each dead letter,
// fix returns the payload to put back and whether to put it back at all.
// The message keeps its ID, key, priority, headers and place; attempts
// reset. It is how a job redoes an item whose input was wrong, once the
// input is fixed: a dedup ID that the first publish used still names the
// message, so publishing the corrected item again would be dropped as a
// duplicate. On a durable broker a payload the codec cannot encode (or
// that is too large) leaves its letter in the store, and the error names
// it. fix runs without any lock held.
func (b *Broker[T]) RedriveWith(fix func(queue.DeadLetter[T]) (payload T, ok bool)) (int, error) {
	if fix == nil {
		return 0, backend.Invalid("RedriveWith: nil func")
	}
	return b.redrive(fix, true)
}

// redrive is Redrive and RedriveWith: pick returns each letter's payload
// and whether to redrive it; replaced says the payload may be new, to be
// checked by the codec before anything changes.
func (b *Broker[T]) redrive(pick func(queue.DeadLetter[T]) (T, bool), replaced bool) (int, error) {
	if !b.enter() {
		return 0, fmt.Errorf("redrive: %w", queue.ErrClosed)
	}
	defer b.leave()
	b.settleAll()
	type choice struct {
		it      storedLetter[T]
		payload T
	}
	var chosen []choice
	for it := range b.dead.all() {
		if p, ok := pick(it.dl.DeadLetter); ok {
			chosen = append(chosen, choice{it, p})
		}
	}
	n := 0
	var errs []error
	for _, c := range chosen {
		it := c.it
		if !b.dead.take(it.id) {
			continue // redriven or dropped meanwhile
		}
		dl := it.dl
		dl.Message.Payload = c.payload
		s, err := b.Subscription(it.topic, dl.Subscription)
		if err == nil {
			err = b.redriveOne(s, it, dl, replaced)
		}
		if err != nil {
			b.dead.putBack(it)
			errs = append(errs, fmt.Errorf("redrive message %v: %w", it.dl.Message.ID, err))
			continue
		}
		b.dead.done(it.id)
		n++
	}
	if err := b.commit(); err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// redriveOne puts a taken letter it back on s as dl (its payload perhaps
// replaced). On a durable broker, a letter going back on another
// subscription of its name (the one that made it is gone) is put there and
// recorded as gone from the old one in one group; a replaced payload is
// encoded before anything changes.
func (b *Broker[T]) redriveOne(s *Subscription[T], it storedLetter[T], dl core.Letter[T], replaced bool) error {
	elsewhere := s.jid != it.sub
	if !replaced && !elsewhere {
		return s.q.Redrive(dl) // one record: the put, which the queue encodes
	}
	env, err := b.dur.prepare(&dl.Message)
	switch {
	case err != nil: // refused before anything changed
		return err
	case env == nil: // in memory: nothing to record
		return s.q.Redrive(dl)
	}
	defer b.dur.release(env)
	if !elsewhere {
		return s.q.Redrive(dl, core.WithNote(env))
	}
	g := b.dur.newGroup()
	env.grp = g
	if err := s.q.Redrive(dl, core.WithNote(env)); err != nil {
		b.dur.flush(g) // empty: nothing changed
		return err
	}
	g.addForget(dlKey{it.sub, it.dl.Message.ID})
	b.dur.flush(g)
	return nil
}
