// Package broker is leasebus's front door: topics, subscriptions, publish
// fan-out, filters, the dead-letter store and redrive.
//
// Publish stores one envelope and offers it to every subscription of the
// topic; each subscription has its own bounded queue that consumers pull
// from with Poll and settle with Ack, Nack, Fail, Extend or Release. See
// the leasebus package documentation for the delivery semantics.
package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// Errors returned by this package (wrapped with context; match them with
// errors.Is). Invalid arguments match queue.ErrInvalidArgument, and calls
// after Close match queue.ErrClosed.
var (
	// ErrTopicNotFound: no topic has that name (Publish, Subscribe, DeleteTopic, …).
	ErrTopicNotFound = errors.New("broker: topic not found")
	// ErrSubscriptionNotFound: the topic (or pattern) has no subscription of that name.
	ErrSubscriptionNotFound = errors.New("broker: subscription not found")
	// ErrAlreadySubscribed: Subscribe with a (topic, name) that exists; use
	// Broker.Subscription to share it between competing consumers.
	ErrAlreadySubscribed = errors.New("broker: already subscribed")
	// ErrDedupFull: a publish with a new dedup ID found the topic already
	// remembering as many IDs as WithDedupLimit allows, all inside their
	// window. Nothing was published. Forgetting one early would let its
	// duplicate through, so the broker refuses instead: raise the limit,
	// or shorten the window.
	ErrDedupFull = errors.New("broker: too many dedup IDs inside their window")
	// ErrLocked: Open found its directory held by another open broker, in
	// this process or another.
	ErrLocked = errors.New("broker: directory is locked by another open broker")
	// ErrCorrupt: Open found a journal it cannot read: a damaged record
	// with whole records after it, a record that passed its checksum but
	// does not decode, a payload the codec refuses, or a journal of another
	// format or version. The error is a *CorruptError, which says where.
	ErrCorrupt = errors.New("broker: journal cannot be read")
)

// Broker is an in-process publish/subscribe broker whose subscriptions are
// pulled. T is the payload type (use any for mixed payloads). It is safe
// for concurrent use. Create one with New and Close it when done.
type Broker[T any] struct {
	clock       clock.Clock
	defs        subConfig // subscription defaults
	dead        deadLetters[T]
	ids         *idPool
	dedupWindow time.Duration
	dedupLimit  int
	store       *store[T] // the journal of a broker from Open; nil in memory
	// active counts the calls of a durable broker that may append to its
	// journal outside a queue's lock (publish, redrive, dead-letter
	// routing): Close waits for them before it closes the journal, so none
	// of their records is dropped. Add only under mu, while not closed.
	active sync.WaitGroup

	mu       sync.RWMutex // guards everything below
	closed   bool
	topics   map[string]*topicEntry[T]
	patterns map[string][]*Subscription[T] // wildcard subscriptions by pattern
	trie     trie[T]                       // the same, by segment
}

type topicEntry[T any] struct {
	name  string
	exact []*Subscription[T] // subscribed to this topic by name
	// subs is exact plus the matching wildcard subscriptions. It is
	// copy-on-write under Broker.mu: Publish reads a snapshot lock-free.
	subs  []*Subscription[T]
	dedup dedup[T]
}

// New returns a broker with no topics. Options set the clock, the
// dead-letter store's bound and every subscription's defaults. An invalid
// option is an error matching queue.ErrInvalidArgument.
func New[T any](opts ...Option) (*Broker[T], error) {
	b, cfg, err := newBroker[T](opts)
	if err != nil {
		return nil, err
	}
	if cfg.durableOnly != "" {
		return nil, core.Invalid("New: %s is an option of Open (a durable broker)", cfg.durableOnly)
	}
	return b, nil
}

// newBroker is New without the check that every option is New's.
func newBroker[T any](opts []Option) (*Broker[T], config, error) {
	cfg := config{deadLetterLimit: DefaultDeadLetterLimit, dedupWindow: DefaultDedupWindow, dedupLimit: DefaultDedupLimit,
		compactMin: DefaultCompactMin}
	for i, o := range opts {
		if o == nil {
			return nil, cfg, core.Invalid("option %d is nil", i)
		}
		o.applyBroker(&cfg)
	}
	if cfg.sub.err != nil {
		return nil, cfg, cfg.sub.err
	}
	if cfg.clock == nil {
		cfg.clock = clock.New()
	}
	if err := cfg.sub.queue.Validate(); err != nil {
		return nil, cfg, err
	}
	if cfg.sub.filter != nil {
		if _, ok := cfg.sub.filter.(func(queue.Message[T]) bool); !ok {
			return nil, cfg, filterMismatch[T](cfg.sub.filter)
		}
	}
	b := &Broker[T]{
		clock:       cfg.clock,
		defs:        cfg.sub,
		ids:         newIDPool(),
		dedupWindow: cfg.dedupWindow,
		dedupLimit:  cfg.dedupLimit,
		topics:      make(map[string]*topicEntry[T]),
		patterns:    make(map[string][]*Subscription[T]),
	}
	b.dead.limit = cfg.deadLetterLimit
	return b, cfg, nil
}

func filterMismatch[T any](f any) error {
	var zero T
	return core.Invalid("WithFilter: %T does not take the broker's queue.Message[%T]", f, any(zero))
}

// Clock returns the broker's clock.
func (b *Broker[T]) Clock() clock.Clock { return b.clock }

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
	t := &topicEntry[T]{name: name}
	b.topics[name] = t
	b.rebuildLocked(t)
	if b.store != nil {
		b.store.record(func(e *enc) { e.start(recTopic).str(name) })
	}
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
	if b.store != nil {
		b.store.record(func(e *enc) { e.start(recDelTopic).str(name) })
	}
	subs := t.exact
	b.mu.Unlock()
	for _, s := range subs {
		b.closeSub(s)
	}
	return b.commit()
}

// closeSub closes a subscription that is no longer reachable and, in a
// durable broker, records that it is gone. It records after closing, so
// that no record of its queue comes after.
func (b *Broker[T]) closeSub(s *Subscription[T]) {
	s.q.Close()
	if b.store != nil {
		b.store.record(func(e *enc) { e.start(recUnsub).sub(s.jid) })
	}
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
	qc.Clock = b.clock
	if err := qc.Validate(); err != nil {
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
	s := &Subscription[T]{topic: topic, name: name, spec: spec}
	if b.store != nil {
		s.jid = b.store.nextSub
		b.store.nextSub++
	}
	if err := b.attachLocked(s, t, qc, filter, dlTopic); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	if b.store != nil {
		b.store.record(func(e *enc) { e.start(recSub).sub(s.jid).strs(topic, name).spec(spec) })
	}
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
	var q *core.Queue[T]
	var err error
	if b.store != nil {
		q, err = core.NewRecorded(qc, onDead, core.Recorder[T](&subRec[T]{b: b, st: b.store, id: s.jid, topic: s.topic}))
	} else {
		q, err = core.New(qc, onDead)
	}
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
	b.store.record(func(e *enc) { e.start(recSub).sub(s.jid).strs(s.topic, s.name).spec(spec) })
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
	t.subs = subs
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

// Publish publishes payload to topic and returns the message as stored
// (its ID and PublishedAt filled in). The envelope is stored once and
// offered to every subscription of the topic whose filter accepts it; a
// topic without subscriptions accepts and drops it.
//
// A subscription that is full applies its overflow policy. Under
// OverflowReject or OverflowBlock a full subscription can refuse the
// message while others accept it: Publish then returns the message and an
// error naming each refusing subscription, matching queue.ErrQueueFull;
// errors.As with a *queue.FullError gives a refusing subscription and its
// limit (errors.Join keeps each: use a loop over Unwrap() []error for all).
// A missing topic is ErrTopicNotFound; after Close, queue.ErrClosed. A
// Publish racing Close returns queue.ErrClosed unless every subscription
// took the message first: a nil error means that every subscription that
// accepted the message holds it (on a durable broker, in the journal).
func (b *Broker[T]) Publish(ctx context.Context, topic string, payload T, opts ...PublishOption) (queue.Message[T], error) {
	if ctx == nil {
		return queue.Message[T]{}, core.Invalid("Publish: nil context")
	}
	var pc publishConfig
	for _, o := range opts {
		if err := pc.apply(o); err != nil {
			return queue.Message[T]{}, err
		}
	}
	if pc.dedupIDs != nil {
		return queue.Message[T]{}, core.Invalid("Publish: WithDedupIDs is for PublishBatch (WithDedupID names one message)")
	}
	m, _, err := b.publish(ctx, topic, payload, &pc)
	return m, err
}

// PublishBatch publishes each payload to topic, in order, as Publish would
// with the same options, and returns the messages as stored. The batch
// reads the clock once (every message has the same PublishedAt) and
// snapshots the topic's subscriptions once; on a durable broker it waits
// for the disk once, which under SyncAlways makes it many times faster
// than as many Publish calls. A payload some subscription refuses
// (OverflowReject, OverflowBlock) is still returned, and the error joins
// each refusal. WithDedupIDs gives each payload its dedup ID (a duplicate
// returns the original message in its place); WithDedupID is invalid here
// (one ID cannot name many messages). An empty batch returns nil.
func (b *Broker[T]) PublishBatch(ctx context.Context, topic string, payloads []T, opts ...PublishOption) ([]queue.Message[T], error) {
	if ctx == nil {
		return nil, core.Invalid("PublishBatch: nil context")
	}
	var pc publishConfig
	for _, o := range opts {
		if err := pc.apply(o); err != nil {
			return nil, err
		}
	}
	ids := pc.dedupIDs
	switch {
	case pc.dedupID != "":
		return nil, core.Invalid("PublishBatch: WithDedupID cannot name a batch (WithDedupIDs names each message)")
	case ids != nil && len(ids) != len(payloads):
		return nil, core.Invalid("PublishBatch: %d dedup IDs for %d payloads", len(ids), len(payloads))
	}
	t, subs, err := b.lookup(topic)
	if err != nil {
		return nil, err
	}
	defer b.leave()
	if len(payloads) == 0 {
		return nil, nil
	}
	now := b.clock.Now()
	ms := make([]queue.Message[T], len(payloads))
	var errs []error
	for i, p := range payloads {
		if ids != nil {
			pc.dedupID = ids[i]
		}
		m, _, err := b.publishTo(ctx, t, subs, p, &pc, now)
		ms[i] = m
		if err != nil {
			errs = append(errs, fmt.Errorf("message %d: %w", i, err))
		}
	}
	if b.store != nil && len(subs) > 0 {
		if err := b.commit(); err != nil {
			for i, id := range ids { // not stored after all
				t.dedup.forgetMessage(id, ms[i])
			}
			errs = append(errs, err)
		}
	}
	return ms, errors.Join(errs...)
}

// lookup returns a topic and its subscriptions as of now. On a durable
// broker, a nil error means the call is counted in b.active: the caller
// calls b.leave when its records are appended and committed.
func (b *Broker[T]) lookup(topic string) (*topicEntry[T], []*Subscription[T], error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t, err := b.topicLocked("publish", topic)
	if err != nil {
		return nil, nil, err
	}
	if b.store != nil {
		b.active.Add(1)
	}
	return t, t.subs, nil
}

// enter reports whether the broker is open and, on a durable broker, then
// counts the call in b.active.
func (b *Broker[T]) enter() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return false
	}
	if b.store != nil {
		b.active.Add(1)
	}
	return true
}

// leave ends a call that lookup or enter counted.
func (b *Broker[T]) leave() {
	if b.store != nil {
		b.active.Done()
	}
}

// publish is Publish after the options are checked; it also returns how
// many subscriptions accepted the message.
func (b *Broker[T]) publish(ctx context.Context, topic string, payload T, pc *publishConfig) (queue.Message[T], int, error) {
	t, subs, err := b.lookup(topic)
	if err != nil {
		return queue.Message[T]{}, 0, err
	}
	defer b.leave()
	m, accepted, err := b.publishTo(ctx, t, subs, payload, pc, b.clock.Now())
	if b.store != nil && len(subs) > 0 && (err == nil || accepted > 0) {
		if cerr := b.commit(); cerr != nil {
			if pc.dedupID != "" && err == nil {
				t.dedup.forgetMessage(pc.dedupID, m)
			}
			err = errors.Join(err, cerr)
		}
	}
	return m, accepted, err
}

// publishTo offers one message to subs, without committing a durable
// broker's records (the caller does, once).
func (b *Broker[T]) publishTo(ctx context.Context, t *topicEntry[T], subs []*Subscription[T], payload T, pc *publishConfig, now time.Time) (queue.Message[T], int, error) {
	m := &queue.Message[T]{
		ID:          b.ids.newID(),
		Topic:       t.name,
		Key:         pc.key,
		Payload:     payload,
		Priority:    pc.priority,
		Headers:     queue.NewHeaders(pc.headers),
		PublishedAt: now,
	}
	var opts [3]core.OfferOption
	offer := opts[:0]
	if pc.ttl > 0 {
		offer = append(offer, core.WithTTL(pc.ttl))
	}
	var env *envBuf
	if b.store != nil { // encoded once, logged by every subscription, committed once
		var err error
		env, err = b.store.encode(m)
		if err != nil {
			return queue.Message[T]{}, 0, fmt.Errorf("publish to %q: %w", t.name, err)
		}
		defer b.store.recycle(env)
		offer = append(offer, core.WithNote(env), core.WithDeferredCommit())
	}
	var reserved *dedupEntry[T]
	if pc.dedupID != "" {
		e, orig, dup, err := t.dedup.reserve(ctx, pc.dedupID, *m, b.dedupWindow, b.dedupLimit)
		switch {
		case err != nil:
			return queue.Message[T]{}, 0, fmt.Errorf("publish to %q: %w", t.name, err)
		case dup:
			return orig, 0, nil
		}
		reserved = e
	}
	accepted := 0
	var errs []error
	for _, s := range subs {
		if !s.accepts(m) {
			continue
		}
		switch err := s.q.Offer(ctx, m, pc.delay, offer...); {
		case err == nil:
			accepted++
		case errors.Is(err, queue.ErrClosed) && !b.isClosed():
			// Unsubscribed meanwhile: simply gone. (Closed with the
			// broker, it is a refusal: Close won.)
		default:
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	switch {
	case reserved == nil:
	case err != nil:
		t.dedup.forget(reserved)
	case b.store != nil: // after the message's own records: a crash between loses only the dedup
		t.dedup.confirm(reserved, b.store, t.name, env.b, accepted > 0)
	default:
		t.dedup.confirm(reserved, nil, "", nil, false)
	}
	return *m, accepted, err
}

// Headers added to a dead letter published to a dead-letter topic
// (WithDeadLetterTopic).
const (
	HeaderDeadLetterReason       = "leasebus-dead-letter-reason"       // queue.Reason.String()
	HeaderDeadLetterAttempts     = "leasebus-dead-letter-attempts"     // decimal
	HeaderDeadLetterLastError    = "leasebus-dead-letter-last-error"   // may be empty
	HeaderDeadLetterSubscription = "leasebus-dead-letter-subscription" // the source subscription
	HeaderDeadLetterTopic        = "leasebus-dead-letter-topic"        // the source topic (or pattern)
	HeaderDeadLetterMessageID    = "leasebus-dead-letter-message-id"   // the original message ID
	HeaderDeadLetterAt           = "leasebus-dead-letter-at"           // RFC 3339 with nanoseconds
)

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
		if _, again := dl.Message.Headers.Lookup(HeaderDeadLetterReason); !again && b.route(s, *p, dl) {
			return
		}
	}
	b.dead.add(srcTopic, s.jid, dl)
	if b.store != nil {
		b.store.landed(s.jid, dl.Message.ID)
	}
}

// route publishes a dead letter to its subscription's dead-letter topic and
// reports whether a subscription there took it.
func (b *Broker[T]) route(s *Subscription[T], dlTopic string, dl core.Letter[T]) bool {
	h := dl.Message.Headers.Map()
	h[HeaderDeadLetterReason] = dl.Reason.String()
	h[HeaderDeadLetterAttempts] = strconv.Itoa(dl.Attempts)
	h[HeaderDeadLetterLastError] = dl.LastError
	h[HeaderDeadLetterSubscription] = dl.Subscription
	h[HeaderDeadLetterTopic] = s.topic
	h[HeaderDeadLetterMessageID] = dl.Message.ID.String()
	h[HeaderDeadLetterAt] = dl.At.Format(time.RFC3339Nano)
	pc := publishConfig{priority: dl.Message.Priority, headers: h, key: dl.Message.Key}
	// A done context: a full OverflowBlock subscription on the
	// dead-letter topic refuses at once rather than stall the consumer
	// whose call dead-lettered the message.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, n, err := b.publish(ctx, dlTopic, dl.Message.Payload, &pc); err != nil || n == 0 {
		return false
	}
	if b.store != nil {
		b.store.forget(s.jid, dl.Message.ID)
		_ = b.commit() // an error sticks, and the next call that records returns it
	}
	return true
}

// DeadLetters returns the dead letters the broker holds, oldest first,
// after settling every subscription at the clock's now (so right after a
// mock clock moves, the list is exact).
func (b *Broker[T]) DeadLetters() []queue.DeadLetter[T] {
	b.settleAll()
	return b.dead.list()
}

// DeadLettersDropped returns how many dead letters the store dropped,
// oldest first, because it was full (see WithDeadLetterLimit).
func (b *Broker[T]) DeadLettersDropped() uint64 {
	_, dropped := b.dead.stats()
	return dropped
}

// Redrive puts the dead letters for which match returns true back on the
// subscription that dead-lettered them, as fresh messages: attempts reset,
// place (priority and publish order) kept. It returns how many it put
// back. A letter whose subscription is gone or full stays in the store,
// and Redrive's error names it (matching ErrSubscriptionNotFound or
// queue.ErrQueueFull). match runs without any lock held.
func (b *Broker[T]) Redrive(match func(queue.DeadLetter[T]) bool) (int, error) {
	if match == nil {
		return 0, core.Invalid("Redrive: nil func")
	}
	if !b.enter() {
		return 0, fmt.Errorf("redrive: %w", queue.ErrClosed)
	}
	defer b.leave()
	b.settleAll()
	var chosen []storedLetter[T]
	for _, it := range b.dead.snapshot() {
		if match(it.dl.DeadLetter) {
			chosen = append(chosen, it)
		}
	}
	n := 0
	var errs []error
	for _, it := range chosen {
		if !b.dead.take(it.id) {
			continue // redriven or dropped meanwhile
		}
		s, err := b.Subscription(it.topic, it.dl.Subscription)
		if err == nil {
			err = s.q.Redrive(it.dl)
		}
		if err != nil {
			b.dead.putBack(it)
			errs = append(errs, fmt.Errorf("redrive message %v: %w", it.dl.Message.ID, err))
			continue
		}
		if b.store != nil && s.jid != it.sub { // back on another subscription of that name
			b.store.forget(it.sub, it.dl.Message.ID)
		}
		b.dead.done(it.id)
		n++
	}
	if err := b.commit(); err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// Close closes the broker and every subscription: blocked Polls and
// publishers return queue.ErrClosed, as does every later call. A broker
// from New discards the messages it still holds; a durable one waits for
// the calls under way to write their records, then writes and fsyncs its
// journal (in every SyncMode), so that what they hold comes back at the
// next Open, and returns the journal's error, if any. DeadLetters stays
// readable. Close twice returns nil. A filter must not call Close: Close
// waits for the publish that runs it.
func (b *Broker[T]) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	subs := b.allLocked()
	b.topics = map[string]*topicEntry[T]{}
	b.patterns = map[string][]*Subscription[T]{}
	b.trie = trie[T]{}
	b.mu.Unlock()
	for _, s := range subs {
		s.q.Close()
	}
	if b.store != nil { // the messages stay in the journal for the next Open
		b.active.Wait() // the calls under way append their last records
		return b.store.j.Close()
	}
	return nil
}

// settleAll applies everything due on every subscription.
func (b *Broker[T]) settleAll() {
	b.mu.RLock()
	subs := b.allLocked()
	b.mu.RUnlock()
	for _, s := range subs {
		s.q.Settle()
	}
}

// allLocked returns every subscription, by name and by pattern.
func (b *Broker[T]) allLocked() []*Subscription[T] {
	var subs []*Subscription[T]
	for _, t := range b.topics {
		subs = append(subs, t.exact...)
	}
	for _, ps := range b.patterns {
		subs = append(subs, ps...)
	}
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
var errZeroBroker = core.Invalid("zero Broker: make one with broker.New or broker.Open")

// validName checks a subscription or topic name: non-empty UTF-8 of at
// most 255 bytes, without spaces or control characters.
func validName(kind, name string) error {
	switch {
	case name == "":
		return core.Invalid("empty %s name", kind)
	case len(name) > 255:
		return core.Invalid("%s name of %d bytes, at most 255", kind, len(name))
	case !utf8.ValidString(name):
		return core.Invalid("%s name %q is not UTF-8", kind, name)
	case strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return core.Invalid("%s name %q has a space or control character", kind, name)
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
		return core.Invalid("topic name %q has a wildcard character (*, > or #)", name)
	}
	if slices.Contains(strings.Split(name, "."), "") {
		return core.Invalid("topic name %q has an empty dot-separated segment", name)
	}
	return nil
}
