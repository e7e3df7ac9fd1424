package sqsleasebus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/poller/sourcetest"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// sqsHarness runs the conformance suite over the wire against leasebus's
// SQS server on its mock clock. A topic is a set of queues: each
// subscription is a queue of its own (with a dead-letter queue whose
// RedrivePolicy gives the suite's attempts), and Publish sends to each.
type sqsHarness struct {
	srv    *sqstest.Server // nil over another SQS server, on real time
	client *sqs.Client
	clk    clock.Clock
	caps   sourcetest.Capabilities

	mu     sync.Mutex
	topics map[string][]string // topic → its subscriptions' queue URLs
	subs   map[sourcetest.Subscription]string
}

func newHarness(t *testing.T) *sqsHarness {
	srv := sqstest.Start(t)
	return &sqsHarness{srv: srv, client: srv.Client, clk: srv.Clock, caps: sqstestCaps, topics: map[string][]string{}, subs: map[sourcetest.Subscription]string{}}
}

func (h *sqsHarness) Capabilities() sourcetest.Capabilities { return h.caps }

// sqstestCaps are the capabilities over leasebus's SQS server.
var sqstestCaps = sourcetest.Capabilities{
	Unit:      time.Second, // SQS counts visibility and delays in seconds
	FakeClock: true,
	// Within one Subscription: it knows when it received a message
	// again.
	StaleAck: true,
	// ChangeMessageVisibility sets the visibility to now + d.
	ArbitraryExtend: true,
	// A standard queue honours the latest receipt after the
	// visibility timeout, until the message is received again.
	LateAck: true,
	// Not ExactParking: a PollFor marks its Parking while its
	// receive is out, as the server's side is not seen from here.
	// Not ReleaseKeepsAttempt: SQS counts every receive, and
	// ChangeMessageVisibility to 0 cannot take one back. Not
	// Priorities: SQS has none.
}

func (h *sqsHarness) CreateTopic(_ context.Context, topic string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.topics[topic]; !ok {
		h.topics[topic] = nil
	}
	return nil
}

func (h *sqsHarness) queues(topic string) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	urls, ok := h.topics[topic]
	if !ok {
		return nil, fmt.Errorf("no topic %q", topic)
	}
	return urls, nil
}

func (h *sqsHarness) Publish(ctx context.Context, topic, payload string) error {
	urls, err := h.queues(topic)
	if err != nil {
		return err
	}
	for _, u := range urls {
		if _, err := h.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String(payload)}); err != nil {
			return err
		}
	}
	return nil
}

// createQueue creates the queue of a subscription, and its dead-letter
// queue, and returns its URL.
func (h *sqsHarness) createQueue(ctx context.Context, name string, o sourcetest.SubscribeOptions) (string, error) {
	dlq, err := h.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
	if err != nil {
		return "", err
	}
	attrs, err := h.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", err
	}
	arn := attrs.Attributes[string(types.QueueAttributeNameQueueArn)]
	policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": arn, "maxReceiveCount": o.MaxAttempts})
	out, err := h.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{
		"VisibilityTimeout": fmt.Sprint(int(o.VisibilityTimeout / time.Second)),
		"RedrivePolicy":     string(policy),
	}})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

func (h *sqsHarness) Subscribe(ctx context.Context, topic, name string, o sourcetest.SubscribeOptions) (sourcetest.Subscription, error) {
	return h.subscribe(ctx, topic, name, o)
}

func (h *sqsHarness) subscribe(ctx context.Context, topic, name string, o sourcetest.SubscribeOptions, opts ...sqsleasebus.Option) (*sqsleasebus.Subscription[string], error) {
	if _, err := h.queues(topic); err != nil {
		return nil, err
	}
	url, err := h.createQueue(ctx, topic+"-"+name, o)
	if err != nil {
		return nil, err
	}
	sub, err := sqsleasebus.Subscribe[string](ctx, h.client, url, nil, append([]sqsleasebus.Option{
		sqsleasebus.WithClock(h.clk),
		sqsleasebus.WithVisibilityTimeout(o.VisibilityTimeout),
		sqsleasebus.WithMaxAttempts(o.MaxAttempts),
		sqsleasebus.WithRetry(o.Retry()),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.topics[topic] = append(h.topics[topic], url)
	h.subs[sub] = topic + "-" + name
	return sub, nil
}

// DeadLetters lists the dead-letter queue once the subscription's moves
// are done, and, while it holds fewer than n, waits in a long poll on it
// (which on the mock clock only a new message ends).
func (h *sqsHarness) DeadLetters(ctx context.Context, sub sourcetest.Subscription, n int) ([]sourcetest.DeadLetter, error) {
	s := sub.(*sqsleasebus.Subscription[string])
	for {
		if err := sqsleasebus.AwaitMoves(ctx, s); err != nil {
			return nil, err
		}
		dls, err := s.DeadLetters(ctx, max(n, 10))
		if err != nil {
			return nil, err
		}
		if len(dls) >= n {
			out := make([]sourcetest.DeadLetter, 0, len(dls))
			for _, dl := range dls {
				out = append(out, sourcetest.DeadLetter{Payload: dl.Message.Payload, Reason: dl.Reason, Attempts: dl.Attempts, LastError: dl.LastError})
			}
			return out, nil
		}
		dlq, err := h.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(s.Name() + "-dlq")})
		if err != nil {
			return nil, err
		}
		if _, err := h.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: dlq.QueueUrl, WaitTimeSeconds: 20, VisibilityTimeout: 0, MaxNumberOfMessages: 1,
		}); err != nil {
			return nil, err
		}
	}
}

// PublishBatch sends with a Publisher to each queue of the topic.
func (h *sqsHarness) PublishBatch(ctx context.Context, topic string, payloads []string) error {
	return h.eachQueue(topic, func(queueName string) error {
		_, err := h.publisher().PublishBatch(ctx, queueName, payloads)
		return err
	})
}

// PublishDelay sends with a Publisher's WithDelay to each queue of the
// topic.
func (h *sqsHarness) PublishDelay(ctx context.Context, topic, payload string, delay time.Duration) error {
	return h.eachQueue(topic, func(queueName string) error {
		_, err := h.publisher().Publish(ctx, queueName, payload, queue.WithDelay(delay))
		return err
	})
}

// eachQueue calls f with the name of each queue of topic.
func (h *sqsHarness) eachQueue(topic string, f func(queueName string) error) error {
	urls, err := h.queues(topic)
	if err != nil {
		return err
	}
	for _, u := range urls {
		if err := f(topicOf(u)); err != nil {
			return err
		}
	}
	return nil
}

// Redrive re-sends the subscription's dead letters that match.
func (h *sqsHarness) Redrive(ctx context.Context, sub sourcetest.Subscription, match func(sourcetest.DeadLetter) bool) (int, error) {
	return sub.(*sqsleasebus.Subscription[string]).Redrive(ctx, func(dl queue.DeadLetter[string]) bool {
		return match(sourcetest.DeadLetter{Payload: dl.Message.Payload, Reason: dl.Reason, Attempts: dl.Attempts, LastError: dl.LastError})
	})
}

// Stats reads the queue's counts from its attributes.
func (h *sqsHarness) Stats(ctx context.Context, sub sourcetest.Subscription) (queue.Stats, error) {
	return sub.(*sqsleasebus.Subscription[string]).Stats(ctx)
}

func (h *sqsHarness) Advance(d time.Duration) error {
	if h.srv == nil {
		return sourcetest.ErrCannotAdvance
	}
	h.srv.Clock.Add(d)
	return nil
}

func (h *sqsHarness) AwaitParked(ctx context.Context, sub sourcetest.Subscription, n int) error {
	if h.srv == nil {
		return sourcetest.ErrCannotAdvance
	}
	h.mu.Lock()
	name := h.subs[sub]
	h.mu.Unlock()
	return h.srv.Server.AwaitParked(ctx, name, n)
}

func (h *sqsHarness) Close() error { return nil }

func TestConformance(t *testing.T) {
	sourcetest.Run(t, newHarness(t))
}

// publisher returns a Publisher to the harness's queues, on its clock.
func (h *sqsHarness) publisher() *sqsleasebus.Publisher[string] {
	p, err := sqsleasebus.NewPublisher[string](h.client, nil, sqsleasebus.WithClock(h.clk))
	if err != nil {
		panic(err) // a client and a clock: nothing to refuse
	}
	return p
}
