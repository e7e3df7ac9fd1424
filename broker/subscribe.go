package broker

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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
// On a durable broker, the first Subscribe of a subscription that Open
// recovered binds it as it was stored: the options it gives are compared
// with the stored settings, not with the broker's defaults, and what they
// do not name stays as stored. One that differs makes Subscribe fail with
// a *ConfigMismatchError (matching ErrConfigMismatch) and change nothing,
// unless WithUpdate asks for the change, which is then stored. A filter is
// not stored, only that there was one: give it again (adding or dropping
// one is an update).
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
		if o.apply == nil {
			return nil, fmt.Errorf("Subscribe: option %d: %w", i, errZeroOption)
		}
		o.apply(&cfg)
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
			return b.claim(s, opts, cfg.update || b.defs.update) // unlocks
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
	s.q, s.b = q, b
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

// claim binds a subscription recovered by Open to the Subscribe that
// declares it again: as stored, with the explicit options opts on top. An
// option that differs from the stored setting is a *ConfigMismatchError,
// unless update. Called with b.mu held; unlocks it.
func (b *Broker[T]) claim(s *Subscription[T], opts []SubscribeOption, update bool) (*Subscription[T], error) {
	// Filters are not stored: the broker's default one, if any, applies as
	// it would to a new subscription.
	cfg := subConfig{queue: s.spec.config(), deadLetters: s.spec.deadLetters, filter: b.defs.filter}
	for _, o := range opts {
		o.apply(&cfg) // not zero: checked by Subscribe
	}
	var filter func(queue.Message[T]) bool
	if cfg.filter != nil {
		filter, _ = cfg.filter.(func(queue.Message[T]) bool) // checked by Subscribe
	}
	qc := cfg.queue
	qc.Name, qc.Clock = s.name, b.now
	spec := specOf(qc, cfg.deadLetters, filter != nil)
	if diffs := specDiffs(s.spec, spec); len(diffs) > 0 && !update {
		b.mu.Unlock()
		return nil, &ConfigMismatchError{Topic: s.topic, Subscription: s.name, Diffs: diffs}
	}
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

// ConfigMismatchError is the error Subscribe returns when it declares a
// subscription that a durable broker recovered, with an explicit option
// that differs from the stored setting, without WithUpdate. Nothing
// changed: the subscription stays as stored, to be declared again. It
// matches ErrConfigMismatch.
type ConfigMismatchError struct {
	Topic, Subscription string
	Diffs               []Diff // the settings that differ, at least one
}

// Diff is one setting that differs between a stored subscription and the
// options of the Subscribe that declares it.
type Diff struct {
	Setting   string // the queue.Config field, "DeadLetterTopic" or "Filter"
	Option    string // the option that sets it, e.g. "WithMaxAttempts"
	Stored    string // the stored value
	Requested string // the value the options ask for
}

// Error says what differs and what to do.
func (e *ConfigMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "subscribe %q to %q: %v:", e.Subscription, e.Topic, ErrConfigMismatch)
	for i, d := range e.Diffs {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s is %s, %s asks for %s", d.Setting, d.Stored, d.Option, d.Requested)
	}
	b.WriteString(" (give the stored options, or none, or add WithUpdate to change them)")
	return b.String()
}

// Is reports whether target is ErrConfigMismatch.
func (e *ConfigMismatchError) Is(target error) bool { return target == ErrConfigMismatch }

// specDiffs lists the settings in which want differs from stored.
func specDiffs(stored, want subSpec) []Diff {
	var diffs []Diff
	add := func(setting, option string, s, w any) {
		if s != w {
			diffs = append(diffs, Diff{Setting: setting, Option: option, Stored: fmt.Sprint(s), Requested: fmt.Sprint(w)})
		}
	}
	add("VisibilityTimeout", "WithVisibilityTimeout", stored.visibility, want.visibility)
	add("MaxAttempts", "WithMaxAttempts", stored.maxAttempts, want.maxAttempts)
	type retry struct {
		initial, max time.Duration
		mult, jitter float64
		noBackoff    bool
	}
	rs := retry{stored.retryInitial, stored.retryMax, stored.retryMult, stored.retryJitter, stored.noBackoff}
	rw := retry{want.retryInitial, want.retryMax, want.retryMult, want.retryJitter, want.noBackoff}
	if rs != rw {
		diffs = append(diffs, Diff{Setting: "Retry", Option: "WithRetry",
			Stored: retryText(stored.config().Retry), Requested: retryText(want.config().Retry)})
	}
	add("MaxQueue", "WithMaxQueue", stored.maxQueue, want.maxQueue)
	add("Overflow", "WithOverflow", stored.overflow, want.overflow)
	add("MaxInFlight", "WithMaxInFlight", stored.maxInFlight, want.maxInFlight)
	add("TTL", "WithDefaultTTL", stored.ttl, want.ttl)
	add("RateLimit", "WithRateLimit", stored.rate, want.rate)
	add("KeyRateLimit", "WithKeyRateLimit", stored.keyRate, want.keyRate)
	add("KeyConcurrency", "WithKeyConcurrency", max(stored.keyConcurrency, 1), max(want.keyConcurrency, 1))
	add("FairKeys", "WithFairKeys", stored.fairKeys, want.fairKeys)
	if stored.deadLetters != want.deadLetters {
		diffs = append(diffs, Diff{Setting: "DeadLetterTopic", Option: "WithDeadLetterTopic",
			Stored: strconv.Quote(stored.deadLetters), Requested: strconv.Quote(want.deadLetters)})
	}
	if stored.filtered != want.filtered {
		have := map[bool]string{true: "a filter", false: "none"}
		diffs = append(diffs, Diff{Setting: "Filter", Option: "WithFilter", Stored: have[stored.filtered], Requested: have[want.filtered]})
	}
	return diffs
}

func retryText(p queue.RetryPolicy) string {
	if p.NoBackoff {
		return "no backoff"
	}
	return fmt.Sprintf("initial %v, max %v, multiplier %v, jitter %v", p.Initial, p.Max, p.Multiplier, p.Jitter)
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
