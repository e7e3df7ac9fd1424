package leasebuspubsub

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"gocloud.dev/gcerrors"
	"gocloud.dev/pubsub"
	"gocloud.dev/pubsub/batcher"
	"gocloud.dev/pubsub/driver"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// DefaultMaxExtension is how long after its receipt a message's lease is
// kept alive at most when SubscriptionOptions.MaxExtension is 0 (as Cloud
// Pub/Sub's client and leasebus's poller).
const DefaultMaxExtension = time.Hour

// receiveWait bounds how long one ReceiveBatch waits for a message, on the
// broker's clock (the driver contract asks for about a second); gocloud
// calls again at once after an empty batch.
const receiveWait = time.Second

// SubscriptionOptions configures OpenSubscription. The zero value is the
// default.
type SubscriptionOptions struct {
	// ReceiveBatcherOptions adds constraints to the default batching of
	// receives (how many ReceiveBatch calls run at once and how many
	// messages each asks for). The driver has no limits of its own.
	ReceiveBatcherOptions batcher.Options
	// AckBatcherOptions adds constraints to the default batching of acks
	// and nacks.
	AckBatcherOptions batcher.Options

	// MaxExtension is how long after its receipt the driver keeps a
	// message's lease alive while the message is neither acked nor nacked:
	// while it waits in gocloud's prefetch queue and while the program
	// works on it. After that the lease is left to lapse at its deadline,
	// so that a stuck consumer lets its message go to another. 0 means
	// DefaultMaxExtension; poller.NoExtension turns extension off. Other negative
	// values are invalid.
	MaxExtension time.Duration
	// ExtensionMargin is how long before its deadline a lease is extended,
	// each time by the subscription's visibility timeout. 0 means a fifth
	// of the visibility timeout, but at least the lesser of one second and
	// half of it; a margin not shorter than the visibility timeout counts
	// as half of it. Negative values are invalid.
	ExtensionMargin time.Duration
}

// OpenSubscription returns a *pubsub.Subscription that receives from the
// subscription named subscription on topic (a topic, or a wildcard
// pattern) of b.
//
// It binds the subscription that b.Subscribe made; it does not subscribe.
// Every Subscription opened on one (topic, subscription) competes for its
// messages, each going to one of them at a time; subscriptions of other
// names each get every message. The subscription is looked up by name at
// the first receive, and again if it is removed (Unsubscribe, DeleteTopic):
// it need not exist when OpenSubscription runs, and Receive from one that
// does not exist fails with gcerrors.NotFound, as with gocloud's drivers
// for cloud services. Its options (visibility timeout, max attempts,
// retry policy, ...) are the ones given to b.Subscribe.
//
// A nil broker, an empty subscription name, a name the broker can never
// accept or an invalid option is an error matching
// queue.ErrInvalidArgument; opts may be nil. Shutting the Subscription
// down releases the leases it still holds (see the package documentation)
// but does not unsubscribe or close b.
func OpenSubscription(b *broker.Broker[[]byte], topic, subscription string, opts *SubscriptionOptions) (*pubsub.Subscription, error) {
	if opts == nil {
		opts = &SubscriptionOptions{}
	}
	ds, err := openSubscription(b, topic, subscription, opts)
	if err != nil {
		return nil, err
	}
	return pubsub.NewSubscription(ds, &opts.ReceiveBatcherOptions, &opts.AckBatcherOptions), nil
}

// openSubscription returns the driver behind OpenSubscription.
func openSubscription(b *broker.Broker[[]byte], topic, name string, opts *SubscriptionOptions) (*subscription, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("leasebuspubsub: OpenSubscription %q on %q: %s: %w", name, topic, fmt.Sprintf(format, args...), queue.ErrInvalidArgument)
	}
	switch {
	case b == nil:
		return nil, invalid("nil broker")
	case name == "":
		return nil, invalid("empty subscription name")
	case opts.MaxExtension < 0 && opts.MaxExtension != poller.NoExtension:
		return nil, invalid("MaxExtension %v, must be >= 0 or poller.NoExtension", opts.MaxExtension)
	case opts.ExtensionMargin < 0:
		return nil, invalid("ExtensionMargin %v, must be >= 0", opts.ExtensionMargin)
	}
	sub, err := b.Subscription(topic, name)
	if errors.Is(err, queue.ErrInvalidArgument) {
		return nil, fmt.Errorf("leasebuspubsub: OpenSubscription: %w", err)
	}
	// Not found, or a closed broker: the first ReceiveBatch says so.
	s := &subscription{
		b:            b,
		clk:          b.Clock(),
		topic:        topic,
		name:         name,
		margin:       opts.ExtensionMargin,
		maxExtension: opts.MaxExtension,
		kick:         make(chan struct{}, 1),
		stop:         make(chan struct{}),
		sub:          sub,
		held:         make(map[*receipt]struct{}),
	}
	if s.maxExtension == 0 {
		s.maxExtension = DefaultMaxExtension
	}
	return s, nil
}

// subscription is the driver.Subscription: a (topic, name) on a broker,
// the leases it has handed to gocloud and not yet seen settled, and the
// loop that extends them.
type subscription struct {
	b            *broker.Broker[[]byte]
	clk          clock.Clock
	topic, name  string
	margin       time.Duration // 0: from the visibility timeout
	maxExtension time.Duration // poller.NoExtension: off

	// testArmed, set by tests before the first receive, hears each time
	// the extension loop arms its timer (the zero time: the loop exits).
	testArmed func(time.Time)

	kick chan struct{}  // wakes the extension loop: a lease is due before its timer
	stop chan struct{}  // closed by Close
	loop sync.WaitGroup // the extension loop, while it runs

	mu      sync.Mutex                   // guards everything below, and the receipts' mutable fields
	sub     *broker.Subscription[[]byte] // the bound subscription; nil until found, and after it closed
	held    map[*receipt]struct{}        // every receipt handed to gocloud and not settled
	due     receiptHeap                  // the held receipts being extended, by extendAt
	armed   time.Time                    // when the loop's timer fires; zero: none
	looping bool                         // the extension loop runs
	closed  bool
}

var _ driver.Subscription = (*subscription)(nil)

// receipt is the driver.AckID of one delivery: the subscription that
// leased it (acks go there, even if the name is bound to another since),
// the lease, and its extension schedule.
type receipt struct {
	sub    *broker.Subscription[[]byte]
	id     lease.ID
	length time.Duration // each extension's; 0: never extended
	margin time.Duration // how long before the deadline to extend
	limit  time.Time     // no extension past it

	// guarded by subscription.mu
	deadline time.Time
	extendAt time.Time
	index    int  // in due; -1 when not there
	settled  bool // acked or nacked through gocloud
}

// bound returns the subscription the name is bound to, looking it up if
// none is.
func (s *subscription) bound() (*broker.Subscription[[]byte], error) {
	s.mu.Lock()
	sub := s.sub
	s.mu.Unlock()
	if sub != nil {
		return sub, nil
	}
	sub, err := s.b.Subscription(s.topic, s.name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.sub == nil {
		s.sub = sub
	}
	sub = s.sub
	s.mu.Unlock()
	return sub, nil
}

// unbind forgets sub, which has closed, so the next bound looks the name
// up again.
func (s *subscription) unbind(sub *broker.Subscription[[]byte]) {
	s.mu.Lock()
	if s.sub == sub {
		s.sub = nil
	}
	s.mu.Unlock()
}

// ReceiveBatch leases up to maxMessages with one Poll, which waits up to a
// second (on the broker's clock) for the first; it returns an empty batch
// if none came. Each message is leased for the subscription's visibility
// timeout, and extended while gocloud holds it (see extend.go).
func (s *subscription) ReceiveBatch(ctx context.Context, maxMessages int) ([]*driver.Message, error) {
	sub, err := s.bound()
	if err != nil {
		return nil, err
	}
	ds, err := s.poll(ctx, sub, maxMessages)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	return s.track(sub, ds)
}

// poll is one Poll of at most receiveWait.
func (s *subscription) poll(ctx context.Context, sub *broker.Subscription[[]byte], n int) ([]queue.Delivery[[]byte], error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// An AfterFunc timer whose func never blocks is safe on a mock clock
	// (see backend.Timer); a second tick cancels twice, harmlessly.
	t := s.clk.AfterFunc(receiveWait, cancel)
	defer t.Stop()
	ds, err := sub.Poll(wctx, n)
	switch {
	case err == nil:
		return ds, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case wctx.Err() != nil && errors.Is(err, context.Canceled):
		return nil, nil // waited receiveWait: an empty batch
	case errors.Is(err, queue.ErrClosed):
		// Removed (Unsubscribe, DeleteTopic), or the broker closed: look
		// the name up again. Not found is NotFound, a closed broker
		// ErrClosed; one subscribed again under the name is bound, and
		// gocloud calls again at once.
		s.unbind(sub)
		again, lerr := s.bound()
		switch {
		case lerr != nil:
			return nil, lerr
		case again == sub:
			return nil, err
		}
		return nil, nil
	}
	return nil, err
}

// track turns deliveries into gocloud messages and holds their receipts.
func (s *subscription) track(sub *broker.Subscription[[]byte], ds []queue.Delivery[[]byte]) ([]*driver.Message, error) {
	length := sub.Config().VisibilityTimeout
	ms := make([]*driver.Message, len(ds))
	rs := make([]receipt, len(ds))
	for i := range ds {
		d := &ds[i]
		// The stored payload is shared by every subscription's copy and
		// by redeliveries: the program gets a body of its own.
		d.Payload = bytes.Clone(d.Payload)
		r := &rs[i]
		s.initReceipt(r, sub, d, length)
		ms[i] = &driver.Message{
			LoggableID: d.ID.String(),
			Body:       d.Payload,
			Metadata:   metadata(d.Headers),
			AckID:      r,
			AsFunc:     messageAs(d, sub),
		}
	}
	s.mu.Lock()
	if s.closed { // a receive that raced Close: hand the messages back
		s.mu.Unlock()
		for i := range rs {
			_ = sub.Release(rs[i].id) // fails only if the lease is gone already
		}
		return nil, errSubscriptionClosed
	}
	for i := range rs {
		r := &rs[i]
		s.held[r] = struct{}{}
		if r.length > 0 {
			heap.Push(&s.due, r)
		}
	}
	s.scheduleLocked()
	s.mu.Unlock()
	return ms, nil
}

// initReceipt fills r for delivery d with its extension schedule.
func (s *subscription) initReceipt(r *receipt, sub *broker.Subscription[[]byte], d *queue.Delivery[[]byte], length time.Duration) {
	*r = receipt{sub: sub, id: d.LeaseID, deadline: d.Deadline, index: -1}
	if s.maxExtension == poller.NoExtension || length <= 0 {
		return
	}
	margin := s.margin
	if margin == 0 {
		margin = max(length/5, min(length/2, time.Second))
	}
	if margin >= length {
		margin = length / 2
	}
	r.length, r.margin, r.limit = length, margin, d.Deadline.Add(-length).Add(s.maxExtension)
	r.extendAt = d.Deadline.Add(-margin)
}

// metadata returns h as gocloud Metadata: nil when there are none.
func metadata(h queue.Headers) map[string]string {
	if h.Len() == 0 {
		return nil
	}
	m := make(map[string]string, h.Len())
	for k, v := range h.All() {
		m[k] = v
	}
	return m
}

// messageAs exposes a received message's delivery as a
// queue.Delivery[[]byte] and the subscription that leased it as a
// *broker.Subscription[[]byte].
func messageAs(d *queue.Delivery[[]byte], sub *broker.Subscription[[]byte]) func(any) bool {
	return func(i any) bool {
		switch p := i.(type) {
		case *queue.Delivery[[]byte]:
			if p != nil {
				*p = *d
				return true
			}
		case **broker.Subscription[[]byte]:
			if p != nil {
				*p = sub
				return true
			}
		}
		return false
	}
}

// IsRetryable reports false: leasebus has no transient errors (a full
// queue under OverflowBlock waits in Publish, not in a retry).
func (*subscription) IsRetryable(error) bool { return false }

// As exposes the bound subscription as a *broker.Subscription[[]byte]
// (false if it does not exist) and the broker as a
// *broker.Broker[[]byte].
func (s *subscription) As(i any) bool {
	switch p := i.(type) {
	case **broker.Subscription[[]byte]:
		if p == nil {
			return false
		}
		sub, err := s.bound()
		if err != nil {
			return false
		}
		*p = sub
		return true
	case **broker.Broker[[]byte]:
		if p == nil {
			return false
		}
		*p = s.b
		return true
	}
	return false
}

// ErrorAs implements driver.Subscription.ErrorAs with errors.As.
func (*subscription) ErrorAs(err error, i any) bool { return errorAs(err, i) }

// ErrorCode maps a leasebus error to its gcerrors code.
func (*subscription) ErrorCode(err error) gcerrors.ErrorCode { return errorCode(err) }

// Close stops the extension loop, waits for it, and releases every lease
// still held (Release: visible again at once, the attempt not spent).
// gocloud calls it from Shutdown after flushing the acks and nacks sent
// before, and drops those sent after: a message the program had not acked
// by then is delivered again. Close twice returns nil.
func (s *subscription) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.loop.Wait()

	s.mu.Lock()
	held := make([]*receipt, 0, len(s.held))
	for r := range s.held {
		held = append(held, r)
	}
	clear(s.held)
	for _, r := range s.due {
		r.index = -1
	}
	s.due = nil
	s.mu.Unlock()
	for _, r := range held {
		// A lease that lapsed already, or a subscription gone, is nothing
		// to hand back.
		_ = r.sub.Release(r.id)
	}
	return nil
}
