package leasebuspubsub_test

import (
	"errors"
	"testing"

	"gocloud.dev/pubsub"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/leasebuspubsub"
	"github.com/leasebus/leasebus/queue"
)

func TestURLOpener(t *testing.T) {
	ctx := guard(t)
	b, _ := brokertest.New[[]byte](t)
	brokertest.Subscribe(t, b, "orders.eu", "billing")
	if _, err := b.Subscribe("orders.>", "audit"); err != nil {
		t.Fatal(err)
	}
	mux := new(pubsub.URLMux)
	if err := leasebuspubsub.Register(mux, b); err != nil {
		t.Fatal(err)
	}

	top, err := mux.OpenTopic(ctx, "leasebus://orders.eu")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = top.Shutdown(ctx) }()
	send(t, ctx, top, "order 1", nil)

	for _, u := range []string{
		"leasebus://orders.eu?subscription=billing",
		"leasebus:///orders.>?subscription=audit", // a pattern, in the path form
	} {
		s, err := mux.OpenSubscription(ctx, u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		m, d := receive(t, ctx, s)
		if string(m.Body) != "order 1" || d.Topic != "orders.eu" {
			t.Fatalf("%s: got %q on %q", u, m.Body, d.Topic)
		}
		m.Ack()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}

	var tb *broker.Broker[[]byte]
	if !top.As(&tb) || tb != b {
		t.Fatal("the URL's topic is not on the registered broker")
	}
}

func TestURLOpenerRefusesBadURLs(t *testing.T) {
	ctx := guard(t)
	b, _ := brokertest.New[[]byte](t)
	mux := new(pubsub.URLMux)
	if err := leasebuspubsub.Register(mux, b); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		"leasebus://orders?subscription=billing", // a topic takes no parameters
		"leasebus://",
		"leasebus:orders",
		"leasebus://a b",
	} {
		if top, err := mux.OpenTopic(ctx, u); err == nil {
			_ = top.Shutdown(ctx)
			t.Errorf("OpenTopic(%q): nil error", u)
		}
	}
	for _, u := range []string{
		"leasebus://orders",
		"leasebus://orders?subscription=",
		"leasebus://orders?subscription=a&subscription=b",
		"leasebus://orders?subscription=billing&ackdeadline=1m",
		"leasebus://?subscription=billing",
	} {
		s, err := mux.OpenSubscription(ctx, u)
		if err == nil {
			_ = s.Shutdown(ctx)
			t.Errorf("OpenSubscription(%q): nil error", u)
			continue
		}
		if !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("OpenSubscription(%q): %v, want an error matching queue.ErrInvalidArgument", u, err)
		}
	}
	// The opener's own zero value has no broker.
	var o leasebuspubsub.URLOpener
	mux2 := new(pubsub.URLMux)
	mux2.RegisterTopic("x", &o)
	if _, err := mux2.OpenTopic(ctx, "x://orders"); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("an opener without a broker: %v", err)
	}
}

func TestRegister(t *testing.T) {
	b, _ := brokertest.New[[]byte](t)
	mux := new(pubsub.URLMux)
	if err := leasebuspubsub.Register(nil, b); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("nil mux: %v", err)
	}
	if err := leasebuspubsub.Register(mux, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("nil broker: %v", err)
	}
	if err := leasebuspubsub.Register(mux, b); err != nil {
		t.Fatal(err)
	}
	if !mux.ValidTopicScheme(leasebuspubsub.Scheme) || !mux.ValidSubscriptionScheme(leasebuspubsub.Scheme) {
		t.Fatal("not registered for both topics and subscriptions")
	}
	if err := leasebuspubsub.Register(mux, b); !errors.Is(err, leasebuspubsub.ErrRegistered) {
		t.Errorf("second Register: %v, want ErrRegistered (and no panic)", err)
	}
	// Half registered (by hand, for topics only): refused, nothing added.
	half := new(pubsub.URLMux)
	half.RegisterTopic(leasebuspubsub.Scheme, &leasebuspubsub.URLOpener{Broker: b})
	if err := leasebuspubsub.Register(half, b); !errors.Is(err, leasebuspubsub.ErrRegistered) {
		t.Errorf("half registered: %v", err)
	}
	if half.ValidSubscriptionScheme(leasebuspubsub.Scheme) {
		t.Error("Register registered subscriptions after refusing")
	}
}
