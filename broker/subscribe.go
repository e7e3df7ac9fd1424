package broker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// Subscribe creates the subscription name on topic, with its own queue,
// and returns it. Options override the broker's defaults. Every
// subscription gets every message published to the topic after it was
// created (that its filter accepts); competing consumers share one
// subscription (see Subscription). A second Subscribe with the same
// (topic, name) returns ErrAlreadySubscribed; a missing topic,
// ErrTopicNotFound.
//
// topic may be a wildcard pattern over dot-separated topic names (NATS
// style): '*' matches one segment and '>' (or '#') one or more trailing
// segments, so "orders.*" gets "orders.created" and "orders.>" gets
// "orders.eu.created" too. A pattern needs no topic to exist, and matches
// topics created later. Each message reaches a wildcard subscription once,
// through its own topic; Unsubscribe and Subscription take the pattern.
func (b *Broker[T]) Subscribe(topic, name string, opts ...SubscribeOption) (*Subscription[T], error) {
	if err := validName("subscription", name); err != nil {
		return nil, err
	}
	pattern := isPattern(topic)
	if pattern {
		if err := validPattern(topic); err != nil {
			return nil, err
		}
	}
	cfg := b.defs
	for i, o := range opts {
		if o == nil {
			return nil, core.Invalid("Subscribe: option %d is nil", i)
		}
		o.applySub(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	var filter func(queue.Message[T]) bool
	if cfg.filter != nil {
		f, ok := cfg.filter.(func(queue.Message[T]) bool)
		if !ok {
			return nil, filterMismatch[T](cfg.filter)
		}
		filter = f
	}
	qc := cfg.queue
	qc.Name = name
	qc.Clock = b.now
	if err := core.ValidateConfig(qc); err != nil {
		return nil, err
	}
	dlTopic := cfg.deadLetters
	spec := specOf(qc, dlTopic, filter != nil)

	b.mu.Lock()
	var t *topicEntry[T]
	if pattern {
		if b.closed {
			b.mu.Unlock()
			return nil, fmt.Errorf("subscribe %q to %q: %w", name, topic, queue.ErrClosed)
		}
	} else {
		var err error
		if t, err = b.topicLocked("subscribe", topic); err != nil {
			b.mu.Unlock()
			return nil, err
		}
	}
	if s := b.findLocked(topic, name); s != nil {
		if s.recovered {
			return b.claim(s, qc, spec, filter) // unlocks
		}
		b.mu.Unlock()
		return nil, fmt.Errorf("subscribe %q to %q: %w", name, topic, ErrAlreadySubscribed)
	}
	s := &Subscription[T]{topic: topic, name: name, spec: spec, jid: b.dur.newSubID()}
	if err := b.attachLocked(s, t, qc, filter, dlTopic); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	b.dur.subscribed(s)
	b.mu.Unlock()
	if err := b.commit(); err != nil {
		return nil, err
	}
	return s, nil
}

// attachLocked gives s its queue and adds it to its topic (t) or, for a
// pattern (t nil), to the patterns.
func (b *Broker[T]) attachLocked(s *Subscription[T], t *topicEntry[T], qc queue.Config, filter func(queue.Message[T]) bool, dlTopic string) error {
	onDead := func(dl core.Letter[T]) { b.deadLetter(s, dl) }
	q, err := b.dur.newQueue(s, qc, onDead)
	if err != nil {
		return err
	}
	s.q = q
	if filter != nil {
		s.filter.Store(&filter)
	}
	if dlTopic != "" {
		s.dlq.Store(&dlTopic)
	}
	if t == nil {
		b.patterns[s.topic] = append(b.patterns[s.topic], s)
		b.trie.insert(strings.Split(s.topic, "."), s)
		for _, t := range b.topics {
			b.rebuildLocked(t)
		}
		return nil
	}
	t.exact = append(slices.Clip(t.exact), s)
	b.rebuildLocked(t)
	return nil
}

// claim binds a subscription recovered by Open to the options of the
// Subscribe that declares it again. Called with b.mu held; unlocks it.
func (b *Broker[T]) claim(s *Subscription[T], qc queue.Config, spec subSpec, filter func(queue.Message[T]) bool) (*Subscription[T], error) {
	s.recovered = false
	changed := spec != s.spec
	b.mu.Unlock()
	// Always: the spec leaves out what is not stored (RetryPolicy.Rand).
	if err := s.q.Reconfigure(qc); err != nil { // only ErrClosed: qc is valid
		return nil, err
	}
	if filter != nil {
		s.filter.Store(&filter)
	} else {
		s.filter.Store(nil)
	}
	if spec.deadLetters != "" {
		s.dlq.Store(&spec.deadLetters)
	} else {
		s.dlq.Store(nil)
	}
	if !changed {
		return s, nil
	}
	b.mu.Lock()
	s.spec = spec
	b.dur.subscribed(s)
	b.mu.Unlock()
	if err := b.commit(); err != nil {
		return nil, err
	}
	return s, nil
}

// rebuildLocked recomputes a topic's subscription snapshot: its own
// subscriptions, then the wildcard ones the trie matches. The new slice
// replaces the old, which Publish calls may still be reading.
func (b *Broker[T]) rebuildLocked(t *topicEntry[T]) {
	subs := slices.Clone(t.exact)
	if len(b.patterns) > 0 {
		subs = b.trie.match(strings.Split(t.name, "."), subs)
	}
	t.subs.Store(&subs)
}

// findLocked returns the subscription name on topic (or pattern), or nil.
func (b *Broker[T]) findLocked(topic, name string) *Subscription[T] {
	var subs []*Subscription[T]
	if isPattern(topic) {
		subs = b.patterns[topic]
	} else if t := b.topics[topic]; t != nil {
		subs = t.exact
	}
	for _, s := range subs {
		if s.name == name {
			return s
		}
	}
	return nil
}

// Subscription returns the existing subscription name on topic, for
// competing consumers that share it. A missing one is ErrSubscriptionNotFound
// (ErrTopicNotFound if the topic is missing).
func (b *Broker[T]) Subscription(topic, name string) (*Subscription[T], error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if !isPattern(topic) {
		if _, err := b.topicLocked("subscription", topic); err != nil {
			return nil, err
		}
	} else if err := b.usableLocked("subscription on", topic); err != nil {
		return nil, err
	}
	if s := b.findLocked(topic, name); s != nil {
		return s, nil
	}
	if err := validName("subscription", name); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("subscription %q on %q: %w", name, topic, ErrSubscriptionNotFound)
}

// Unsubscribe removes a subscription and closes it: its blocked Polls
// return queue.ErrClosed and its messages are discarded. It may be called
// from inside a consumer of that subscription.
func (b *Broker[T]) Unsubscribe(topic, name string) error {
	b.mu.Lock()
	pattern := isPattern(topic)
	var t *topicEntry[T]
	if pattern {
		if err := b.usableLocked("unsubscribe from", topic); err != nil {
			b.mu.Unlock()
			return err
		}
	} else {
		var err error
		if t, err = b.topicLocked("unsubscribe", topic); err != nil {
			b.mu.Unlock()
			return err
		}
	}
	s := b.findLocked(topic, name)
	if s == nil {
		b.mu.Unlock()
		if err := validName("subscription", name); err != nil {
			return err
		}
		return fmt.Errorf("unsubscribe %q from %q: %w", name, topic, ErrSubscriptionNotFound)
	}
	without := func(l []*Subscription[T]) []*Subscription[T] {
		return slices.DeleteFunc(slices.Clone(l), func(x *Subscription[T]) bool { return x == s })
	}
	if pattern {
		b.patterns[topic] = without(b.patterns[topic])
		if len(b.patterns[topic]) == 0 {
			delete(b.patterns, topic)
		}
		b.trie.remove(strings.Split(topic, "."), s)
		for _, t := range b.topics {
			b.rebuildLocked(t)
		}
	} else {
		t.exact = without(t.exact)
		b.rebuildLocked(t)
	}
	b.mu.Unlock()
	b.closeSub(s)
	return b.commit()
}
