package broker

import (
	"cmp"
	"slices"
	"sync"

	"github.com/leasebus/leasebus/queue"
)

// deadLetters is the broker's bounded dead-letter store. Its lock is a
// leaf: nothing else is locked while it is held, and no user code runs
// under it.
type deadLetters[T any] struct {
	mu      sync.Mutex // guards everything below
	limit   int
	items   []storedLetter[T] // items[head:], oldest first, ids ascending
	head    int
	nextID  uint64
	dropped uint64 // dropped because the store was full
}

type storedLetter[T any] struct {
	id    uint64
	topic string // the topic of the subscription that dead-lettered it
	dl    queue.DeadLetter[T]
}

func (s *deadLetters[T]) add(topic string, dl queue.DeadLetter[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.items = append(s.items, storedLetter[T]{id: s.nextID, topic: topic, dl: dl})
	s.trimLocked()
}

// trimLocked drops the oldest letters beyond the limit.
func (s *deadLetters[T]) trimLocked() {
	for len(s.items)-s.head > s.limit {
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
		out = append(out, it.dl)
	}
	return out
}

func (s *deadLetters[T]) snapshot() []storedLetter[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.items[s.head:])
}

// take removes the letter with the given id and reports whether it was
// still there.
func (s *deadLetters[T]) take(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.items[s.head:]
	i, ok := slices.BinarySearchFunc(live, id, func(it storedLetter[T], id uint64) int { return cmp.Compare(it.id, id) })
	if !ok {
		return false
	}
	s.items = slices.Delete(s.items, s.head+i, s.head+i+1)
	return true
}

// putBack returns a taken letter to its place.
func (s *deadLetters[T]) putBack(it storedLetter[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
