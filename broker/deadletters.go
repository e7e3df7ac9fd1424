package broker

import (
	"cmp"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// deadLetters is the broker's bounded dead-letter store. No user code runs
// under its lock. It is not a leaf: in a durable broker, forget (called
// under it) takes the store's lock to append a record, and compaction
// takes it after the queues' locks; so the order is queues, then this,
// then the durable store's.
type deadLetters[T any] struct {
	mu      sync.Mutex // guards everything below
	limit   int
	items   []storedLetter[T] // items[head:], oldest first, ids ascending
	head    int
	nextID  uint64
	dropped uint64                     // dropped because the store was full
	taking  map[uint64]storedLetter[T] // taken by a Redrive that has not finished
	// forget, in a durable broker, records a letter leaving the store for
	// good. It is called under mu.
	forget func(sub uint32, id uuid.UUID)
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

func (s *deadLetters[T]) snapshot() []storedLetter[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.items[s.head:])
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

func (s *deadLetters[T]) stats() (held int, dropped uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items) - s.head, s.dropped
}
