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
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/queue"
)

// Errors returned by this package (wrapped with context; match them with
// errors.Is). Invalid arguments match queue.ErrInvalidArgument, and calls
// after Close match queue.ErrClosed.
var (
	ErrTopicNotFound        = errors.New("broker: topic not found")
	ErrSubscriptionNotFound = errors.New("broker: subscription not found")
	ErrAlreadySubscribed    = errors.New("broker: already subscribed")
)

// Broker is an in-process publish/subscribe broker whose subscriptions are
// pulled. T is the payload type (use any for mixed payloads). It is safe
// for concurrent use. Create one with New and Close it when done.
type Broker[T any] struct {
	clock clock.Clock
	defs  subConfig // subscription defaults
	dead  deadLetters[T]
	ids   *idPool

	mu     sync.RWMutex // guards everything below
	closed bool
	topics map[string]*topic[T]
}

type topic[T any] struct {
	name string
	subs []*Subscription[T] // copy-on-write under Broker.mu: Publish reads a snapshot lock-free
}

// New returns a broker with no topics. Options set the clock, the
// dead-letter store's bound and every subscription's defaults. An invalid
// option is an error matching queue.ErrInvalidArgument.
func New[T any](opts ...Option) (*Broker[T], error) {
	cfg := config{deadLetterLimit: DefaultDeadLetterLimit}
	for i, o := range opts {
		if o == nil {
			return nil, queue.Invalid("New: option %d is nil", i)
		}
		o.applyBroker(&cfg)
	}
	if cfg.sub.err != nil {
		return nil, cfg.sub.err
	}
	if cfg.clock == nil {
		cfg.clock = clock.New()
	}
	if err := cfg.sub.queue.Validate(); err != nil {
		return nil, err
	}
	if cfg.sub.filter != nil {
		if _, ok := cfg.sub.filter.(func(queue.Message[T]) bool); !ok {
			return nil, filterMismatch[T](cfg.sub.filter)
		}
	}
	b := &Broker[T]{clock: cfg.clock, defs: cfg.sub, ids: newIDPool(), topics: make(map[string]*topic[T])}
	b.dead.limit = cfg.deadLetterLimit
	return b, nil
}

func filterMismatch[T any](f any) error {
	var zero T
	return queue.Invalid("WithFilter: %T does not take the broker's queue.Message[%T]", f, any(zero))
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
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("create topic %q: %w", name, queue.ErrClosed)
	}
	if _, ok := b.topics[name]; !ok {
		b.topics[name] = &topic[T]{name: name}
	}
	return nil
}

// DeleteTopic deletes a topic and closes its subscriptions: their blocked
// Polls return queue.ErrClosed, and their messages are discarded. Dead
// letters they made stay in the store.
func (b *Broker[T]) DeleteTopic(name string) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("delete topic %q: %w", name, queue.ErrClosed)
	}
	t, ok := b.topics[name]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("delete topic %q: %w", name, ErrTopicNotFound)
	}
	delete(b.topics, name)
	subs := t.subs
	b.mu.Unlock()
	for _, s := range subs {
		s.q.Close()
	}
	return nil
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

// Subscriptions returns the names of a topic's subscriptions, sorted.
func (b *Broker[T]) Subscriptions(topic string) ([]string, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t, err := b.topicLocked("subscriptions", topic)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(t.subs))
	for _, s := range t.subs {
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
func (b *Broker[T]) Subscribe(topic, name string, opts ...SubscribeOption) (*Subscription[T], error) {
	if err := validName("subscription", name); err != nil {
		return nil, err
	}
	cfg := b.defs
	for i, o := range opts {
		if o == nil {
			return nil, queue.Invalid("Subscribe: option %d is nil", i)
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

	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.topicLocked("subscribe", topic)
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(t.subs, func(s *Subscription[T]) bool { return s.name == name }) {
		return nil, fmt.Errorf("subscribe %q to %q: %w", name, topic, ErrAlreadySubscribed)
	}
	q, err := queue.New(qc, func(dl queue.DeadLetter[T]) { b.dead.add(topic, dl) })
	if err != nil {
		return nil, err
	}
	s := &Subscription[T]{q: q, topic: topic, name: name, filter: filter}
	subs := make([]*Subscription[T], len(t.subs), len(t.subs)+1)
	copy(subs, t.subs)
	t.subs = append(subs, s)
	return s, nil
}

// Subscription returns the existing subscription name on topic, for
// competing consumers that share it. A missing one is ErrSubscriptionNotFound
// (ErrTopicNotFound if the topic is missing).
func (b *Broker[T]) Subscription(topic, name string) (*Subscription[T], error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t, err := b.topicLocked("subscription", topic)
	if err != nil {
		return nil, err
	}
	for _, s := range t.subs {
		if s.name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("subscription %q on %q: %w", name, topic, ErrSubscriptionNotFound)
}

// Unsubscribe removes a subscription and closes it: its blocked Polls
// return queue.ErrClosed and its messages are discarded. It may be called
// from inside a consumer of that subscription.
func (b *Broker[T]) Unsubscribe(topic, name string) error {
	b.mu.Lock()
	t, err := b.topicLocked("unsubscribe", topic)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	i := slices.IndexFunc(t.subs, func(s *Subscription[T]) bool { return s.name == name })
	if i < 0 {
		b.mu.Unlock()
		return fmt.Errorf("unsubscribe %q from %q: %w", name, topic, ErrSubscriptionNotFound)
	}
	s := t.subs[i]
	t.subs = slices.Concat(t.subs[:i], t.subs[i+1:]) // a new slice: snapshots stay valid
	b.mu.Unlock()
	return s.q.Close()
}

// Publish publishes payload to topic and returns the message as stored
// (its ID and PublishedAt filled in). The envelope is stored once and
// offered to every subscription of the topic whose filter accepts it; a
// topic without subscriptions accepts and drops it.
//
// A subscription that is full applies its overflow policy. Under
// OverflowReject or OverflowBlock a full subscription can refuse the
// message while others accept it: Publish then returns the message and an
// error naming each refusing subscription, matching queue.ErrQueueFull.
// A missing topic is ErrTopicNotFound; after Close, queue.ErrClosed.
func (b *Broker[T]) Publish(ctx context.Context, topic string, payload T, opts ...PublishOption) (queue.Message[T], error) {
	if ctx == nil {
		return queue.Message[T]{}, queue.Invalid("Publish: nil context")
	}
	var pc publishConfig
	for _, o := range opts {
		if err := pc.apply(o); err != nil {
			return queue.Message[T]{}, err
		}
	}
	b.mu.RLock()
	t, err := b.topicLocked("publish", topic)
	var subs []*Subscription[T]
	if err == nil {
		subs = t.subs
	}
	b.mu.RUnlock()
	if err != nil {
		return queue.Message[T]{}, err
	}
	m := &queue.Message[T]{
		ID:          b.ids.newID(),
		Topic:       topic,
		Payload:     payload,
		Priority:    pc.priority,
		Headers:     queue.NewHeaders(pc.headers),
		PublishedAt: b.clock.Now(),
	}
	var errs []error
	for _, s := range subs {
		if s.filter != nil && !s.filter(*m) {
			continue
		}
		if err := s.q.Offer(ctx, m, pc.delay); err != nil && !errors.Is(err, queue.ErrClosed) {
			errs = append(errs, err) // a subscription closed meanwhile is simply gone
		}
	}
	return *m, errors.Join(errs...)
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
		return 0, queue.Invalid("Redrive: nil func")
	}
	b.mu.RLock()
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		return 0, fmt.Errorf("redrive: %w", queue.ErrClosed)
	}
	b.settleAll()
	var chosen []storedLetter[T]
	for _, it := range b.dead.snapshot() {
		if match(it.dl) {
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
		n++
	}
	return n, errors.Join(errs...)
}

// Close closes the broker and every subscription: blocked Polls and
// publishers return queue.ErrClosed, as does every later call. Messages
// still queued are discarded; DeadLetters stays readable. Close is
// idempotent and returns nil.
func (b *Broker[T]) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	topics := b.topics
	b.topics = map[string]*topic[T]{}
	b.mu.Unlock()
	for _, t := range topics {
		for _, s := range t.subs {
			s.q.Close()
		}
	}
	return nil
}

// settleAll applies everything due on every subscription.
func (b *Broker[T]) settleAll() {
	b.mu.RLock()
	var subs []*Subscription[T]
	for _, t := range b.topics {
		subs = append(subs, t.subs...)
	}
	b.mu.RUnlock()
	for _, s := range subs {
		s.q.Settle()
	}
}

func (b *Broker[T]) topicLocked(op, name string) (*topic[T], error) {
	if b.closed {
		return nil, fmt.Errorf("%s %q: %w", op, name, queue.ErrClosed)
	}
	t, ok := b.topics[name]
	if !ok {
		return nil, fmt.Errorf("%s %q: %w", op, name, ErrTopicNotFound)
	}
	return t, nil
}

// validName checks a subscription or topic name: non-empty UTF-8 of at
// most 255 bytes, without spaces or control characters.
func validName(kind, name string) error {
	switch {
	case name == "":
		return queue.Invalid("empty %s name", kind)
	case len(name) > 255:
		return queue.Invalid("%s name of %d bytes, at most 255", kind, len(name))
	case !utf8.ValidString(name):
		return queue.Invalid("%s name %q is not UTF-8", kind, name)
	case strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return queue.Invalid("%s name %q has a space or control character", kind, name)
	}
	return nil
}

func validTopic(name string) error {
	if err := validName("topic", name); err != nil {
		return err
	}
	if strings.ContainsAny(name, "*>#") {
		return queue.Invalid("topic name %q has a wildcard character (*, > or #)", name)
	}
	if slices.Contains(strings.Split(name, "."), "") {
		return queue.Invalid("topic name %q has an empty dot-separated segment", name)
	}
	return nil
}
