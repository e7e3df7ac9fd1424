package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
)

// Signup is one job: welcome a new user.
type Signup struct {
	User  int    `json:"user"`
	Email string `json:"email"`
}

// queueName is the example's queue; its dead-letter queue is queueName-dlq.
const queueName = "leasebus-example-signups"

// run creates the queues if they are missing, publishes a batch of
// signups, runs a pool until each is welcomed or dead-lettered (one has a
// bad address, and its handler gives up), fixes the dead letter's address
// and redrives it, and runs the pool again. It writes what happened to out.
func run(ctx context.Context, client *sqs.Client, clk clock.Clock, out io.Writer) error {
	url, err := ensureQueues(ctx, client)
	if err != nil {
		return err
	}
	pub, err := sqsleasebus.NewPublisher[Signup](client, nil, sqsleasebus.WithClock(clk))
	if err != nil {
		return err
	}
	signups := []Signup{{1, "ada@example.com"}, {2, "grace@example.com"}, {3, "edsger(at)example.com"}, {4, "barbara@example.com"}}
	if _, err := pub.PublishBatch(ctx, queueName, signups); err != nil {
		return err
	}
	fmt.Fprintf(out, "published %d signups to %s\n", len(signups), queueName)

	sub, err := sqsleasebus.Subscribe[Signup](ctx, client, url, nil, sqsleasebus.WithClock(clk), sqsleasebus.WithMaxAttempts(3))
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := drain(ctx, sub, len(signups), out); err != nil {
		return err
	}

	n, err := sub.RedriveWith(ctx, func(dl queue.DeadLetter[Signup]) (Signup, bool) {
		fmt.Fprintf(out, "dead letter: user %d, %s after %d attempt(s): %s\n", dl.Message.Payload.User, dl.Reason, dl.Attempts, dl.LastError)
		s := dl.Message.Payload
		s.Email = strings.Replace(s.Email, "(at)", "@", 1)
		return s, true
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "redrove %d with the address fixed\n", n)
	return drain(ctx, sub, n, out)
}

// drain runs a pool over sub until n messages are welcomed or
// dead-lettered.
func drain(ctx context.Context, sub *sqsleasebus.Subscription[Signup], n int, out io.Writer) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu   sync.Mutex
		done int
	)
	p, err := poller.New[Signup](sub, welcome(out), poller.WithWorkers(4),
		poller.WithObserver(func(ev poller.Event[Signup]) {
			if ev.Outcome != poller.OutcomeAcked && ev.Outcome != poller.OutcomeDeadLettered {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if done++; done == n {
				stop()
			}
		}))
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

// welcome is the handler: it "sends" the welcome mail, and gives up on an
// address that cannot be one (no retry would help: it is dead-lettered at
// once).
func welcome(out io.Writer) poller.Handler[Signup] {
	var mu sync.Mutex
	return func(_ context.Context, d queue.Delivery[Signup]) error {
		if !strings.Contains(d.Payload.Email, "@") {
			return poller.GiveUp(fmt.Errorf("%q is not an email address", d.Payload.Email))
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "welcomed user %d at %s (attempt %d)\n", d.Payload.User, d.Payload.Email, d.Attempt)
		return nil
	}
}

// ensureQueues creates the queue and its dead-letter queue (3 receives)
// unless they exist, and returns the queue's URL.
func ensureQueues(ctx context.Context, client *sqs.Client) (string, error) {
	dlq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(queueName + "-dlq")})
	if err != nil {
		return "", fmt.Errorf("create the dead-letter queue: %w", err)
	}
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", err
	}
	arn := attrs.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", errors.New("the dead-letter queue has no ARN")
	}
	policy, err := json.Marshal(map[string]string{"deadLetterTargetArn": arn, "maxReceiveCount": "3"})
	if err != nil {
		return "", err
	}
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(queueName), Attributes: map[string]string{
		"RedrivePolicy": string(policy), "VisibilityTimeout": "30",
	}})
	if err != nil {
		return "", fmt.Errorf("create the queue: %w", err)
	}
	return aws.ToString(q.QueueUrl), nil
}
