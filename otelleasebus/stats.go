package otelleasebus

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// Subscription is what ObserveSubscription reads: a *broker.Subscription
// of any payload type has these methods, and so may another backend.
type Subscription interface {
	Topic() string      // messaging.destination.name (a pattern for a wildcard subscription)
	Name() string       // messaging.consumer.group.name and messaging.destination.subscription.name
	Stats() queue.Stats // read at every collection
}

// The states of leasebus.subscription.messages, in queue.Stats order.
var states = [...]string{"visible", "delayed", "in_flight", "held_back"}

// The reasons of leasebus.subscription.dead_lettered: queue.Reason
// strings, then "unknown" for dead letters a backend counts without saying
// why (DeadLettered less the sum of DeadLetteredBy).
var reasons = [...]string{
	queue.ReasonMaxAttempts.String(),
	queue.ReasonOverflow.String(),
	queue.ReasonExpired.String(),
	queue.ReasonRejected.String(),
	queue.ReasonCancelled.String(),
	"unknown",
}

// statsInstruments are the asynchronous instruments of subscription
// statistics. Every observation registers its own callback on them.
type statsInstruments struct {
	messages    metric.Int64ObservableUpDownCounter
	limited     metric.Int64ObservableUpDownCounter
	oldest      metric.Float64ObservableGauge
	published   metric.Int64ObservableCounter
	delivered   metric.Int64ObservableCounter
	acked       metric.Int64ObservableCounter
	redelivered metric.Int64ObservableCounter
	deadLetters metric.Int64ObservableCounter
	dropped     metric.Int64ObservableCounter
	redriven    metric.Int64ObservableCounter
	rejected    metric.Int64ObservableCounter
}

func newStatsInstruments(m metric.Meter) (*statsInstruments, error) {
	var (
		in   statsInstruments
		errs []error
	)
	counter := func(name, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit("{message}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	var err error
	in.messages, err = m.Int64ObservableUpDownCounter("leasebus.subscription.messages",
		metric.WithUnit("{message}"),
		metric.WithDescription("Messages a subscription holds, by leasebus.message.state: visible, delayed, in_flight, held_back."))
	errs = append(errs, err)
	in.limited, err = m.Int64ObservableUpDownCounter("leasebus.subscription.limited",
		metric.WithUnit("{message}"),
		metric.WithDescription("Visible messages a subscription's rate limit (WithRateLimit, WithKeyRateLimit) holds back now: of leasebus.subscription.messages' visible."))
	errs = append(errs, err)
	in.oldest, err = m.Float64ObservableGauge("leasebus.subscription.oldest_visible.age",
		metric.WithUnit("s"),
		metric.WithDescription("How long ago the oldest visible message of a subscription was published; 0 when none is visible."))
	errs = append(errs, err)
	in.published = counter("leasebus.subscription.published", "Messages a subscription accepted.")
	in.delivered = counter("leasebus.subscription.delivered", "Deliveries a subscription made, first or not.")
	in.acked = counter("leasebus.subscription.acked", "Messages acked on a subscription.")
	in.redelivered = counter("leasebus.subscription.redelivered", "Deliveries with an attempt above 1.")
	in.deadLetters = counter("leasebus.subscription.dead_lettered", "Messages a subscription dead-lettered, by leasebus.dead_letter.reason.")
	in.dropped = counter("leasebus.subscription.dropped", "Messages removed by a policy the user chose (drop-oldest overflow, purge).")
	in.redriven = counter("leasebus.subscription.redriven", "Dead letters put back on a subscription by Redrive.")
	in.rejected = counter("leasebus.subscription.rejected", "Publishes a full subscription refused (OverflowReject, or an OverflowBlock that gave up).")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelleasebus: instruments: %w", err)
	}
	return &in, nil
}

func (in *statsInstruments) all() []metric.Observable {
	return []metric.Observable{in.messages, in.limited, in.oldest, in.published, in.delivered, in.acked,
		in.redelivered, in.deadLetters, in.dropped, in.redriven, in.rejected}
}

// statsSets are the attribute sets of one subscription's observations,
// made once.
type statsSets struct {
	base    metric.MeasurementOption
	states  [len(states)]metric.MeasurementOption
	reasons [len(reasons)]metric.MeasurementOption
}

func newStatsSets(topic, name string, extra []attribute.KeyValue) *statsSets {
	base := subscriptionAttrs(topic, name, extra)
	with := func(kv attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(base[:len(base):len(base)], kv)...))
	}
	s := &statsSets{base: metric.WithAttributeSet(attribute.NewSet(base...))}
	for i, st := range states {
		s.states[i] = with(stateKey.String(st))
	}
	for i, r := range reasons {
		s.reasons[i] = with(reasonKey.String(r))
	}
	return s
}

// subscriptionAttrs are the attributes that name a subscription.
func subscriptionAttrs(topic, name string, extra []attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 4+len(extra))
	attrs = append(attrs, systemAttr, semconv.MessagingDestinationName(topic))
	if name != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(name), semconv.MessagingDestinationSubscriptionName(name))
	}
	return append(attrs, extra...)
}

// observe records st with the sets s.
func (in *statsInstruments) observe(o metric.Observer, s *statsSets, st queue.Stats) {
	for i, n := range [len(states)]int{st.Visible, st.Delayed, st.InFlight, st.HeldBack} {
		o.ObserveInt64(in.messages, int64(n), s.states[i])
	}
	o.ObserveInt64(in.limited, int64(st.Limited), s.base)
	o.ObserveFloat64(in.oldest, st.OldestVisibleAge.Seconds(), s.base)
	o.ObserveInt64(in.published, counter(st.Published), s.base)
	o.ObserveInt64(in.delivered, counter(st.Delivered), s.base)
	o.ObserveInt64(in.acked, counter(st.Acked), s.base)
	o.ObserveInt64(in.redelivered, counter(st.Redelivered), s.base)
	o.ObserveInt64(in.dropped, counter(st.Dropped), s.base)
	o.ObserveInt64(in.redriven, counter(st.Redriven), s.base)
	o.ObserveInt64(in.rejected, counter(st.Rejected), s.base)
	var known uint64
	i := 0
	for _, n := range st.DeadLetteredBy.All() { // in reasons' order
		known += n
		o.ObserveInt64(in.deadLetters, counter(n), s.reasons[i])
		i++
	}
	if st.DeadLettered > known { // "unknown" only when a backend has some
		o.ObserveInt64(in.deadLetters, counter(st.DeadLettered-known), s.reasons[i])
	}
}

// counter converts a Stats counter to the instrument's int64, saturating.
func counter(n uint64) int64 {
	if n > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(n)
}

// ObserveSubscription reports sub's statistics (sub.Stats()) as metrics,
// read at every collection of the MeterProvider's readers: nothing is
// recorded on the hot path, and the values are exact at the moment of the
// read. Every measurement carries messaging.system "leasebus",
// messaging.destination.name sub.Topic(), and messaging.consumer.group.name
// and messaging.destination.subscription.name sub.Name(). See the package
// documentation for the instruments.
//
// Unregister the returned registration when the subscription goes away:
// until then a closed subscription goes on reporting its last Stats.
// Observing the same subscription twice with one MeterProvider reports it
// twice (the SDK adds the two observations up); ObserveBroker already
// covers every subscription of its broker but wildcard ones. A nil sub is
// an invalid argument. Options that apply: WithMeterProvider,
// WithAttributes.
func ObserveSubscription(sub Subscription, opts ...Option) (metric.Registration, error) {
	if sub == nil {
		return nil, invalid("ObserveSubscription: nil subscription")
	}
	return ObserveStats(sub.Topic(), sub.Name(), func(context.Context) (queue.Stats, error) {
		return sub.Stats(), nil
	}, opts...)
}

// ObserveStats is ObserveSubscription for a backend whose statistics come
// from a function that may fail or needs a context, such as a JetStream
// subscription's Stats(ctx): it reports stats(ctx) at every collection as
// the statistics of the subscription name on topic (name "" omits the
// subscription attributes). When stats returns an error the collection
// records nothing for it and reports the error to the SDK (which hands it
// to otel.Handle). An empty topic or a nil stats is an invalid argument.
func ObserveStats(topic, name string, stats func(context.Context) (queue.Stats, error), opts ...Option) (metric.Registration, error) {
	if topic == "" {
		return nil, invalid("ObserveStats: empty topic")
	}
	if stats == nil {
		return nil, invalid("ObserveStats: nil stats function")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m := c.meter()
	in, err := newStatsInstruments(m)
	if err != nil {
		return nil, err
	}
	sets := newStatsSets(topic, name, c.attrs)
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := stats(ctx)
		if err != nil {
			return fmt.Errorf("otelleasebus: stats of %s/%s: %w", topic, name, err)
		}
		in.observe(o, sets, st)
		return nil
	}, in.all()...)
}

// ObserveBroker reports the statistics of every subscription of b, as
// ObserveSubscription does for one, following the broker: at every
// collection it lists the topics and their subscriptions, so one made
// later is reported from then on and one removed is no longer reported.
// Wildcard subscriptions are not among them (the broker lists
// subscriptions by topic name only): observe those with
// ObserveSubscription. A closed broker reports nothing. A nil b is an
// invalid argument. Options that apply: WithMeterProvider, WithAttributes.
func ObserveBroker[T any](b *broker.Broker[T], opts ...Option) (metric.Registration, error) {
	if b == nil {
		return nil, invalid("ObserveBroker: nil broker")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m := c.meter()
	in, err := newStatsInstruments(m)
	if err != nil {
		return nil, err
	}
	type key struct{ topic, name string }
	var (
		mu   sync.Mutex // guards sets; callbacks of several readers may run at once
		sets = map[key]*statsSets{}
	)
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		seen := make(map[key]bool, len(sets))
		for _, topic := range b.Topics() {
			names, err := b.Subscriptions(topic)
			if err != nil {
				continue // deleted meanwhile
			}
			for _, name := range names {
				sub, err := b.Subscription(topic, name)
				if err != nil {
					continue // removed meanwhile
				}
				k := key{topic, name}
				s := sets[k]
				if s == nil {
					s = newStatsSets(topic, name, c.attrs)
					sets[k] = s
				}
				seen[k] = true
				in.observe(o, s, sub.Stats())
			}
		}
		for k := range sets {
			if !seen[k] {
				delete(sets, k)
			}
		}
		return nil
	}, in.all()...)
}
