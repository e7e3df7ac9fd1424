// Package consumer is an SQS consumer written against the AWS SDK for Go,
// as a team that runs on SQS would write it, with nothing of leasebus in
// it. Its test (consumer_test.go) runs it against the leasebus SQS server
// on a mock clock, and moves the clock past the visibility timeout instead
// of sleeping through it.
package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// API is the part of *sqs.Client the consumer uses.
type API interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// Consumer long-polls a queue and hands each message to Handle. A message
// Handle returns nil for is deleted; one it fails is left alone, so SQS
// delivers it again once its visibility timeout has passed (and, with a
// RedrivePolicy, moves it to the dead-letter queue after maxReceiveCount
// receives).
type Consumer struct {
	Client   API    // an *sqs.Client, or anything with its two methods
	QueueURL string // the queue to consume
	// Handle processes one message; the message's Attributes include
	// ApproximateReceiveCount.
	Handle func(ctx context.Context, m types.Message) error
	// WaitTimeSeconds is each long poll's wait (default 20).
	WaitTimeSeconds int32
}

// Run polls until ctx ends, and then returns nil. A message being handled
// when ctx ends is finished and deleted first.
func (c *Consumer) Run(ctx context.Context) error {
	for {
		if _, err := c.PollOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// PollOnce makes one long poll and handles what it received; it returns
// how many messages were handled successfully.
func (c *Consumer) PollOnce(ctx context.Context) (int, error) {
	wait := c.WaitTimeSeconds
	if wait == 0 {
		wait = 20
	}
	out, err := c.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.QueueURL),
		MaxNumberOfMessages:         10,
		WaitTimeSeconds:             wait,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return 0, fmt.Errorf("receive: %w", err)
	}
	ok := 0
	var errs []error
	for _, m := range out.Messages {
		if err := c.Handle(ctx, m); err != nil {
			continue // visible again after the visibility timeout
		}
		// Deleting what was done must not be cut short by a shutdown.
		if _, err := c.Client.DeleteMessage(context.WithoutCancel(ctx), &sqs.DeleteMessageInput{
			QueueUrl: aws.String(c.QueueURL), ReceiptHandle: m.ReceiptHandle,
		}); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", aws.ToString(m.MessageId), err))
			continue
		}
		ok++
	}
	return ok, errors.Join(errs...)
}
