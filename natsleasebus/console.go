package natsleasebus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// minServerPause is the oldest nats-server that pauses a consumer.
var minServerPause = serverVersion{2, 11, 0}

// consoleNote is what the console says of every JetStream subscription.
const consoleNote = "JetStream keeps no publish, ack or dead-letter counters for a subscription, " +
	"and does not count delayed or held-back messages: those figures stay 0. " +
	"The console cannot show the messages a subscription holds without leasing them."

// ConsoleBackend returns b as a console backend, to serve with
// console.NewFor: every subscription of the bus (its consumers, wildcard
// ones included) with what the server counts (visible, in flight,
// delivered) and its settings; the dead letters of every subscription,
// with redrive (as they were, or with an edited payload) and discard;
// purge; and pause and resume, on nats-server 2.11 or newer (a paused
// consumer holds its pulls: Poll waits; on an older server they fail with
// an error matching ErrUnsupported). It cannot peek at the messages a
// subscription holds. opts may set WithCodec (for T) and WithPollSlice;
// any other subscribe option is ignored. A bad codec is an error
// matching queue.ErrInvalidArgument.
//
// Every page reads the server afresh: the subscriptions are one request,
// and each subscription's dead letters are read from its dead-letter
// subject, so a page costs a few round trips per subscription.
func ConsoleBackend[T any](b *Bus, opts ...SubscribeOption) (backend.Inspector[T], error) {
	if b == nil {
		return nil, backend.Invalid("ConsoleBackend: nil bus")
	}
	cfg, codec, err := deadLetterConfig[T](opts)
	if err != nil {
		return nil, err
	}
	return &consoleBackend[T]{b: b, codec: codec, pollSlice: cfg.pollSlice}, nil
}

type consoleBackend[T any] struct {
	b         *Bus
	codec     queue.Codec[T]
	pollSlice time.Duration
}

func (c *consoleBackend[T]) Now() time.Time { return time.Now() }

func (c *consoleBackend[T]) Subscriptions(ctx context.Context) ([]backend.SubscriptionInfo, error) {
	l := c.b.stream.ListConsumers(ctx)
	var out []backend.SubscriptionInfo
	for info := range l.Info() {
		if si, ok := c.info(info); ok {
			out = append(out, si)
		}
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	return out, nil
}

// info describes a subscription's consumer; ok is false for a consumer
// that is not a subscription's.
func (c *consoleBackend[T]) info(info *js.ConsumerInfo) (si backend.SubscriptionInfo, ok bool) {
	cfg := &info.Config
	var topic string
	for _, f := range filters(cfg) {
		if t, ok := c.b.topicOf(f); ok {
			topic = t
		}
	}
	name, found := strings.CutPrefix(cfg.Durable, durableName(topic, ""))
	if topic == "" || !found || name == "" || durableName(topic, name) != cfg.Durable {
		return si, false
	}
	opts := []backend.Setting{
		{Option: "WithVisibilityTimeout", Value: cfg.AckWait.String()},
		{Option: "WithMaxAttempts", Value: attemptsText(attemptsOf(cfg))},
		{Option: "WithMaxInFlight", Value: fmt.Sprint(cfg.MaxAckPending)},
	}
	return backend.SubscriptionInfo{
		Topic: topic, Name: name, Note: consoleNote, Options: opts,
		Stats: queue.Stats{
			Visible: int(info.NumPending), InFlight: info.NumAckPending,
			Delivered: info.Delivered.Consumer, Paused: info.Paused,
		},
	}, true
}

func attemptsText(n int) string {
	if n == queue.UnlimitedAttempts {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// consumer returns the consumer of the subscription name of topic, or an
// error matching queue.ErrSubscriptionNotFound.
func (c *consoleBackend[T]) consumer(ctx context.Context, topic, name string) (js.Consumer, error) {
	if err := validTopic(topic, true); err != nil {
		return nil, err
	}
	if err := validToken("subscription", name); err != nil {
		return nil, err
	}
	cons, err := c.b.stream.Consumer(ctx, durableName(normalTopic(topic), name))
	if errors.Is(err, js.ErrConsumerNotFound) {
		err = queue.ErrSubscriptionNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("subscription %s/%s: %w", topic, name, err)
	}
	return cons, nil
}

func (c *consoleBackend[T]) Subscription(ctx context.Context, topic, name string) (backend.SubscriptionInfo, error) {
	cons, err := c.consumer(ctx, topic, name)
	if err != nil {
		return backend.SubscriptionInfo{}, err
	}
	si, ok := c.info(cons.CachedInfo())
	if !ok {
		return si, fmt.Errorf("subscription %s/%s: %w", topic, name, queue.ErrSubscriptionNotFound)
	}
	return si, nil
}

// letters calls fn with every dead letter of every subscription, with
// the letter's message and its sequence in the dead letters' stream,
// until fn fails.
func (c *consoleBackend[T]) letters(ctx context.Context, fn func(si backend.SubscriptionInfo, dl queue.DeadLetter[T], m js.Msg, seq uint64) error) error {
	subs, err := c.Subscriptions(ctx)
	if err != nil {
		return err
	}
	for _, si := range subs {
		err := c.b.readDeadLetters(ctx, si.Topic, si.Name, 0, c.pollSlice, func(m js.Msg) error {
			dl, err := decodeDeadLetter(m, si.Topic, c.codec)
			if err != nil {
				return err
			}
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			return fn(si, dl, m, md.Sequence.Stream)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *consoleBackend[T]) DeadLetters(ctx context.Context) ([]queue.DeadLetter[T], error) {
	var out []queue.DeadLetter[T]
	err := c.letters(ctx, func(_ backend.SubscriptionInfo, dl queue.DeadLetter[T], _ js.Msg, _ uint64) error {
		out = append(out, dl)
		return nil
	})
	return out, err
}

// Redrive puts back the matching dead letters of every subscription (see
// the package's Redrive).
func (c *consoleBackend[T]) Redrive(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	n := 0
	err := c.letters(ctx, func(si backend.SubscriptionInfo, dl queue.DeadLetter[T], m js.Msg, seq uint64) error {
		if !match(dl) {
			return nil
		}
		fresh, err := c.b.redrive(ctx, si.Topic, si.Name, m, seq) // the payload's bytes as they were
		if fresh {
			n++
		}
		return err
	})
	return n, err
}

// RedriveWith puts back the dead letters fix picks, each with the payload
// fix gives it (encoded with the backend's codec).
func (c *consoleBackend[T]) RedriveWith(ctx context.Context, fix func(queue.DeadLetter[T]) (T, bool)) (int, error) {
	n := 0
	err := c.letters(ctx, func(si backend.SubscriptionInfo, dl queue.DeadLetter[T], m js.Msg, seq uint64) error {
		payload, ok := fix(dl)
		if !ok {
			return nil
		}
		data, err := c.codec.Encode(nil, payload)
		if err != nil {
			return fmt.Errorf("redrive dead letter %d: encode: %w", seq, err)
		}
		fresh, err := c.b.redriveData(ctx, si.Topic, si.Name, m, seq, data)
		if fresh {
			n++
		}
		return err
	})
	return n, err
}

// DiscardDeadLetters deletes the matching dead letters from the dead
// letters' stream.
func (c *consoleBackend[T]) DiscardDeadLetters(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	n := 0
	err := c.letters(ctx, func(_ backend.SubscriptionInfo, dl queue.DeadLetter[T], _ js.Msg, seq uint64) error {
		if !match(dl) {
			return nil
		}
		if err := c.b.dlStream.DeleteMsg(ctx, seq); err != nil {
			if c.b.deadLetterGone(ctx, seq) {
				return nil // a concurrent discard or redrive
			}
			return fmt.Errorf("discard dead letter %d: %w", seq, err)
		}
		n++
		return nil
	})
	return n, err
}

// Purge drops every message the subscription holds (see
// Subscription.Purge).
func (c *consoleBackend[T]) Purge(ctx context.Context, topic, name string) (int, error) {
	cons, err := c.consumer(ctx, topic, name)
	if err != nil {
		return 0, err
	}
	return c.b.purge(ctx, topic, name, cons)
}

// Pause pauses the subscription's consumer until Resume: the server holds
// its pulls, so Polls wait; publishes go on.
func (c *consoleBackend[T]) Pause(ctx context.Context, topic, name string) error {
	return c.pause(ctx, topic, name, true)
}

// Resume ends a Pause.
func (c *consoleBackend[T]) Resume(ctx context.Context, topic, name string) error {
	return c.pause(ctx, topic, name, false)
}

// pauseFor is how long a pause lasts: until resumed.
const pauseFor = 100 * 365 * 24 * time.Hour

func (c *consoleBackend[T]) pause(ctx context.Context, topic, name string, pause bool) error {
	if have, ok := parseServerVersion(c.b.js.Conn().ConnectedServerVersion()); ok && !have.atLeast(minServerPause) {
		return fmt.Errorf("nats-server %v cannot pause a consumer: it needs %v or newer: %w", have, minServerPause, ErrUnsupported)
	}
	cons, err := c.consumer(ctx, topic, name)
	if err != nil {
		return err
	}
	durable := cons.CachedInfo().Config.Durable
	if pause {
		_, err = c.b.stream.PauseConsumer(ctx, durable, time.Now().Add(pauseFor))
	} else {
		_, err = c.b.stream.ResumeConsumer(ctx, durable)
	}
	if err != nil {
		return fmt.Errorf("pause %s/%s: %w", topic, name, err)
	}
	return nil
}
