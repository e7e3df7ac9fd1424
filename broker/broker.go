// Package broker is leasebus's front door: topics, subscriptions, publish
// fan-out, filters, the dead-letter store and redrive.
//
// Publish stores one envelope and offers it to every subscription of the
// topic; each subscription has its own bounded queue that consumers pull
// from with Poll and settle with Ack, Nack, Fail, Extend or Release. See
// the leasebus package documentation for the delivery semantics.
package broker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// Errors returned by this package (wrapped with context; match them with
// errors.Is). Invalid arguments match queue.ErrInvalidArgument, and calls
// after Close match queue.ErrClosed.
var (
	// ErrTopicNotFound: no topic has that name (Publish, Subscribe, DeleteTopic, …).
	ErrTopicNotFound = queue.ErrTopicNotFound
	// ErrSubscriptionNotFound: the topic (or pattern) has no subscription of that name.
	ErrSubscriptionNotFound = queue.ErrSubscriptionNotFound
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
	// ErrConfigMismatch: Subscribe declared a subscription that a durable
	// broker recovered with options that differ from the stored ones, and
	// did not ask to change them (WithUpdate). Nothing changed. The error
	// is a *ConfigMismatchError, which says what differs.
	ErrConfigMismatch = errors.New("broker: subscription exists with other options")
)

// Broker is an in-process publish/subscribe broker whose subscriptions are
// pulled. T is the payload type (use any for mixed payloads). It is safe
// for concurrent use. Create one with New and Close it when done.
type Broker[T any] struct {
	clock       clock.Clock // as given: what Clock returns
	now         clock.Clock // clock, or for the real clock a cheaper Now (core.FastNow)
	defs        subConfig   // subscription defaults
	dead        deadLetters[T]
	dedupWindow time.Duration
	dedupLimit  int
	dur         durability[T] // inMemory, or the journal of a broker from Open
	copied      *RecoveryInfo // what OpenCopy found; nil otherwise

	// A broker from New publishes without taking mu (a durable one takes it
	// to count its publishes in for Close): published is a copy of topics,
	// replaced (never changed) under mu, and nil once closed. It holds no
	// deleted topic, and every topic but those created since it was copied
	// (stale says there are some): a publish to one of those takes mu's
	// read lock, and makes the copy again if no one holds mu. CreateTopic
	// copies it at once only when a sixteenth of the topics are missing
	// from it, so that creating n topics copies O(n) entries in all, not
	// O(n²) (an SQS server with 10,000 queues).
	lockFree  bool
	published atomic.Pointer[map[string]*topicEntry[T]]
	stale     atomic.Bool

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
	subs  atomic.Pointer[[]*Subscription[T]]
	dedup dedup[T]
	ids   idPool // the IDs of the messages published to it
}

// newTopicEntry returns the entry of a new topic of b.
func (b *Broker[T]) newTopicEntry(name string) *topicEntry[T] {
	t := &topicEntry[T]{name: name}
	t.dedup.clock, t.dedup.window = b.clock, b.dedupWindow
	t.ids.init()
	return t
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
		return nil, backend.Invalid("New: %s is an option of Open (a durable broker)", cfg.durableOnly)
	}
	b.lockFree = true
	return b, nil
}

// newBroker is New without the check that every option is New's.
func newBroker[T any](opts []Option) (*Broker[T], config, error) {
	cfg := config{deadLetterLimit: defaultDeadLetterLimit, dedupWindow: defaultDedupWindow, dedupLimit: defaultDedupLimit,
		compactMin: defaultCompactMin}
	for i, o := range opts {
		if o.apply == nil {
			return nil, cfg, fmt.Errorf("option %d: %w", i, errZeroOption)
		}
		o.apply(&cfg)
	}
	if cfg.sub.err != nil {
		return nil, cfg, cfg.sub.err
	}
	if cfg.clock == nil {
		cfg.clock = clock.New()
	}
	if err := core.ValidateConfig(cfg.sub.queue); err != nil {
		return nil, cfg, err
	}
	if cfg.sub.filter != nil {
		if _, ok := cfg.sub.filter.(func(queue.Message[T]) bool); !ok {
			return nil, cfg, filterMismatch[T](cfg.sub.filter)
		}
	}
	b := &Broker[T]{
		clock:       cfg.clock,
		now:         core.FastNow(cfg.clock),
		defs:        cfg.sub,
		dur:         inMemory[T]{},
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
	return backend.Invalid("WithFilter: %T does not take the broker's queue.Message[%T]", f, any(zero))
}

// Clock returns the broker's clock.
func (b *Broker[T]) Clock() clock.Clock { return b.clock }

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
	b.published.Store(nil)
	subs := b.allLocked()
	for _, t := range b.topics {
		t.dedup.stop()
	}
	b.topics = map[string]*topicEntry[T]{}
	b.patterns = map[string][]*Subscription[T]{}
	b.trie = trie[T]{}
	b.mu.Unlock()
	for _, s := range subs {
		s.q.Close()
	}
	if b.dur == nil { // a zero Broker
		return nil
	}
	return b.dur.close() // a durable broker's messages stay in the journal for the next Open
}

// settleAll applies everything due on every subscription.
func (b *Broker[T]) settleAll() {
	b.mu.RLock()
	subs := b.allLocked()
	b.mu.RUnlock()
	for _, s := range subs {
		s.q.Sweep()
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
