package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/sqsserver/examples/consumer"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The handler fails the first delivery. The test moves the clock past the
// 30 s visibility timeout (no sleep), the consumer gets the message again
// with ApproximateReceiveCount 2, handles it and deletes it.
func TestFailedMessageIsRedeliveredAfterTheVisibilityTimeout(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "orders", map[string]string{"VisibilityTimeout": "30"})
	if _, err := srv.Client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("order-1")}); err != nil {
		t.Fatal(err)
	}

	type call struct {
		body, count string
		at          time.Time
	}
	calls := make(chan call, 2)
	c := &consumer.Consumer{Client: srv.Client, QueueURL: url, Handle: func(_ context.Context, m types.Message) error {
		count := m.Attributes["ApproximateReceiveCount"]
		calls <- call{aws.ToString(m.Body), count, srv.Clock.Now()}
		if count == "1" {
			return errors.New("payment service down")
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	first := next(t, calls)
	if first.body != "order-1" || first.count != "1" {
		t.Fatalf("first delivery %+v", first)
	}
	srv.AwaitParked(t, "orders", 1) // the consumer is long-polling again
	srv.Clock.Add(30 * time.Second) // the visibility timeout passes
	second := next(t, calls)
	if second.body != "order-1" || second.count != "2" || second.at.Sub(first.at) != 30*time.Second {
		t.Fatalf("redelivery %+v, 30 s after %+v", second, first)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the consumer did not stop")
	}
	attrs, err := srv.Client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	if attrs.Attributes["ApproximateNumberOfMessages"] != "0" || attrs.Attributes["ApproximateNumberOfMessagesNotVisible"] != "0" {
		t.Fatalf("not deleted after success: %v", attrs.Attributes)
	}
}

func next[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the handler was not called")
		var zero T
		return zero
	}
}
