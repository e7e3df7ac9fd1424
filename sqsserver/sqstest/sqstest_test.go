package sqstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The helper's server runs on the mock at Epoch, its client works, and
// AwaitParked sees a long poll that a move of the clock then ends.
func TestHelper(t *testing.T) {
	client, mock := sqstest.New(t)
	if !mock.Now().Equal(sqstest.Epoch) {
		t.Fatal(mock.Now())
	}
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "q", nil)
	done := make(chan error, 1)
	go func() {
		out, err := srv.Client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 5})
		if err == nil && len(out.Messages) != 0 {
			t.Error("received from an empty queue")
		}
		done <- err
	}()
	srv.AwaitParked(t, "q", 1)
	srv.Clock.Add(5 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := client.ListQueues(context.Background(), &sqs.ListQueuesInput{}); err != nil {
		t.Fatal(err)
	}
}
