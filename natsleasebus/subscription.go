package natsleasebus

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Subscription is one handle on a durable pull consumer: the subscription
// name of a topic. Several handles (in one process or many) on the same
// subscription compete for its messages. It satisfies poller.Source[T] and
// backend.Rejecter. Its methods are safe for concurrent use.
type Subscription[T any] struct {
	bus     *Bus
	filter  func(queue.Message[T]) bool // nil: none
	topic   string
	name    string
	durable string
	cons    js.Consumer
	codec   queue.Codec[T]
	cfg     subConfig
	// The lease IDs this handle mints are (scope, stream seq, n): n counts
	// the handle's deliveries, so no two deliveries share an ID even when
	// the server hands out the same stream sequence and delivery count
	// again (after it lost consumer state in a crash). scope is drawn at
	// random per handle, and again when n would wrap; scopes lists every
	// scope the handle has drawn. All three are guarded by mu.
	scope  uint64
	minted uint32
	scopes []uint64
	// maxAttempts is the consumer's limit as the server held it when the
	// handle opened: the attempts a message gets, 0 for no limit.
	maxAttempts int

	closed    chan struct{} // closed by Close
	closeOnce sync.Once
	kick      chan struct{}  // wakes the reaper: a lease to watch
	wg        sync.WaitGroup // the reaper

	mu     sync.Mutex                            // guards everything below
	leases *backend.LeaseTable[uint64, *heldMsg] // the leases this handle holds, and each stream seq's latest it saw, until settled
	watch  map[lease.ID]struct{}                 // the held leases the reaper watches: last attempts, extended ones
}

// heldMsg is one lease held: the message and its lease.
type heldMsg struct {
	msg       js.Msg
	topic     string // the message's own topic (a pattern subscription sees many)
	seq       uint64
	attempt   int
	published time.Time // the message's PublishedAt
	deadline  time.Time // the lease's deadline
	// serverDeadline is when the server's ack timer runs out: receipt or
	// the last InProgress, plus AckWait (an estimate, a little late).
	serverDeadline time.Time
}

var (
	_ poller.Source[string] = (*Subscription[string])(nil)
	_ backend.Rejecter      = (*Subscription[string])(nil)
)

// Subscribe opens a handle on the subscription name of topic: a durable
// pull consumer of the topic's subject, named "TOPIC_NAME", with explicit
// acks, AckWait = the visibility timeout, MaxAckPending = the in-flight
// cap, and the maximum attempts in its metadata (MaxDeliver unlimited: see
// WithMaxAttempts). A missing subscription
// is created, and receives the messages published after that. An existing
// one is bound to as it is: the handle takes its settings from the
// server, and an explicit option that differs makes Subscribe fail with a
// *ConfigMismatchError (nothing changed), unless WithUpdateConsumer asks
// for the change.
func Subscribe[T any](ctx context.Context, b *Bus, topic, name string, opts ...SubscribeOption) (*Subscription[T], error) {
	if err := validTopic(topic, true); err != nil {
		return nil, err
	}
	topic = normalTopic(topic)
	if err := validToken("subscription", name); err != nil {
		return nil, err
	}
	cfg, err := newSubConfig(opts)
	if err != nil {
		return nil, err
	}
	codec, ok := codecFor[T](cfg.codec)
	if !ok {
		return nil, backend.Invalid("WithCodec: %T does not decode the payload type", cfg.codec)
	}
	var filter func(queue.Message[T]) bool
	if cfg.filter != nil {
		if filter, ok = cfg.filter.(func(queue.Message[T]) bool); !ok {
			return nil, backend.Invalid("WithFilter: %T does not take the payload type", cfg.filter)
		}
	}
	durable := durableName(topic, name)
	want := js.ConsumerConfig{
		Durable:        durable,
		FilterSubjects: []string{b.Subject(topic), b.subscriptionSubject(topic, name)},
		AckPolicy:      js.AckExplicitPolicy,
		AckWait:        cfg.vis,
		MaxDeliver:     -1, // the handles enforce the limit (see WithMaxAttempts)
		MaxAckPending:  cfg.maxInFlight,
		DeliverPolicy:  js.DeliverNewPolicy,
		Metadata:       map[string]string{metaMaxAttempts: strconv.Itoa(cfg.maxAttempts)},
	}
	needs := append(settings[js.ConsumerConfig]{filterSetting, ackPolicySetting, maxDeliverSetting}, cfg.set...)
	cons, err := ensureConsumer(ctx, b.stream, want, needs, cfg.update)
	if err != nil {
		return nil, fmt.Errorf("subscribe %q to %q: %w", name, topic, err)
	}
	// The server's word: the settings it enforces, whoever set them.
	have := cons.CachedInfo().Config
	cfg.vis, cfg.maxInFlight, cfg.maxAttempts = have.AckWait, have.MaxAckPending, attemptsOf(&have)
	scope := rand.Uint64() | 1 // never 0
	s := &Subscription[T]{
		bus: b, filter: filter, topic: topic, name: name, durable: durable, cons: cons, codec: codec, cfg: cfg, scope: scope, scopes: []uint64{scope},
		maxAttempts: max(cfg.maxAttempts, 0), // UnlimitedAttempts is a Delivery's 0
		closed:      make(chan struct{}),
		kick:        make(chan struct{}, 1),
		leases:      backend.NewLeaseTable(func(h *heldMsg) uint64 { return h.seq }),
		watch:       make(map[lease.ID]struct{}),
	}
	s.wg.Add(1)
	go s.reaper()
	return s, nil
}

// filterSetting requires an existing consumer to filter on the topic's
// subject alone.
var filterSetting = setting[js.ConsumerConfig]{
	name: "FilterSubject", option: "required",
	equal: func(h, w *js.ConsumerConfig) bool { return slices.Equal(filters(h), filters(w)) },
	show:  func(c *js.ConsumerConfig) string { return fmt.Sprintf("%q", filters(c)) },
	copy:  func(d, s *js.ConsumerConfig) { d.FilterSubject, d.FilterSubjects = s.FilterSubject, s.FilterSubjects },
}

// filters returns a consumer's filter subjects, sorted.
func filters(c *js.ConsumerConfig) []string {
	fs := slices.Clone(c.FilterSubjects)
	if c.FilterSubject != "" {
		fs = append(fs, c.FilterSubject)
	}
	slices.Sort(fs)
	return fs
}

// maxDeliverSetting requires the server's MaxDeliver to be unlimited: a
// server that stops delivering would strand a message whose last lease
// expired, with no handle to dead-letter it.
var maxDeliverSetting = field("MaxDeliver", "required", func(c *js.ConsumerConfig) *int { return &c.MaxDeliver })

// ackPolicySetting requires explicit acks, which JetStream cannot change
// on an existing consumer.
var ackPolicySetting = func() setting[js.ConsumerConfig] {
	s := field("AckPolicy", "required", func(c *js.ConsumerConfig) *js.AckPolicy { return &c.AckPolicy })
	s.fixed = true
	return s
}()

// Topic returns the subscription's topic.
func (s *Subscription[T]) Topic() string { return s.topic }

// Name returns the subscription's name.
func (s *Subscription[T]) Name() string { return s.name }

// Consumer returns the durable consumer behind the subscription.
func (s *Subscription[T]) Consumer() js.Consumer { return s.cons }

func (s *Subscription[T]) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

func (s *Subscription[T]) errClosed(op string) error {
	return fmt.Errorf("%s on %s/%s: %w", op, s.topic, s.name, queue.ErrClosed)
}

// Close closes this handle: Polls return errors matching queue.ErrClosed
// (a blocked one within the poll slice), and so do later calls. The
// subscription (the durable consumer) stays, with its messages; leases
// this handle held lapse after the visibility timeout and their messages
// are delivered again. Close is idempotent.
func (s *Subscription[T]) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.wg.Wait()
	})
	return nil
}

// Delete closes the handle and deletes the subscription (its durable
// consumer) from the server; its messages are gone with it.
func (s *Subscription[T]) Delete(ctx context.Context) error {
	s.Close()
	if err := s.bus.stream.DeleteConsumer(ctx, s.durable); err != nil {
		return fmt.Errorf("delete %s/%s: %w", s.topic, s.name, err)
	}
	return nil
}

// Stats returns what the consumer's info says of the subscription:
// Visible (NumPending: not yet delivered), InFlight (NumAckPending: leased,
// and also those waiting out a Nack or retry delay or an expired lease's
// redelivery, which JetStream does not tell apart) and Delivered (the
// consumer's delivery sequence: every delivery, first or not). The rest
// of queue.Stats is not kept by JetStream and stays zero: Delayed (a
// delayed message is a schedule, not yet the subscription's), HeldBack,
// the counters Published, Acked, Redelivered, DeadLettered and Dropped,
// DeadLetteredBy, and OldestVisibleAge. It is one round trip to the
// server.
func (s *Subscription[T]) Stats(ctx context.Context) (queue.Stats, error) {
	if s.isClosed() {
		return queue.Stats{}, s.errClosed("stats")
	}
	info, err := s.cons.Info(ctx)
	if err != nil {
		return queue.Stats{}, fmt.Errorf("stats of %s/%s: %w", s.topic, s.name, err)
	}
	return queue.Stats{
		Visible:   int(info.NumPending),
		InFlight:  info.NumAckPending,
		Delivered: info.Delivered.Consumer,
	}, nil
}

// Purge drops every message the subscription holds, in flight included
// (SQS PurgeQueue), and returns how many: it deletes the durable consumer
// and creates it again with the same settings, from the end of the
// stream. Other subscriptions of the topic keep their messages (interest
// retention removes a message once no consumer needs it). Leases this
// handle held are forgotten (ErrLeaseNotFound); another handle's leases
// are not known to be purged there, and an Ack of one succeeds without
// effect. A message published while Purge runs may be dropped too; a
// delayed message not yet due is not the subscription's yet, and is
// delivered when due.
func (s *Subscription[T]) Purge(ctx context.Context) (int, error) {
	if s.isClosed() {
		return 0, s.errClosed("purge")
	}
	n, err := s.bus.purge(ctx, s.topic, s.name, s.cons)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.leases.Clear()
	clear(s.watch)
	s.mu.Unlock()
	return n, nil
}

// purge deletes the consumer cons of the subscription name of topic and
// creates it again with the same settings, from the end of the stream,
// and returns how many messages it held. The handles' js.Consumer values
// name the consumer, so they pull from the new one as they did from the
// old.
func (b *Bus) purge(ctx context.Context, topic, name string, cons js.Consumer) (int, error) {
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("purge %s/%s: %w", topic, name, err)
	}
	waiting, err := b.pendingAfter(ctx, info.Config, info.Delivered.Stream)
	if err != nil {
		return 0, fmt.Errorf("purge %s/%s: count: %w", topic, name, err)
	}
	cfg := info.Config
	cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = js.DeliverNewPolicy, 0, nil
	if err := b.stream.DeleteConsumer(ctx, cfg.Durable); err != nil && !errors.Is(err, js.ErrConsumerNotFound) {
		return 0, fmt.Errorf("purge %s/%s: %w", topic, name, err)
	}
	if _, err := b.stream.CreateConsumer(ctx, cfg); err != nil && !errors.Is(err, js.ErrConsumerExists) {
		return 0, fmt.Errorf("purge %s/%s: deleted, not created again (Subscribe creates it): %w", topic, name, err)
	}
	return waiting + info.NumAckPending, nil
}

// pendingAfter counts the messages of the stream that a consumer with
// cfg's filters has after the stream sequence seq. A consumer's info
// counts its pending messages as the server tells it of new ones, in a
// loop of the server's that runs after the server has confirmed a
// publish, so its NumPending may not yet count what was just published.
// A consumer the server creates counts them from its store, so
// pendingAfter creates one from seq + 1 (ephemeral, in memory, without
// acks, never pulled), reads its count and deletes it.
func (b *Bus) pendingAfter(ctx context.Context, cfg js.ConsumerConfig, seq uint64) (int, error) {
	c, err := b.stream.CreateConsumer(ctx, js.ConsumerConfig{
		FilterSubject: cfg.FilterSubject, FilterSubjects: cfg.FilterSubjects,
		DeliverPolicy: js.DeliverByStartSequencePolicy, OptStartSeq: seq + 1,
		AckPolicy: js.AckNonePolicy, MemoryStorage: true, Replicas: 1,
		InactiveThreshold: time.Minute, // if the delete below is lost
	})
	if err != nil {
		return 0, err
	}
	info := c.CachedInfo()
	if err := b.stream.DeleteConsumer(ctx, info.Name); err != nil && !errors.Is(err, js.ErrConsumerNotFound) {
		return 0, err
	}
	return int(info.NumPending), nil
}

var _ backend.Remote = (*Subscription[int])(nil)

// Remote reports true: every Poll is a round trip to the server, so a
// worker pool (poller) over the subscription leases two batches beyond
// its workers by default (see backend.Remote).
func (s *Subscription[T]) Remote() bool { return true }
