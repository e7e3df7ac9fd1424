package jetstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Defaults of the subscribe options.
const (
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultMaxAttempts       = 5
	DefaultMaxInFlight       = 1000
	DefaultPollSlice         = 200 * time.Millisecond
	DefaultSettleTimeout     = 5 * time.Second
)

// errExpiredText is what a dead letter records when its last lease
// expired (as in the in-memory broker).
const errExpiredText = backend.LeaseExpired

// SubscribeOption configures Subscribe.
type SubscribeOption func(*subConfig)

type subConfig struct {
	vis           time.Duration
	maxAttempts   int
	retry         queue.RetryPolicy
	maxInFlight   int
	pollSlice     time.Duration
	settleTimeout time.Duration
	codec         any
	filter        any // a func(queue.Message[T]) bool
	// set holds the consumer settings the options name explicitly:
	// compared with an existing consumer's, and changed only with update.
	set    settings[js.ConsumerConfig]
	update bool
	err    error
}

func (c *subConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

func newSubConfig(opts []SubscribeOption) (subConfig, error) {
	c := subConfig{
		vis: DefaultVisibilityTimeout, maxAttempts: DefaultMaxAttempts, maxInFlight: DefaultMaxInFlight,
		pollSlice: DefaultPollSlice, settleTimeout: DefaultSettleTimeout,
	}
	for _, o := range opts {
		o(&c)
	}
	return c, c.err
}

// WithVisibilityTimeout sets the lease each delivery gets: the consumer's
// AckWait (default for a subscription Subscribe creates: 30s; an existing
// one keeps its own unless this option is given).
func WithVisibilityTimeout(d time.Duration) SubscribeOption {
	return func(c *subConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithVisibilityTimeout: %v, must be > 0", d))
		}
		c.vis = d
		c.set.add(field("AckWait", "WithVisibilityTimeout", func(c *js.ConsumerConfig) *time.Duration { return &c.AckWait }))
	}
}

// WithMaxAttempts sets how many deliveries a message gets before it is
// dead-lettered (default for a subscription Subscribe creates: 5;
// queue.UnlimitedAttempts for no limit; an existing one keeps its own
// unless this option is given). The limit is kept in the consumer's
// metadata (MetaMaxAttempts) and enforced by the handles, not by the
// server's MaxDeliver (which stays unlimited): the delivery after the last
// attempt is dead-lettered by whichever handle receives it, so a message
// whose last lease expires is dead-lettered even if no handle was
// connected at the time.
func WithMaxAttempts(n int) SubscribeOption {
	return func(c *subConfig) {
		if n < 1 && n != queue.UnlimitedAttempts {
			c.fail(backend.Invalid("WithMaxAttempts: %d, must be >= 1 or queue.UnlimitedAttempts", n))
		}
		c.maxAttempts = n
		c.set.add(maxAttemptsSetting)
	}
}

// MetaMaxAttempts is the consumer metadata key that holds a subscription's
// maximum attempts ("5"; "-1" for no limit). A consumer without it has no
// limit.
const MetaMaxAttempts = "leasebus.max-attempts"

// maxAttemptsSetting compares the limit in the consumer's metadata.
var maxAttemptsSetting = setting[js.ConsumerConfig]{
	name: "Metadata[" + MetaMaxAttempts + "]", option: "WithMaxAttempts",
	equal: func(h, w *js.ConsumerConfig) bool { return attemptsOf(h) == attemptsOf(w) },
	show: func(c *js.ConsumerConfig) string {
		if v, ok := c.Metadata[MetaMaxAttempts]; ok {
			return v
		}
		return "absent"
	},
	copy: func(d, s *js.ConsumerConfig) {
		m := maps.Clone(d.Metadata)
		if m == nil {
			m = map[string]string{}
		}
		m[MetaMaxAttempts] = s.Metadata[MetaMaxAttempts]
		d.Metadata = m
	},
}

// attemptsOf returns a consumer's maximum attempts: queue.UnlimitedAttempts
// when its metadata has none (or one that does not parse).
func attemptsOf(c *js.ConsumerConfig) int {
	n, err := strconv.Atoi(c.Metadata[MetaMaxAttempts])
	if err != nil || n < 1 {
		return queue.UnlimitedAttempts
	}
	return n
}

// WithRetry sets the backoff of Fail (default: the zero queue.RetryPolicy,
// 1s doubling to 1m).
func WithRetry(p queue.RetryPolicy) SubscribeOption {
	return func(c *subConfig) {
		if err := p.Validate(); err != nil {
			c.fail(err)
		}
		c.retry = p
	}
}

// WithMaxInFlight caps the leases held at once across every handle of the
// subscription: the consumer's MaxAckPending (default for a subscription
// Subscribe creates: 1000; an existing one keeps its own unless this
// option is given).
func WithMaxInFlight(n int) SubscribeOption {
	return func(c *subConfig) {
		if n < 1 {
			c.fail(backend.Invalid("WithMaxInFlight: %d, must be >= 1", n))
		}
		c.maxInFlight = n
		c.set.add(field("MaxAckPending", "WithMaxInFlight", func(c *js.ConsumerConfig) *int { return &c.MaxAckPending }))
	}
}

// WithUpdateConsumer lets Subscribe change an existing subscription whose
// consumer settings differ from the explicit options (visibility timeout,
// maximum attempts, in-flight cap), instead of refusing with a
// *ConfigMismatchError. The change applies to every handle of the
// subscription, in every process: handles opened before keep their own
// idea of the visibility timeout and attempts until they are reopened.
func WithUpdateConsumer() SubscribeOption { return func(c *subConfig) { c.update = true } }

// WithPollSlice sets how long one pull request waits on the server before
// Poll checks its context and Close again (default 200ms): the most a
// cancelled Poll takes to return.
func WithPollSlice(d time.Duration) SubscribeOption {
	return func(c *subConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithPollSlice: %v, must be > 0", d))
		}
		c.pollSlice = d
	}
}

// WithSettleTimeout bounds the round trips of Ack and of dead-lettering
// (default 5s).
func WithSettleTimeout(d time.Duration) SubscribeOption {
	return func(c *subConfig) {
		if d <= 0 {
			c.fail(backend.Invalid("WithSettleTimeout: %v, must be > 0", d))
		}
		c.settleTimeout = d
	}
}

// WithFilter makes the handle skip the messages for which f returns false:
// they are acked on delivery, without being handed out (the broker's
// WithFilter, emulated at delivery rather than at publish, so they still
// count in Stats.Delivered). The filter is the handle's, not the
// server's: give every handle of the subscription the same one. f runs in
// Poll.
func WithFilter[T any](f func(queue.Message[T]) bool) SubscribeOption {
	return func(c *subConfig) {
		if f == nil {
			c.fail(backend.Invalid("WithFilter: nil func"))
		}
		c.filter = f
	}
}

// WithCodec decodes payloads with c instead of DefaultCodec.
func WithCodec[T any](c Codec[T]) SubscribeOption {
	return func(s *subConfig) { s.codec = c }
}

// Subscription is one handle on a durable pull consumer: the subscription
// name of a topic. Several handles (in one process or many) on the same
// subscription compete for its messages. It satisfies poller.Source[T] and
// poller.Rejecter. Its methods are safe for concurrent use.
type Subscription[T any] struct {
	bus     *Bus
	filter  func(queue.Message[T]) bool // nil: none
	topic   string
	name    string
	durable string
	cons    js.Consumer
	codec   Codec[T]
	cfg     subConfig
	scope   uint64 // the scope of the lease ids this handle mints
	// maxAttempts is the consumer's limit as the server held it when the
	// handle opened: the attempts a message gets, 0 for no limit.
	maxAttempts int

	closed    chan struct{} // closed by Close
	closeOnce sync.Once
	kick      chan struct{}  // wakes the reaper: a lease to watch
	wg        sync.WaitGroup // the reaper

	mu     sync.Mutex            // guards everything below
	held   map[lease.ID]*heldMsg // the leases this handle holds
	latest map[uint64]uint32     // stream seq → the latest delivery this handle saw, until settled
	watch  map[lease.ID]struct{} // the held leases the reaper watches: last attempts, extended ones
	swept  time.Time             // the last sweepLocked
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
	_ poller.Rejecter       = (*Subscription[string])(nil)
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
		Metadata:       map[string]string{MetaMaxAttempts: strconv.Itoa(cfg.maxAttempts)},
	}
	needs := append(settings[js.ConsumerConfig]{filterSetting, ackPolicySetting, maxDeliverSetting}, cfg.set...)
	cons, err := ensureConsumer(ctx, b.stream, want, needs, cfg.update)
	if err != nil {
		return nil, fmt.Errorf("subscribe %q to %q: %w", name, topic, err)
	}
	// The server's word: the settings it enforces, whoever set them.
	have := cons.CachedInfo().Config
	cfg.vis, cfg.maxInFlight, cfg.maxAttempts = have.AckWait, have.MaxAckPending, attemptsOf(&have)
	h := fnv.New64a()
	h.Write([]byte(b.cfg.stream + "/" + durable))
	scope := h.Sum64() | 1 // never 0
	s := &Subscription[T]{
		bus: b, filter: filter, topic: topic, name: name, durable: durable, cons: cons, codec: codec, cfg: cfg, scope: scope,
		maxAttempts: max(cfg.maxAttempts, 0), // UnlimitedAttempts is a Delivery's 0
		closed:      make(chan struct{}),
		kick:        make(chan struct{}, 1),
		held:        make(map[lease.ID]*heldMsg),
		latest:      make(map[uint64]uint32),
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

// ensureConsumer returns the durable consumer want names on st: created
// from want if it is missing, bound as it is if the settings in needs
// agree, updated (those settings only) if update is set, else refused with
// a *ConfigMismatchError.
func ensureConsumer(ctx context.Context, st js.Stream, want js.ConsumerConfig, needs settings[js.ConsumerConfig], update bool) (js.Consumer, error) {
	cons, err := st.Consumer(ctx, want.Durable)
	if errors.Is(err, js.ErrConsumerNotFound) {
		cons, err = st.CreateConsumer(ctx, want)
		if err == nil {
			return cons, nil
		}
		if !errors.Is(err, js.ErrConsumerExists) {
			return nil, fmt.Errorf("create consumer %s: %w", want.Durable, err)
		}
		cons, err = st.Consumer(ctx, want.Durable) // created meanwhile by another handle
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", want.Durable, err)
	}
	have := cons.CachedInfo().Config
	diffs := needs.diff(&have, &want)
	if len(diffs) == 0 {
		return cons, nil
	}
	if !update || anyFixed(diffs) {
		return nil, &ConfigMismatchError{Kind: "consumer", Name: want.Durable, Diffs: diffs}
	}
	needs.apply(&have, &want)
	cons, err = st.UpdateConsumer(ctx, have)
	if err != nil {
		return nil, fmt.Errorf("update consumer %s: %w", want.Durable, err)
	}
	return cons, nil
}

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

// Poll leases up to n messages, waiting until at least one arrives, ctx
// is done (its error is returned) or the handle is closed (an error
// matching queue.ErrClosed). It takes what is there at once (a no-wait
// pull of n); when there is nothing it waits for the first message with
// pulls that wait at most the poll slice on the server, checking ctx and
// Close between them, so a pull is never abandoned with messages on their
// way. A message whose payload cannot be decoded is dead-lettered
// (ReasonRejected) and not returned.
func (s *Subscription[T]) Poll(ctx context.Context, n int) ([]queue.Delivery[T], error) {
	return s.poll(ctx, n, s.cfg.vis)
}

// PollWithVisibility is Poll with this call's own visibility timeout in
// place of the subscription's (SQS ReceiveMessage's VisibilityTimeout),
// emulated as Extend is: the handle keeps a longer lease alive past the
// consumer's AckWait, and hands a shorter one back at its deadline.
func (s *Subscription[T]) PollWithVisibility(ctx context.Context, n int, visibility time.Duration) ([]queue.Delivery[T], error) {
	if visibility <= 0 {
		return nil, backend.Invalid("PollWithVisibility: visibility %v, must be > 0", visibility)
	}
	return s.poll(ctx, n, visibility)
}

// TryPoll is Poll that does not wait for messages: what the server has for
// the subscription now, up to n (one no-wait pull, bounded by the settle
// timeout), or nothing — also for n < 1, after Close, or on an error.
func (s *Subscription[T]) TryPoll(n int) []queue.Delivery[T] {
	if n < 1 || s.isClosed() {
		return nil
	}
	ds, _ := s.fetch(n, s.cfg.vis, func() (js.MessageBatch, error) { return s.cons.FetchNoWait(n) })
	return ds
}

func (s *Subscription[T]) poll(ctx context.Context, n int, vis time.Duration) ([]queue.Delivery[T], error) {
	if n < 1 {
		return nil, backend.Invalid("Poll: n = %d, must be >= 1", n)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, s.errClosed("poll")
	}
	// What is there now, in one round trip.
	out, err := s.fetch(n, vis, func() (js.MessageBatch, error) { return s.cons.FetchNoWait(n) })
	if len(out) > 0 || err != nil {
		return out, err
	}
	for {
		if s.isClosed() {
			return nil, s.errClosed("poll")
		}
		wait, err := slice(ctx, s.cfg.pollSlice)
		if err != nil {
			return nil, err
		}
		// Wait for the first; a request for n would wait for n.
		out, err := s.fetch(1, vis, func() (js.MessageBatch, error) { return s.cons.Fetch(1, js.FetchMaxWait(wait)) })
		if len(out) > 0 || err != nil {
			return out, err
		}
	}
}

// fetch leases the messages of one pull request.
func (s *Subscription[T]) fetch(n int, vis time.Duration, pull func() (js.MessageBatch, error)) ([]queue.Delivery[T], error) {
	batch, err := pull()
	if err != nil {
		return nil, fmt.Errorf("poll %s/%s: %w", s.topic, s.name, err)
	}
	out := make([]queue.Delivery[T], 0, n)
	for m := range batch.Messages() {
		if d, ok := s.lease(m, vis); ok {
			out = append(out, d)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, js.ErrNoMessages) {
		return nil, fmt.Errorf("poll %s/%s: %w", s.topic, s.name, err)
	}
	return nil, nil
}

// Ack acks the message and waits for the server to confirm it (a double
// ack), so a nil error means the message will not be delivered again. A
// try that fails with a transient error (a timeout, no responders, as
// while a consumer's leader moves) is retried until the lease's deadline,
// each try bounded by the settle timeout: an ack is idempotent on the
// server, so a retry after a lost reply is harmless. An error that no
// retry can fix (a closed connection) returns at once; either way the
// lease is still held, and the error says how many tries were made. It
// works after the deadline too (one try), as long as
// this handle has not seen the message delivered again — but the server
// may by then have handed it to another handle, and a confirmed late ack
// then still stands; an Ack whose message this handle saw delivered again
// returns ErrLeaseExpired. A lease not held (never issued, already acked)
// returns ErrLeaseNotFound.
func (s *Subscription[T]) Ack(id lease.ID) error {
	h, err := s.take("ack", id, false)
	if err != nil {
		return err
	}
	if err := s.retry(h.deadline, h.msg.DoubleAck); err != nil {
		s.putBack(id, h)
		return fmt.Errorf("ack %v: %w", id, err)
	}
	s.forget(id)
	return nil
}

// AckBatch acks many leases, each as Ack would, with their round trips
// to the server in flight at once rather than one after another. The error
// joins those of the leases it could not ack.
func (s *Subscription[T]) AckBatch(ids []lease.ID) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = s.Ack(id) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Backoff between the tries of a settling call.
const (
	retryInitial = 10 * time.Millisecond
	retryMax     = 250 * time.Millisecond
)

// retry runs op until it succeeds, fails with an error that is not
// transient, the handle closes, or deadline passes (at least one try, and
// each bounded by the settle timeout).
func (s *Subscription[T]) retry(deadline time.Time, op func(context.Context) error) error {
	wait := retryInitial
	for tries := 1; ; tries++ {
		end := time.Now().Add(s.cfg.settleTimeout)
		if deadline.After(time.Now()) && deadline.Before(end) {
			end = deadline
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		err := op(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if !transient(err) || !time.Now().Add(wait).Before(deadline) {
			if tries > 1 {
				return fmt.Errorf("%d tries: %w", tries, err)
			}
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.closed:
			t.Stop()
			return fmt.Errorf("%d tries, then closed: %w", tries, err)
		}
		wait = min(2*wait, retryMax)
	}
}

// transient reports whether a settling call that failed with err may
// succeed if tried again: its request or reply was lost, or no server
// answered (a consumer whose leader is moving, a reconnecting client).
func transient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, js.ErrNoHeartbeat)
}

// Nack fails the attempt: the message is delivered again after delay
// (NakWithDelay). On the last allowed attempt it is dead-lettered
// (ReasonMaxAttempts) and terminated. It needs a live lease.
func (s *Subscription[T]) Nack(id lease.ID, delay time.Duration) error {
	if delay < 0 {
		return backend.Invalid("Nack: delay %v, must be >= 0", delay)
	}
	return s.fail("nack", id, delay, "nacked")
}

// Fail fails the attempt with cause: the message is delivered again after
// the retry policy's delay for this attempt; on the last allowed attempt
// it is dead-lettered with cause as its LastError, and terminated. It
// needs a live lease.
func (s *Subscription[T]) Fail(id lease.ID, cause error) error {
	text := "failed"
	if cause != nil {
		text = cause.Error()
	}
	h, err := s.peekAttempt(id)
	if err != nil {
		return s.fail("fail", id, 0, text) // reports the error
	}
	return s.fail("fail", id, s.cfg.retry.Delay(h), text)
}

// peekAttempt returns the attempt of a held lease.
func (s *Subscription[T]) peekAttempt(id lease.ID) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[id]
	if !ok {
		return 0, queue.ErrLeaseNotFound
	}
	return h.attempt, nil
}

func (s *Subscription[T]) fail(op string, id lease.ID, delay time.Duration, cause string) error {
	h, err := s.take(op, id, true)
	if err != nil {
		return err
	}
	if s.maxAttempts > 0 && h.attempt >= s.maxAttempts {
		if err := s.deadLetter(h, queue.ReasonMaxAttempts, cause); err != nil {
			s.putBack(id, h)
			return fmt.Errorf("%s %v: %w", op, id, err)
		}
		s.forget(id)
		return nil
	}
	if delay > 0 {
		err = h.msg.NakWithDelay(delay)
	} else {
		err = h.msg.Nak()
	}
	if err != nil {
		s.putBack(id, h)
		return fmt.Errorf("%s %v: %w", op, id, err)
	}
	return nil
}

// Reject dead-letters the message at once (ReasonRejected, cause as its
// LastError) and terminates it. It needs a live lease.
func (s *Subscription[T]) Reject(id lease.ID, cause error) error {
	h, err := s.take("reject", id, true)
	if err != nil {
		return err
	}
	text := "rejected"
	if cause != nil {
		text = cause.Error()
	}
	if err := s.deadLetter(h, queue.ReasonRejected, text); err != nil {
		s.putBack(id, h)
		return fmt.Errorf("reject %v: %w", id, err)
	}
	s.forget(id)
	return nil
}

// Extend sets the lease's deadline to now + timeout, for any timeout > 0.
// JetStream's InProgress can only restart the server's timer at the
// visibility timeout (AckWait), so the handle emulates the rest: for a
// longer timeout it sends InProgress again before each AckWait runs out,
// until the deadline (if the handle closes or its process dies, the
// message comes back within an AckWait); for a shorter one it hands the
// message back (Nak) at the deadline, so it is visible again then, as an
// expired lease is. It needs a live lease.
func (s *Subscription[T]) Extend(id lease.ID, timeout time.Duration) error {
	if timeout <= 0 {
		return backend.Invalid("Extend: timeout %v, must be > 0", timeout)
	}
	if s.isClosed() {
		return s.errClosed("extend")
	}
	s.mu.Lock()
	h, ok := s.held[id]
	if !ok {
		err := s.unknownLocked("extend", id)
		s.mu.Unlock()
		return err
	}
	now := time.Now()
	if !now.Before(h.deadline) {
		s.mu.Unlock()
		return fmt.Errorf("extend %v: %w", id, queue.ErrLeaseExpired)
	}
	h.deadline, h.serverDeadline = now.Add(timeout), now.Add(s.cfg.vis)
	s.watch[id] = struct{}{}
	s.mu.Unlock()
	s.wake()
	if err := h.msg.InProgress(); err != nil {
		return fmt.Errorf("extend %v: %w", id, err)
	}
	return nil
}

// Release hands the message back unprocessed, visible at once, without
// spending its attempt: the next delivery has the same Attempt, as in the
// in-memory broker. JetStream counts every delivery, so the handle
// emulates it: it republishes the message to the subscription's own
// subject with the attempts spent so far in a header
// (HeaderAttemptsSpent), its ID, headers and publish time kept, then
// terminates this delivery (both confirmed, and retried like Ack; the
// copy carries a Nats-Msg-Id, so a retried Release makes one copy). The
// message goes to the back of the queue. It needs a live lease.
func (s *Subscription[T]) Release(id lease.ID) error {
	h, err := s.take("release", id, true)
	if err != nil {
		return err
	}
	m := nats.NewMsg(s.bus.subscriptionSubject(s.topic, s.name))
	m.Data = h.msg.Data()
	for k, vs := range h.msg.Headers() {
		if !isReserved(k) {
			m.Header[k] = vs
		}
	}
	m.Header.Set(HeaderAttemptsSpent, strconv.Itoa(h.attempt-1))
	m.Header.Set(HeaderTopic, h.topic)
	if ttl := h.msg.Headers().Get(HeaderTTL); ttl != "" {
		m.Header.Set(HeaderTTL, ttl)
	}
	m.Header.Set(HeaderPublishedAt, h.published.Format(time.RFC3339Nano))
	m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("release.%s.%s.%d.%d", s.bus.cfg.stream, s.durable, h.seq, id.Delivery()))
	if err := s.retry(h.deadline, func(ctx context.Context) error {
		_, err := s.bus.js.PublishMsg(ctx, m)
		return err
	}); err != nil {
		s.putBack(id, h)
		return fmt.Errorf("release %v: %w", id, err)
	}
	if err := s.term(h, "released"); err != nil {
		// The copy is out: this delivery would come back too. A second
		// Release publishes no second copy and terminates it.
		s.putBack(id, h)
		return fmt.Errorf("release %v: republished, not terminated: %w", id, err)
	}
	s.forget(id)
	return nil
}

// deadLetter copies the message to the dead-letter subject, with why in
// its headers, then terminates it. The copy carries a Nats-Msg-Id made of
// the consumer and stream sequence, so a second copy (a retry after a lost
// reply, or a redelivery after a lost Term) is dropped by the
// dead-letter stream's duplicate window.
func (s *Subscription[T]) deadLetter(h *heldMsg, reason queue.Reason, lastErr string) error {
	if err := s.retry(h.deadline, func(ctx context.Context) error {
		return s.publishDeadLetter(ctx, h.topic, h.seq, h.msg.Data(), h.msg.Headers(), h.published, reason, h.attempt, lastErr)
	}); err != nil {
		return err
	}
	if err := s.term(h, reason.String()); err != nil {
		return fmt.Errorf("term after dead-lettering: %w", err)
	}
	return nil
}

// term terminates the delivery h and waits for the server to confirm it
// (a lost Term would deliver the message again), retried like Ack.
func (s *Subscription[T]) term(h *heldMsg, reason string) error {
	body := []byte("+TERM " + reason)
	return s.retry(h.deadline, func(ctx context.Context) error {
		_, err := s.bus.js.Conn().RequestWithContext(ctx, h.msg.Reply(), body)
		return err
	})
}

func (s *Subscription[T]) publishDeadLetter(ctx context.Context, topic string, seq uint64, data []byte, hdr nats.Header, published time.Time, reason queue.Reason, attempts int, lastErr string) error {
	m := nats.NewMsg(s.bus.DeadLetterSubject(s.topic, s.name))
	m.Data = data
	for k, vs := range hdr {
		if !isReserved(k) {
			m.Header[k] = vs
		}
	}
	m.Header.Set(HeaderReason, reason.String())
	m.Header.Set(HeaderAttempts, strconv.Itoa(attempts))
	m.Header.Set(HeaderLastError, lastErr)
	m.Header.Set(HeaderSubscription, s.name)
	m.Header.Set(HeaderTopic, topic)
	if ttl := hdr.Get(HeaderTTL); ttl != "" {
		m.Header.Set(HeaderTTL, ttl) // a redrive counts it again
	}
	m.Header.Set(HeaderStreamSeq, strconv.FormatUint(seq, 10))
	if !published.IsZero() {
		m.Header.Set(HeaderPublishedAt, published.Format(time.RFC3339Nano))
	}
	m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("dl.%s.%s.%d", s.bus.cfg.stream, s.durable, seq))
	if _, err := s.bus.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("dead-letter %s/%s seq %d: %w", s.topic, s.name, seq, err)
	}
	return nil
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
	info, err := s.cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("purge %s/%s: %w", s.topic, s.name, err)
	}
	cfg := info.Config
	cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = js.DeliverNewPolicy, 0, nil
	if err := s.bus.stream.DeleteConsumer(ctx, s.durable); err != nil && !errors.Is(err, js.ErrConsumerNotFound) {
		return 0, fmt.Errorf("purge %s/%s: %w", s.topic, s.name, err)
	}
	// The handles' js.Consumer values name the consumer, so they pull
	// from the new one as they did from the old.
	if _, err := s.bus.stream.CreateConsumer(ctx, cfg); err != nil && !errors.Is(err, js.ErrConsumerExists) {
		return 0, fmt.Errorf("purge %s/%s: deleted, not created again (Subscribe creates it): %w", s.topic, s.name, err)
	}
	s.mu.Lock()
	clear(s.held)
	clear(s.watch)
	clear(s.latest)
	s.mu.Unlock()
	return int(info.NumPending) + info.NumAckPending, nil
}
