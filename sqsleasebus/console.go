package sqsleasebus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Stats reads the queue's figures from its attributes: Visible is
// ApproximateNumberOfMessages, InFlight ApproximateNumberOfMessagesNotVisible,
// Delayed ApproximateNumberOfMessagesDelayed. SQS counts them
// approximately (a minute behind at worst, by its documentation) and
// keeps no counters of publishes, acks or dead letters: those fields
// stay 0, as does a count the server does not report. DeadLetterDepth
// reads the dead-letter queue.
func (s *Subscription[T]) Stats(ctx context.Context) (queue.Stats, error) {
	st, _, err := s.stats(ctx)
	return st, err
}

// stats reads Stats and, in the same request, the attributes of names.
func (s *Subscription[T]) stats(ctx context.Context, names ...types.QueueAttributeName) (queue.Stats, map[string]string, error) {
	n, at, err := s.counts(ctx, s.url, names...)
	if err != nil {
		return queue.Stats{}, nil, err
	}
	return queue.Stats{Visible: n[0], InFlight: n[1], Delayed: n[2]}, at, nil
}

// DeadLetterDepth returns how many messages the dead-letter queue holds
// (its ApproximateNumberOfMessages, visible or not); a queue without a
// RedrivePolicy returns an error matching ErrUnsupported.
func (s *Subscription[T]) DeadLetterDepth(ctx context.Context) (int, error) {
	s.mu.Lock()
	dlq := s.attrs.dlqURL
	s.mu.Unlock()
	if dlq == "" {
		return 0, fmt.Errorf("sqsleasebus: dead letters of %s: %w: the queue has no RedrivePolicy", s.name, ErrUnsupported)
	}
	a, _, err := s.counts(ctx, dlq)
	if err != nil {
		return 0, err
	}
	return a[0] + a[1] + a[2], nil
}

// countAttrs are the figures counts reads, in its order.
var countAttrs = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// counts reads the queue at url's visible, in-flight and delayed counts,
// and the attributes of names with them.
func (s *Subscription[T]) counts(ctx context.Context, url string, names ...types.QueueAttributeName) ([3]int, map[string]string, error) {
	var n [3]int
	out, err := s.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: append(names, countAttrs...)})
	if err != nil {
		return n, nil, queueError(url, "read counts", err)
	}
	for i, a := range countAttrs {
		v, ok := out.Attributes[string(a)]
		if !ok {
			continue // not reported (goaws has no Delayed): 0
		}
		if n[i], err = strconv.Atoi(v); err != nil {
			return n, nil, fmt.Errorf("sqsleasebus: %s of %s: %q is not a count", a, url, v)
		}
	}
	return n, out.Attributes, nil
}

// ConsoleTopic is the topic every queue of a ConsoleBackend is shown
// under: a console subscription is a topic and a name, and an SQS queue
// is one thing, shown as the subscription ConsoleTopic/<queue name>.
const ConsoleTopic = "sqs"

// consoleNote is what the console says beside each queue's figures.
const consoleNote = "SQS counts visible, in-flight and delayed messages approximately and keeps no publish, " +
	"ack or dead-letter counters: those figures stay 0. Reading dead letters receives them " +
	"(a receive counted on each) and shows them again at once."

// ConsoleBackend returns a console backend (console.NewFor) over the
// queues of subs: the overview shows each as the subscription
// ConsoleTopic/<queue name>, with its counts from the queue's attributes
// and its settings (visibility timeout, maxReceiveCount, delay,
// retention); the dead letters are its dead-letter queue's, which the
// console can redrive (re-sent, as Redrive does), edit and redrive
// (RedriveWith) and discard. SQS cannot show what a queue holds without
// receiving it, nor pause or purge it on the console's terms: those
// actions are not offered. No subscription, a nil one, or two on one
// queue is refused (queue.ErrInvalidArgument).
func ConsoleBackend[T any](subs ...*Subscription[T]) (backend.Inspector[T], error) {
	if len(subs) == 0 {
		return nil, backend.Invalid("ConsoleBackend: no subscription")
	}
	byName := make(map[string]*Subscription[T], len(subs))
	for _, s := range subs {
		if s == nil {
			return nil, backend.Invalid("ConsoleBackend: a nil subscription")
		}
		if _, dup := byName[s.name]; dup {
			return nil, backend.Invalid("ConsoleBackend: two subscriptions on queue %s", s.name)
		}
		byName[s.name] = s
	}
	return &consoleBackend[T]{subs: subs, byName: byName}, nil
}

type consoleBackend[T any] struct {
	subs   []*Subscription[T]
	byName map[string]*Subscription[T]
}

func (c *consoleBackend[T]) Now() time.Time { return c.subs[0].cfg.clk.Now() }

func (c *consoleBackend[T]) Subscriptions(ctx context.Context) ([]backend.SubscriptionInfo, error) {
	out := make([]backend.SubscriptionInfo, 0, len(c.subs))
	for _, s := range c.subs {
		si, err := c.info(ctx, s)
		if err != nil {
			return nil, err
		}
		out = append(out, si)
	}
	return out, nil
}

func (c *consoleBackend[T]) Subscription(ctx context.Context, topic, name string) (backend.SubscriptionInfo, error) {
	s, ok := c.byName[name]
	if topic != ConsoleTopic || !ok {
		return backend.SubscriptionInfo{}, fmt.Errorf("sqsleasebus: %s/%s: %w", topic, name, queue.ErrSubscriptionNotFound)
	}
	return c.info(ctx, s)
}

// info describes s's queue as it is now.
func (c *consoleBackend[T]) info(ctx context.Context, s *Subscription[T]) (backend.SubscriptionInfo, error) {
	st, at, err := s.stats(ctx, types.QueueAttributeNameVisibilityTimeout, types.QueueAttributeNameDelaySeconds, types.QueueAttributeNameMessageRetentionPeriod)
	if err != nil {
		return backend.SubscriptionInfo{}, err
	}
	maxA := "unlimited (no RedrivePolicy)"
	note := consoleNote
	if n := s.MaxAttempts(); n > 0 {
		maxA = fmt.Sprint(n)
		if depth, err := s.DeadLetterDepth(ctx); err == nil {
			note = fmt.Sprintf("%d in the dead-letter queue. %s", depth, consoleNote)
		}
	}
	return backend.SubscriptionInfo{
		Topic: ConsoleTopic, Name: s.name, Stats: st, Note: note,
		Options: []backend.Setting{
			{Option: "WithVisibilityTimeout", Value: secondsText(at["VisibilityTimeout"])},
			{Option: "WithMaxAttempts", Value: maxA},
			{Option: "DelaySeconds", Value: secondsText(at["DelaySeconds"])},
			{Option: "MessageRetentionPeriod", Value: secondsText(at["MessageRetentionPeriod"])},
		},
	}, nil
}

// secondsText shows an attribute in seconds as a duration.
func secondsText(v string) string {
	n, err := strconv.Atoi(v)
	if err != nil {
		return v
	}
	return (time.Duration(n) * time.Second).String()
}

// consoleMaxLetters bounds the dead letters read from each queue for one
// page of the console.
const consoleMaxLetters = 1000

func (c *consoleBackend[T]) DeadLetters(ctx context.Context) ([]queue.DeadLetter[T], error) {
	var (
		out  []queue.DeadLetter[T]
		errs []error
	)
	for _, s := range c.subs {
		if s.MaxAttempts() == 0 {
			continue // no dead-letter queue
		}
		dls, err := s.DeadLetters(ctx, consoleMaxLetters)
		for i := range dls {
			dls[i].Topic = ConsoleTopic
		}
		out = append(out, dls...)
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// each runs f on every subscription with a dead-letter queue, and sums.
func (c *consoleBackend[T]) each(f func(*Subscription[T]) (int, error)) (int, error) {
	var (
		n    int
		errs []error
	)
	for _, s := range c.subs {
		if s.MaxAttempts() == 0 {
			continue
		}
		k, err := f(s)
		n += k
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// topical returns match over dead letters as the console sees them (under
// ConsoleTopic).
func topical[T any](match func(queue.DeadLetter[T]) bool) func(queue.DeadLetter[T]) bool {
	return func(dl queue.DeadLetter[T]) bool {
		dl.Topic = ConsoleTopic
		return match == nil || match(dl)
	}
}

func (c *consoleBackend[T]) Redrive(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	return c.each(func(s *Subscription[T]) (int, error) { return s.Redrive(ctx, topical(match)) })
}

func (c *consoleBackend[T]) DiscardDeadLetters(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	return c.each(func(s *Subscription[T]) (int, error) { return s.DiscardDeadLetters(ctx, topical(match)) })
}

func (c *consoleBackend[T]) RedriveWith(ctx context.Context, fix func(queue.DeadLetter[T]) (T, bool)) (int, error) {
	return c.each(func(s *Subscription[T]) (int, error) {
		return s.RedriveWith(ctx, func(dl queue.DeadLetter[T]) (T, bool) {
			dl.Topic = ConsoleTopic
			return fix(dl)
		})
	})
}
