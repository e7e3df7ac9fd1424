package sqsleasebus_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// Subscribe refuses, with a *QueueError naming the cause, a queue that
// does not exist, one whose dead-letter queue does not, credentials the
// server refuses, and attributes that contradict the options; and bad
// arguments with queue.ErrInvalidArgument.
func TestSubscribeRefusals(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	sub3 := withDLQ(t, srv, "three", 3)
	plain := srv.CreateQueue(t, "plain", nil)
	gone := srv.CreateQueue(t, "gone-dlq", nil)
	policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": srv.QueueARN(t, gone), "maxReceiveCount": 2})
	orphan := srv.CreateQueue(t, "orphan", map[string]string{"RedrivePolicy": string(policy)})
	if _, err := srv.Client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(gone)}); err != nil {
		t.Fatal(err)
	}
	denied := sqstest.Start(t, sqsserver.WithAccessKeys("someone-else"))
	deniedURL := denied.URL + "/000000000000/q"

	for _, c := range []struct {
		name   string
		client *sqs.Client
		url    string
		opts   []sqsleasebus.Option
		want   error
	}{
		{"no such queue", srv.Client, srv.URL + "/000000000000/nope", nil, sqsleasebus.ErrQueueNotFound},
		{"no such dead-letter queue", srv.Client, orphan, nil, sqsleasebus.ErrQueueNotFound},
		{"credentials refused", denied.Client, deniedURL, nil, sqsleasebus.ErrAccessDenied},
		{"attempts that contradict maxReceiveCount", srv.Client, sub3.QueueURL(), []sqsleasebus.Option{sqsleasebus.WithMaxAttempts(5)}, sqsleasebus.ErrMisconfigured},
		{"attempts without a RedrivePolicy", srv.Client, plain, []sqsleasebus.Option{sqsleasebus.WithMaxAttempts(5)}, sqsleasebus.ErrMisconfigured},
	} {
		_, err := sqsleasebus.Subscribe[string](ctx, c.client, c.url, nil, c.opts...)
		var qe *sqsleasebus.QueueError
		if !errors.Is(err, c.want) || !errors.As(err, &qe) || qe.QueueURL == "" {
			t.Errorf("%s: %v, want a *QueueError matching %v", c.name, err, c.want)
		}
	}
	for name, opts := range map[string][]sqsleasebus.Option{
		"WithVisibilityTimeout(0)":   {sqsleasebus.WithVisibilityTimeout(0)},
		"WithVisibilityTimeout(13h)": {sqsleasebus.WithVisibilityTimeout(13 * time.Hour)},
		"WithWaitTime(0)":            {sqsleasebus.WithWaitTime(0)},
		"WithWaitTime(21s)":          {sqsleasebus.WithWaitTime(21 * time.Second)},
		"WithMaxAttempts(0)":         {sqsleasebus.WithMaxAttempts(0)},
		"WithClock(nil)":             {sqsleasebus.WithClock(nil)},
		"WithAttributeRefresh(0)":    {sqsleasebus.WithAttributeRefresh(0)},
		"WithSettleTimeout(-1)":      {sqsleasebus.WithSettleTimeout(-1)},
		"a nil Option":               {nil},
	} {
		if _, err := sqsleasebus.Subscribe[string](ctx, srv.Client, plain, nil, opts...); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := sqsleasebus.Subscribe[string](ctx, nil, plain, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := sqsleasebus.Subscribe[string](ctx, srv.Client, "", nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("no URL: %v", err)
	}
}

// Delivery.MaxAttempts follows the queue's RedrivePolicy: read at
// Subscribe, and again on the first Poll after the refresh period.
func TestMaxAttemptsRefreshed(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	sub := withDLQ(t, srv, "policy", 3)
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishBatch(ctx, topicOf(sub.QueueURL()), []string{"before", "after"}); err != nil {
		t.Fatal(err)
	}
	if d := pollAll(t, sub, 1)[0]; d.MaxAttempts != 3 {
		t.Fatalf("MaxAttempts %d, want 3", d.MaxAttempts)
	}
	dlq := srv.CreateQueue(t, "policy-dlq", nil) // exists: its URL
	policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": srv.QueueARN(t, dlq), "maxReceiveCount": 5})
	if _, err := srv.Client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(sub.QueueURL()),
		Attributes: map[string]string{"RedrivePolicy": string(policy)}}); err != nil {
		t.Fatal(err)
	}
	srv.Clock.Add(time.Minute) // the default refresh
	if d := pollAll(t, sub, 1)[0]; d.MaxAttempts != 5 || sub.MaxAttempts() != 5 {
		t.Fatalf("after the refresh: MaxAttempts %d (Subscription says %d), want 5", d.MaxAttempts, sub.MaxAttempts())
	}
}
