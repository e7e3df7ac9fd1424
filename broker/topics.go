package broker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// CreateTopic creates a topic. Creating one that exists is a no-op.
// A topic name is non-empty dot-separated segments of printable,
// non-space characters without '*', '>' or '#' (kept for patterns), for
// example "orders.created".
func (b *Broker[T]) CreateTopic(name string) error {
	if err := validTopic(name); err != nil {
		return err
	}
	b.mu.Lock()
	if err := b.usableLocked("create topic", name); err != nil {
		b.mu.Unlock()
		return err
	}
	if _, ok := b.topics[name]; ok {
		b.mu.Unlock()
		return nil
	}
	t := b.newTopicEntry(name)
	b.topics[name] = t
	b.rebuildLocked(t)
	b.topicCreatedLocked()
	b.dur.createdTopic(name)
	b.mu.Unlock()
	return b.commit()
}

// DeleteTopic deletes a topic and closes its subscriptions: their blocked
// Polls return queue.ErrClosed, and their messages are discarded. Dead
// letters they made stay in the store. Wildcard subscriptions that matched
// the topic stay open (they keep what they hold).
func (b *Broker[T]) DeleteTopic(name string) error {
	b.mu.Lock()
	t, err := b.topicLocked("delete topic", name)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	delete(b.topics, name)
	t.dedup.stop()
	b.publishTopicsLocked()
	b.dur.deletedTopic(name)
	subs := t.exact
	b.mu.Unlock()
	for _, s := range subs {
		b.closeSub(s)
	}
	return b.commit()
}

// publishTopicsLocked replaces the copy of the topics that a broker from
// New publishes with.
func (b *Broker[T]) publishTopicsLocked() {
	if b.lockFree {
		m := maps.Clone(b.topics)
		b.published.Store(&m)
		b.stale.Store(false)
	}
}

// topicCreatedLocked makes the copy of the topics again after a topic was
// created, or leaves the new topic to the locked path for now (see
// Broker.published).
func (b *Broker[T]) topicCreatedLocked() {
	if !b.lockFree {
		return
	}
	if cur := b.published.Load(); cur == nil || len(b.topics)-len(*cur) > len(*cur)/16 {
		b.publishTopicsLocked()
		return
	}
	b.stale.Store(true)
}

// refreshTopics makes the copy of the topics again if a topic is missing
// from it and no one holds mu: a publish to a topic created since the copy
// calls it, so that the next ones find the topic without a lock.
func (b *Broker[T]) refreshTopics() {
	if b.stale.Load() && b.mu.TryLock() {
		if b.stale.Load() && !b.closed {
			b.publishTopicsLocked()
		}
		b.mu.Unlock()
	}
}

// closeSub closes a subscription that is no longer reachable and, in a
// durable broker, records that it is gone. It records after closing, so
// that no record of its queue comes after.
func (b *Broker[T]) closeSub(s *Subscription[T]) {
	s.q.Close()
	b.dur.unsubscribed(s)
}

// Topics returns the names of the topics, sorted (nil after Close).
func (b *Broker[T]) Topics() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if len(b.topics) == 0 {
		return nil
	}
	names := make([]string, 0, len(b.topics))
	for n := range b.topics {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Subscriptions returns the names of the subscriptions made to topic by
// name (not those by wildcard pattern), sorted.
func (b *Broker[T]) Subscriptions(topic string) ([]string, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t, err := b.topicLocked("subscriptions", topic)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(t.exact))
	for _, s := range t.exact {
		names = append(names, s.name)
	}
	slices.Sort(names)
	return names, nil
}

// AllSubscriptions returns every subscription of the broker, those made
// by wildcard pattern included, sorted by topic (or pattern) and then by
// name: what a console lists. It is empty after Close.
func (b *Broker[T]) AllSubscriptions() []*Subscription[T] {
	b.mu.RLock()
	subs := b.allLocked()
	b.mu.RUnlock()
	slices.SortFunc(subs, func(x, y *Subscription[T]) int {
		return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.name, y.name))
	})
	return subs
}

func (b *Broker[T]) topicLocked(op, name string) (*topicEntry[T], error) {
	if err := b.usableLocked(op, name); err != nil {
		return nil, err
	}
	t, ok := b.topics[name]
	if !ok {
		if err := validTopic(name); err != nil { // only on a miss: the hot path pays nothing
			return nil, fmt.Errorf("%s %q: %w", op, name, err)
		}
		return nil, fmt.Errorf("%s %q: %w", op, name, ErrTopicNotFound)
	}
	return t, nil
}

// usableLocked returns an error for a zero Broker (one not made by New or
// Open) or a closed one.
func (b *Broker[T]) usableLocked(op, name string) error {
	switch {
	case b.topics == nil && !b.closed:
		return fmt.Errorf("%s %q: %w", op, name, errZeroBroker)
	case b.closed:
		return fmt.Errorf("%s %q: %w", op, name, queue.ErrClosed)
	}
	return nil
}

// errZeroBroker is what a zero Broker's calls return.
var errZeroBroker = backend.Invalid("zero Broker: make one with broker.New or broker.Open")

// validName checks a subscription or topic name: non-empty UTF-8 of at
// most 255 bytes, without spaces or control characters.
func validName(kind, name string) error {
	switch {
	case name == "":
		return backend.Invalid("empty %s name", kind)
	case len(name) > 255:
		return backend.Invalid("%s name of %d bytes, at most 255", kind, len(name))
	case !utf8.ValidString(name):
		return backend.Invalid("%s name %q is not UTF-8", kind, name)
	case strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return backend.Invalid("%s name %q has a space or control character", kind, name)
	}
	return nil
}

// validSub checks a subscription's name and its topic or pattern.
func validSub(topic, name string) error {
	if err := validName("subscription", name); err != nil {
		return err
	}
	if isPattern(topic) {
		return validPattern(topic)
	}
	return validTopic(topic)
}

func validTopic(name string) error {
	if err := validName("topic", name); err != nil {
		return err
	}
	if strings.ContainsAny(name, "*>#") {
		return backend.Invalid("topic name %q has a wildcard character (*, > or #)", name)
	}
	if slices.Contains(strings.Split(name, "."), "") {
		return backend.Invalid("topic name %q has an empty dot-separated segment", name)
	}
	return nil
}
