package wmleasebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// ephemeralPrefix starts the name of the subscription a Subscribe without
// a consumer group makes for itself.
const ephemeralPrefix = "wmleasebus-ephemeral-"

// Subscriber is a watermill message.Subscriber (and
// message.SubscribeInitializer) that consumes leasebus subscriptions. It
// is safe for concurrent use. Create one with NewSubscriber.
type Subscriber struct {
	b       *broker.Broker[[]byte]
	cfg     SubscriberConfig
	logger  watermill.LoggerAdapter
	slogger *slog.Logger // logger, for the poller
	topics  topicCache
	ctx     context.Context // done once Close has begun: it ends every run
	cancel  context.CancelFunc
	runs    sync.WaitGroup

	// observe, when set (by this package's tests only), sees every
	// outcome of every message the Subscribe calls hold.
	observe func(poller.Event[[]byte])

	mu      sync.Mutex        // guards everything below
	closed  bool              // Close has begun
	pending map[string]string // without a group: topic -> subscription made by SubscribeInitialize, not taken yet
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber on b. A nil b, or a config that
// Validate refuses, is an error matching ErrInvalidConfig. A nil logger
// logs nothing. The broker stays the caller's: the Subscriber's Close does
// not close it.
func NewSubscriber(b *broker.Broker[[]byte], config SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if b == nil {
		return nil, invalidConfig("nil broker")
	}
	if err := config.Validate(); err != nil {
		return nil, err
	}
	config.setDefaults()
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	logger = logger.With(watermill.LogFields{"subscriber_uuid": watermill.NewShortUUID()})
	if config.ConsumerGroup != "" {
		logger = logger.With(watermill.LogFields{"consumer_group": config.ConsumerGroup})
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Subscriber{
		b:       b,
		cfg:     config,
		logger:  logger,
		slogger: slog.New(&logHandler{l: logger}),
		topics:  topicCache{b: b, noCreate: config.DoNotCreateTopicIfMissing},
		ctx:     ctx,
		cancel:  cancel,
		pending: make(map[string]string),
	}, nil
}

// Subscribe starts consuming topic and returns the channel of its
// messages. With a ConsumerGroup it consumes the group's subscription,
// competing with every other Subscribe of the group; without one it
// consumes a subscription of its own, made now (or by SubscribeInitialize),
// that gets the messages published from then on. The topic and the
// group's subscription are created if missing, unless the config says
// not to.
//
// Each message waits for its Ack or Nack before the next is sent (with
// Concurrency n, n at once). Ack acks the lease; Nack fails it (the
// attempt is spent and the message comes back after the subscription's
// RetryPolicy backoff, or is dead-lettered on its last attempt). While a
// message waits, its lease is kept, on the broker's clock (see
// MaxExtension). A message's context carries ctx's values and is cancelled
// once it is acked or nacked, or the Subscribe ends; DeliveryFromContext
// reads its delivery.
//
// The channel is closed when ctx is done, the Subscriber is closed, or
// the subscription goes away (Unsubscribe, DeleteTopic, the broker's
// Close). Then messages leased but not sent, and a message sent but
// neither acked nor nacked, are released: visible again at once, with no
// attempt spent (an Ack that comes later is lost, and the message is
// delivered again). A subscription of its own is removed, with what it
// holds.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if ctx == nil {
		return nil, fmt.Errorf("wmleasebus: subscribe to %q: nil context (%w)", topic, queue.ErrInvalidArgument)
	}
	sub, ephemeral, err := s.subscription(topic, true)
	if err != nil {
		return nil, err
	}
	r := &run{s: s, sub: sub, ephemeral: ephemeral, subCtx: ctx, out: make(chan *message.Message),
		logger: s.logger.With(watermill.LogFields{"topic": topic, "subscription": sub.Name()})}
	runCtx, cancel := context.WithCancel(ctx)
	r.stop = runCtx.Done()
	p, err := poller.New[[]byte](source{sub, r.stop}, r.handle, r.pollerOptions()...)
	if err != nil { // the config was validated: not expected
		cancel()
		s.drop(r)
		return nil, fmt.Errorf("wmleasebus: subscribe to %q: %w", topic, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		s.drop(r)
		return nil, fmt.Errorf("wmleasebus: subscribe to %q: %w", topic, ErrSubscriberClosed)
	}
	s.runs.Add(1)
	s.mu.Unlock()
	stopOnClose := context.AfterFunc(s.ctx, cancel) // Close ends the run
	go func() {
		defer s.runs.Done()
		var watcher sync.WaitGroup
		watcher.Go(func() { r.watchSubscription(runCtx, cancel) })
		r.logger.Debug("Subscribed", nil)
		if err := p.Run(runCtx); err != nil {
			r.logger.Debug("Poller ended", watermill.LogFields{"reason": err.Error()})
		}
		cancel()
		watcher.Wait()
		stopOnClose()
		s.drop(r)
		close(r.out)
		r.logger.Debug("Subscription ended", nil)
	}()
	return r.out, nil
}

// SubscribeInitialize creates topic, and the subscription that keeps its
// messages until a Subscribe consumes them, without consuming: with a
// ConsumerGroup, the group's subscription; without one, the subscription
// that this Subscriber's next Subscribe of topic takes (at most one waits
// per topic; Close removes it if no Subscribe took it). Calling it again
// changes nothing.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	_, _, err := s.subscription(topic, false)
	return err
}

// subscription returns the subscription a Subscribe of topic consumes
// (take) or SubscribeInitialize prepares (!take), and whether it is one of
// this Subscriber's own.
func (s *Subscriber) subscription(topic string, take bool) (*broker.Subscription[[]byte], bool, error) {
	op := "subscribe to"
	if !take {
		op = "initialize"
	}
	if s.isClosed() {
		return nil, false, fmt.Errorf("wmleasebus: %s %q: %w", op, topic, ErrSubscriberClosed)
	}
	if err := s.topics.ensure(topic); err != nil {
		return nil, false, fmt.Errorf("wmleasebus: %s %q: %w", op, topic, err)
	}
	if s.cfg.ConsumerGroup != "" {
		sub, err := s.group(topic)
		if err != nil {
			return nil, false, fmt.Errorf("wmleasebus: %s %q, consumer group %q: %w", op, topic, s.cfg.ConsumerGroup, err)
		}
		return sub, false, nil
	}
	sub, err := s.ephemeral(topic, take)
	if err != nil {
		return nil, false, fmt.Errorf("wmleasebus: %s %q: %w", op, topic, err)
	}
	return sub, true, nil
}

// group returns the consumer group's subscription of topic, creating it
// unless the config says not to. Without SubscribeOptions an existing
// subscription is taken as it is (on a durable broker, with the options
// its journal recorded); with them, a recovered one is bound to them.
func (s *Subscriber) group(topic string) (*broker.Subscription[[]byte], error) {
	name := s.cfg.ConsumerGroup
	if len(s.cfg.SubscribeOptions) == 0 || s.cfg.DoNotCreateSubscriptionIfMissing {
		sub, err := s.b.Subscription(topic, name)
		if err == nil || s.cfg.DoNotCreateSubscriptionIfMissing || !errors.Is(err, broker.ErrSubscriptionNotFound) {
			return sub, err
		}
	}
	sub, err := s.b.Subscribe(topic, name, s.cfg.SubscribeOptions...)
	if errors.Is(err, broker.ErrAlreadySubscribed) { // made by another Subscriber meanwhile
		return s.b.Subscription(topic, name)
	}
	return sub, err
}

// ephemeral returns a subscription of this Subscriber's own on topic: for
// a Subscribe (take), the one SubscribeInitialize left, or a new one; for
// SubscribeInitialize, the one waiting, or a new one left waiting.
func (s *Subscriber) ephemeral(topic string, take bool) (*broker.Subscription[[]byte], error) {
	s.mu.Lock()
	name, ok := s.pending[topic]
	if ok && take {
		delete(s.pending, topic)
	}
	s.mu.Unlock()
	if ok {
		if sub, err := s.b.Subscription(topic, name); err == nil {
			return sub, nil
		}
		// Removed behind our back (Unsubscribe, DeleteTopic): make another.
	}
	name = ephemeralPrefix + uuid.NewString()
	sub, err := s.b.Subscribe(topic, name, s.cfg.SubscribeOptions...)
	if err != nil || take {
		return sub, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed { // Close has run: it would not remove this one
		_ = s.b.Unsubscribe(topic, name)
		return nil, ErrSubscriberClosed
	}
	if old, ok := s.pending[topic]; ok { // a concurrent SubscribeInitialize won
		_ = s.b.Unsubscribe(topic, name)
		return s.b.Subscription(topic, old)
	}
	s.pending[topic] = name
	return sub, nil
}

// drop removes r's subscription if it is r's own.
func (s *Subscriber) drop(r *run) {
	if !r.ephemeral {
		return
	}
	err := s.b.Unsubscribe(r.sub.Topic(), r.sub.Name())
	if err != nil && !errors.Is(err, queue.ErrClosed) && !errors.Is(err, broker.ErrSubscriptionNotFound) && !errors.Is(err, broker.ErrTopicNotFound) {
		r.logger.Error("Cannot remove the subscription", err, nil)
	}
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close ends every Subscribe: their channels are closed, what they hold is
// released (see Subscribe), and the subscriptions of their own, and those
// SubscribeInitialize left waiting, are removed. It returns once every
// goroutine of the Subscriber has ended. A consumer group's subscription
// stays, keeping its messages for the next Subscriber of the group. The
// broker stays open. Close twice returns nil.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cancel()
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	s.runs.Wait()
	var errs []error
	for topic, name := range pending {
		err := s.b.Unsubscribe(topic, name)
		if err != nil && !errors.Is(err, queue.ErrClosed) && !errors.Is(err, broker.ErrSubscriptionNotFound) && !errors.Is(err, broker.ErrTopicNotFound) {
			errs = append(errs, fmt.Errorf("wmleasebus: close: remove subscription %q of %q: %w", name, topic, err))
		}
	}
	s.logger.Debug("Subscriber closed", nil)
	return errors.Join(errs...)
}

// run is one Subscribe call.
type run struct {
	s         *Subscriber
	sub       *broker.Subscription[[]byte]
	ephemeral bool                  // sub is the run's own
	subCtx    context.Context       // Subscribe's: the messages' contexts carry its values
	stop      <-chan struct{}       // closed when the run ends (Subscribe's ctx, Close)
	out       chan *message.Message // closed by the run's goroutine, after the poller returns
	logger    watermill.LoggerAdapter
}

func (r *run) pollerOptions() []poller.Option {
	cfg := r.s.cfg
	opts := []poller.Option{
		poller.WithWorkers(cfg.Concurrency),
		poller.WithBatch(cfg.BatchSize),
		poller.WithMaxOutstanding(max(cfg.BatchSize, cfg.Concurrency)),
		poller.WithExtension(0, cfg.MaxExtension),
		poller.WithLogger(r.s.slogger),
	}
	if r.s.observe != nil {
		opts = append(opts, poller.WithObserver(r.s.observe))
	}
	return opts
}

// watchSubscription cancels the run when its subscription closes
// (Unsubscribe, DeleteTopic, the broker's Close). The poller notices that
// by itself only in a Poll, and it does not poll while every message it
// may hold waits for an Ack that may never come. The subscription has no
// Done channel: AwaitParked for more Polls than can ever park returns only
// when ctx is done or the subscription closes.
func (r *run) watchSubscription(ctx context.Context, cancel context.CancelFunc) {
	if err := r.sub.AwaitParked(ctx, math.MaxInt); errors.Is(err, queue.ErrClosed) {
		r.logger.Info("Subscription closed", nil)
		cancel()
	}
}

// errNacked is the cause a Nack fails its lease with: the dead letter's
// LastError after the last attempt.
var errNacked = errors.New("wmleasebus: nacked")

// errReleased is what the handler returns for a message that the run
// hands back unsettled; source turns the poller's Fail into a Release.
var errReleased = errors.New("wmleasebus: released unsettled")

// handle hands d to watermill and waits for its Ack or Nack.
func (r *run) handle(hctx context.Context, d queue.Delivery[[]byte]) error {
	msg, err := r.s.cfg.Unmarshaler.Unmarshal(d)
	if err == nil && msg == nil {
		err = errors.New("the Unmarshaler returned no message and no error")
	}
	if err != nil {
		r.logger.Error("Cannot unmarshal message; dead-lettering it", err, watermill.LogFields{"leasebus_message_id": d.ID.String()})
		return poller.GiveUp(fmt.Errorf("wmleasebus: unmarshal: %w", err))
	}
	ctx, cancel := context.WithCancel(context.WithValue(r.subCtx, deliveryKey{}, d))
	defer cancel()
	msg.SetContext(ctx)
	select {
	case r.out <- msg:
	case <-r.stop:
		return errReleased
	case <-hctx.Done(): // the subscription closed
		return errReleased
	}
	select {
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return errNacked
	case <-r.stop:
	case <-hctx.Done():
	}
	select { // an Ack or Nack that came with the stop counts
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return errNacked
	default:
		return errReleased
	}
}

// source is the poller's view of a subscription: a Fail with errReleased
// releases the lease instead, spending no attempt, and once the run is
// stopping it polls nothing.
type source struct {
	*broker.Subscription[[]byte]
	stop <-chan struct{} // the run's: closed when it ends
}

// Poll polls the subscription, unless the run is stopping. A handler sees
// the run's context done, and releases its message, a moment before the
// poller's own context (a child of it) is cancelled too; a Poll in that
// moment would lease the released message again, and the poller release
// it again, over and over until the child's cancellation lands. So once
// the run is stopping, Poll waits for the poller's context, which follows
// at once, and returns its error: the poller then drains.
func (s source) Poll(ctx context.Context, n int) ([]queue.Delivery[[]byte], error) {
	if err := s.stopping(ctx); err != nil {
		return nil, err
	}
	return s.Subscription.Poll(ctx, n)
}

// PollFor is Poll as the poller asks for it (backend.PoolPoller), with
// the same rule once the run is stopping.
func (s source) PollFor(ctx context.Context, req backend.PollRequest[[]byte]) ([]queue.Delivery[[]byte], bool, error) {
	if err := s.stopping(ctx); err != nil {
		return nil, false, err
	}
	return s.Subscription.PollFor(ctx, req)
}

// stopping returns nil while the run goes on; once it is stopping, it
// waits for ctx to end and returns its error.
func (s source) stopping(ctx context.Context) error {
	select {
	case <-s.stop:
		<-ctx.Done()
		return ctx.Err()
	default:
		return nil
	}
}

func (s source) Fail(id lease.ID, cause error) error {
	if errors.Is(cause, errReleased) {
		err := s.Subscription.Release(id)
		if errors.Is(err, queue.ErrClosed) { // nothing to hand back to
			return nil
		}
		return err
	}
	return s.Subscription.Fail(id, cause)
}
