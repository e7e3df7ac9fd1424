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

// A receive the client gives up on has ended on the server when the call
// returns: a message that a clock move makes visible after it goes to the
// next receive, not to the abandoned one (which would hide it for its
// visibility timeout, forever on a mock clock nobody moves). Without the
// helper's tracking, the abandoned long poll, parked until the server
// reads the closed connection, took the message in some rounds.
func TestCancelledReceiveLetsGo(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "q", map[string]string{"VisibilityTimeout": "10"})
	bg := context.Background()
	if _, err := srv.Client.SendMessage(bg, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("m")}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		out, err := srv.Client.ReceiveMessage(bg, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) != 1 {
			t.Fatalf("round %d: the receive got %d messages, want the one sent", i, len(out.Messages))
		}
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() {
			_, err := srv.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
			done <- err
		}()
		srv.AwaitParked(t, "q", 1)
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the cancelled receive succeeded")
		}
		srv.Clock.Add(10 * time.Second) // the message is visible again
	}
}
