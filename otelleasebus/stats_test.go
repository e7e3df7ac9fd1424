package otelleasebus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/otelleasebus"
	"github.com/leasebus/leasebus/queue"
)

// subAttrs is the attribute string of the subscription name on topic, as
// attrString writes it (keys sorted).
func subAttrs(topic, name string, more ...string) string {
	kv := []string{
		"messaging.consumer.group.name=" + name,
		"messaging.destination.name=" + topic,
		"messaging.destination.subscription.name=" + name,
		"messaging.system=leasebus",
	}
	kv = append(kv, more...)
	return sortedJoin(kv)
}

func sortedJoin(kv []string) string {
	for i := range kv { // insertion sort: a handful of items
		for j := i; j > 0 && kv[j] < kv[j-1]; j-- {
			kv[j], kv[j-1] = kv[j-1], kv[j]
		}
	}
	return strings.Join(kv, ",")
}

// statsPoints are the points ObserveSubscription reports for st on the
// subscription name on topic.
func statsPoints(topic, name string, st map[string]string) map[string]string {
	base := subAttrs(topic, name)
	out := map[string]string{}
	for _, state := range []string{"visible", "delayed", "in_flight", "held_back"} {
		out["leasebus.subscription.messages{"+subAttrs(topic, name, "leasebus.message.state="+state)+"}"] = st[state]
	}
	for _, r := range []string{"max-attempts", "overflow", "expired", "rejected", "cancelled"} {
		out["leasebus.subscription.dead_lettered{"+subAttrs(topic, name, "leasebus.dead_letter.reason="+r)+"}"] = st["dl."+r]
	}
	for _, c := range []string{"published", "delivered", "acked", "redelivered", "dropped", "redriven", "rejected", "limited"} {
		out["leasebus.subscription."+c+"{"+base+"}"] = st[c]
	}
	out["leasebus.subscription.oldest_visible.age{"+base+"}"] = st["age"]
	for k, v := range out {
		if v == "" {
			out[k] = "0"
		}
	}
	return out
}

// The scenario: publish 3, deliver 2, ack 1, let the other's lease
// expire on its last attempt, move the clock 90s; every instrument then
// reads exactly what Stats says, with the subscription's attributes.
func TestObserveSubscriptionExact(t *testing.T) {
	tel := newTelemetry(t)
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "orders", "billing",
		broker.WithMaxAttempts(1), broker.WithVisibilityTimeout(time.Minute))
	reg, err := otelleasebus.ObserveSubscription(sub, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}

	// Before anything: every series is there, at zero.
	equalPoints(t, tel.collect(t), statsPoints("orders", "billing", nil))

	brokertest.Publish(t, b, "orders", "a", "b", "c")
	ds := sub.TryPoll(2)
	if len(ds) != 2 {
		t.Fatalf("TryPoll(2) = %d deliveries", len(ds))
	}
	if err := sub.Ack(ds[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	mock.Add(90 * time.Second) // the second lease expires at 60s: dead-lettered, its one attempt spent

	equalPoints(t, tel.collect(t), statsPoints("orders", "billing", map[string]string{
		"visible":         "1",
		"published":       "3",
		"delivered":       "2",
		"acked":           "1",
		"dl.max-attempts": "1",
		"age":             "90", // "c", published 90s ago, never delivered
	}))

	// A redelivery, a purge and a redrive move their counters.
	mock.Add(10 * time.Second)
	if n, err := b.Redrive(func(queue.DeadLetter[string]) bool { return true }); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	if n, err := sub.Purge(); err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	equalPoints(t, tel.collect(t), statsPoints("orders", "billing", map[string]string{
		"published":       "3",
		"delivered":       "2",
		"acked":           "1",
		"dl.max-attempts": "1",
		"dropped":         "2",
		"redriven":        "1",
	}))

	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	equalPoints(t, tel.collect(t), map[string]string{})
}

// Every dead-letter reason has its series, and so have delayed messages
// and refused publishes.
func TestObserveSubscriptionReasons(t *testing.T) {
	tel := newTelemetry(t)
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "jobs", "w", broker.WithMaxQueue(2))
	full := brokertest.Subscribe(t, b, "capped", "full", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowReject))
	for _, s := range []otelleasebus.Subscription{sub, full} {
		reg, err := otelleasebus.ObserveSubscription(s, tel.options()...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Unregister() })
	}
	ctx := context.Background()
	brokertest.Publish(t, b, "capped", "one")
	if _, err := b.Publish(ctx, "capped", "two"); !errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("publish to a full subscription: %v, want ErrQueueFull", err)
	}
	if _, err := b.Publish(ctx, "jobs", "ttl", broker.WithTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	mock.Add(time.Second)
	sub.Stats()                                                     // "ttl" expires: dead-lettered, no longer held
	brokertest.Publish(t, b, "jobs", "poison", "later", "overflow") // "overflow" finds "w" full: dead-lettered
	d := sub.TryPoll(1)[0]
	if err := sub.Reject(d.LeaseID, errors.New("bad")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, "jobs", "delayed", broker.WithDelay(time.Minute)); err != nil {
		t.Fatal(err)
	}
	mock.Add(5 * time.Second)

	equalPoints(t, tel.collect(t), merge(
		statsPoints("jobs", "w", map[string]string{
			"visible":     "1", // "later"
			"delayed":     "1",
			"published":   "5",
			"delivered":   "1",
			"dl.expired":  "1",
			"dl.overflow": "1",
			"dl.rejected": "1",
			"age":         "5",
		}),
		statsPoints("capped", "full", map[string]string{
			"visible":   "1",
			"published": "1",
			"rejected":  "1",
			"age":       "6",
		}),
	))
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// ObserveBroker follows the subscriptions: a new one shows from the next
// collection, a removed one is gone, a wildcard one is not among them.
func TestObserveBrokerFollowsSubscriptions(t *testing.T) {
	tel := newTelemetry(t)
	b, _ := brokertest.New[string](t)
	brokertest.Subscribe(t, b, "a", "one")
	reg, err := otelleasebus.ObserveBroker(b, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	brokertest.Publish(t, b, "a", "x")
	equalPoints(t, tel.collect(t), statsPoints("a", "one", map[string]string{"visible": "1", "published": "1"}))

	brokertest.Subscribe(t, b, "b", "two")
	if _, err := b.Subscribe("a.*", "wild"); err != nil {
		t.Fatal(err)
	}
	brokertest.Publish(t, b, "b", "y", "z")
	equalPoints(t, tel.collect(t), merge(
		statsPoints("a", "one", map[string]string{"visible": "1", "published": "1"}),
		statsPoints("b", "two", map[string]string{"visible": "2", "published": "2"}),
	))

	if err := b.Unsubscribe("a", "one"); err != nil {
		t.Fatal(err)
	}
	equalPoints(t, tel.collect(t), statsPoints("b", "two", map[string]string{"visible": "2", "published": "2"}))

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	equalPoints(t, tel.collect(t), map[string]string{})
}

// ObserveStats takes a function that may fail (a remote backend's): a
// failure records nothing and reaches the reader; a success records.
func TestObserveStatsError(t *testing.T) {
	tel := newTelemetry(t)
	fail := errors.New("backend down")
	var err error
	reg, regErr := otelleasebus.ObserveStats("t", "", func(context.Context) (queue.Stats, error) {
		return queue.Stats{Visible: 4, Published: 9, DeadLettered: 2, DeadLetteredBy: queue.DeadLetterCounts{Overflow: 1}}, err
	}, tel.options(otelleasebus.WithAttributes(attribute.String("deployment", "eu")))...)
	if regErr != nil {
		t.Fatal(regErr)
	}
	defer reg.Unregister()

	// No subscription name: no subscription attributes. DeadLettered beyond
	// the reasons shows as "unknown".
	base := "deployment=eu,messaging.destination.name=t,messaging.system=leasebus"
	with := func(kv string) string { return sortedJoin(append(strings.Split(base, ","), kv)) }
	want := map[string]string{
		"leasebus.subscription.messages{" + with("leasebus.message.state=visible") + "}":                "4",
		"leasebus.subscription.messages{" + with("leasebus.message.state=delayed") + "}":                "0",
		"leasebus.subscription.messages{" + with("leasebus.message.state=in_flight") + "}":              "0",
		"leasebus.subscription.messages{" + with("leasebus.message.state=held_back") + "}":              "0",
		"leasebus.subscription.dead_lettered{" + with("leasebus.dead_letter.reason=max-attempts") + "}": "0",
		"leasebus.subscription.dead_lettered{" + with("leasebus.dead_letter.reason=overflow") + "}":     "1",
		"leasebus.subscription.dead_lettered{" + with("leasebus.dead_letter.reason=expired") + "}":      "0",
		"leasebus.subscription.dead_lettered{" + with("leasebus.dead_letter.reason=rejected") + "}":     "0",
		"leasebus.subscription.dead_lettered{" + with("leasebus.dead_letter.reason=cancelled") + "}":    "0",
		"leasebus.subscription.dead_lettered{" + with("leasebus.dead_letter.reason=unknown") + "}":      "1",
		"leasebus.subscription.oldest_visible.age{" + base + "}":                                        "0",
		"leasebus.subscription.published{" + base + "}":                                                 "9",
	}
	for _, c := range []string{"delivered", "acked", "redelivered", "dropped", "redriven", "rejected", "limited"} {
		want["leasebus.subscription."+c+"{"+base+"}"] = "0"
	}
	equalPoints(t, tel.collect(t), want)

	err = fail
	var rm metricdata.ResourceMetrics
	if cerr := tel.reader.Collect(context.Background(), &rm); !errors.Is(cerr, fail) {
		t.Fatalf("collect with a failing stats: %v, want %v", cerr, fail)
	}
}

// Bad arguments are errors matching queue.ErrInvalidArgument, never
// panics.
func TestInvalidArguments(t *testing.T) {
	b, _ := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "t", "s")
	stats := func(context.Context) (queue.Stats, error) { return queue.Stats{}, nil }
	cases := map[string]func() error{
		"ObserveSubscription(nil)": func() error { _, err := otelleasebus.ObserveSubscription(nil); return err },
		"ObserveBroker(nil)":       func() error { _, err := otelleasebus.ObserveBroker[string](nil); return err },
		"ObserveStats empty topic": func() error { _, err := otelleasebus.ObserveStats("", "s", stats); return err },
		"ObserveStats nil func":    func() error { _, err := otelleasebus.ObserveStats("t", "s", nil); return err },
		"zero option":              func() error { _, err := otelleasebus.ObserveSubscription(sub, otelleasebus.Option{}); return err },
		"WithClock(nil)":           func() error { _, err := otelleasebus.NewMiddleware(sub, otelleasebus.WithClock(nil)); return err },
		"NewPublisher(nil)":        func() error { _, err := otelleasebus.NewPublisher[string](nil); return err },
		"NewMiddleware(nil)":       func() error { _, err := otelleasebus.NewMiddleware[string](nil); return err },
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error matching queue.ErrInvalidArgument", name, err)
		} else if !strings.HasPrefix(err.Error(), "otelleasebus: ") {
			t.Errorf("%s: %q does not say where it comes from", name, err)
		}
	}
}

// What a subscription's rate limit holds back reads as
// leasebus.subscription.limited.
func TestObserveSubscriptionLimited(t *testing.T) {
	tel := newTelemetry(t)
	b, _ := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "webhooks", "deliver", broker.WithRateLimit(1, time.Minute))
	reg, err := otelleasebus.ObserveSubscription(sub, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	brokertest.Publish(t, b, "webhooks", "a", "b", "c")
	if ds := sub.TryPoll(3); len(ds) != 1 {
		t.Fatalf("TryPoll: %d, want the one token's", len(ds))
	}
	key := "leasebus.subscription.limited{" + subAttrs("webhooks", "deliver") + "}"
	if got := tel.collect(t)[key]; got != "2" {
		t.Fatalf("%s = %q, want 2", key, got)
	}
}
