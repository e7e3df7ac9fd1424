package leasebuspubsub

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"gocloud.dev/pubsub"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// URLOpener opens leasebus URLs on its Broker:
//
//	leasebus://orders                           a topic
//	leasebus://orders?subscription=billing      a subscription of a topic
//	leasebus:///orders.>?subscription=audit     a subscription of a pattern
//
// The URL's host followed by its path, without a leading "/", is the topic
// (or, for a subscription, the topic or wildcard pattern). A pattern with
// ">" or "#" is best written in the path form (leasebus:///...), with "#"
// as %23, since "#" starts a URL fragment.
//
// Topic URLs take no query parameters. Subscription URLs take one, and
// need it: subscription, the subscription's name. OpenTopicURL and
// OpenSubscriptionURL are OpenTopic and OpenSubscription with the opener's
// options; an unknown parameter is an error matching
// queue.ErrInvalidArgument. An opener is safe for concurrent use.
type URLOpener struct {
	// Broker is the broker the URLs name topics and subscriptions of.
	Broker *broker.Broker[[]byte]
	// TopicOptions are the options of every topic opened.
	TopicOptions TopicOptions
	// SubscriptionOptions are the options of every subscription opened.
	SubscriptionOptions SubscriptionOptions
}

// Register registers a URLOpener on b under Scheme on mux, for topics and
// for subscriptions, so that mux.OpenTopic(ctx, "leasebus://orders") and
// mux.OpenSubscription(ctx, "leasebus://orders?subscription=billing")
// open them on b. For the package-level pubsub.OpenTopic and
// pubsub.OpenSubscription, register on the default mux once, at start-up:
//
//	err := leasebuspubsub.Register(pubsub.DefaultURLMux(), b)
//
// gocloud's own drivers register in an init function; this one does not,
// because the opener needs the program's broker (leasebus keeps no
// package-level state, so there is no default broker to open). A scheme
// already registered on mux, for topics or subscriptions, is ErrRegistered
// and registers nothing (gocloud's mux would panic). For options, or
// another scheme (one per broker), register a URLOpener yourself:
//
//	o := &leasebuspubsub.URLOpener{Broker: b, SubscriptionOptions: opts}
//	mux.RegisterTopic("jobs", o)
//	mux.RegisterSubscription("jobs", o)
//
// Like the mux's own methods, Register must not run concurrently with
// another registration on mux.
func Register(mux *pubsub.URLMux, b *broker.Broker[[]byte]) error {
	switch {
	case mux == nil:
		return fmt.Errorf("leasebuspubsub: Register: nil mux: %w", queue.ErrInvalidArgument)
	case b == nil:
		return fmt.Errorf("leasebuspubsub: Register: nil broker: %w", queue.ErrInvalidArgument)
	case mux.ValidTopicScheme(Scheme) || mux.ValidSubscriptionScheme(Scheme):
		return fmt.Errorf("leasebuspubsub: Register %q: %w", Scheme, ErrRegistered)
	}
	o := &URLOpener{Broker: b}
	mux.RegisterTopic(Scheme, o)
	mux.RegisterSubscription(Scheme, o)
	return nil
}

// OpenTopicURL opens the topic u names.
func (o *URLOpener) OpenTopicURL(_ context.Context, u *url.URL) (*pubsub.Topic, error) {
	for param := range u.Query() {
		return nil, fmt.Errorf("leasebuspubsub: open topic %v: unknown query parameter %q: %w", u, param, queue.ErrInvalidArgument)
	}
	name, err := urlTopic(u)
	if err != nil {
		return nil, err
	}
	opts := o.TopicOptions
	return OpenTopic(o.Broker, name, &opts)
}

// OpenSubscriptionURL opens the subscription u names.
func (o *URLOpener) OpenSubscriptionURL(_ context.Context, u *url.URL) (*pubsub.Subscription, error) {
	q := u.Query()
	names := q["subscription"]
	switch len(names) {
	case 0:
		return nil, fmt.Errorf("leasebuspubsub: open subscription %v: no subscription name (?subscription=NAME): %w", u, queue.ErrInvalidArgument)
	case 1:
	default:
		return nil, fmt.Errorf("leasebuspubsub: open subscription %v: %d subscription names, want one: %w", u, len(names), queue.ErrInvalidArgument)
	}
	q.Del("subscription")
	for param := range q {
		return nil, fmt.Errorf("leasebuspubsub: open subscription %v: unknown query parameter %q: %w", u, param, queue.ErrInvalidArgument)
	}
	topic, err := urlTopic(u)
	if err != nil {
		return nil, err
	}
	opts := o.SubscriptionOptions
	return OpenSubscription(o.Broker, topic, names[0], &opts)
}

// urlTopic returns the topic (or pattern) u names.
func urlTopic(u *url.URL) (string, error) {
	name := strings.TrimPrefix(u.Host+u.Path, "/")
	if u.Opaque != "" || name == "" {
		return "", fmt.Errorf("leasebuspubsub: URL %v names no topic (want %s://TOPIC): %w", u, Scheme, queue.ErrInvalidArgument)
	}
	return name, nil
}
