package sqstest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// The in-memory server serves the AWS SDK inside a synctest bubble, in
// the bubble's time: a long poll parked for 20s is woken by a send 3s in,
// at that instant; the message's visibility timeout (30s) then passes
// and a receive gets it again, its receive count 2; a long poll with
// nothing to receive returns empty after exactly its wait.
func TestInMemoryInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := sqstest.StartInMemory(t)
		if srv.HTTP != nil || srv.Clock != nil {
			t.Fatalf("HTTP %v, Clock %v: want neither", srv.HTTP, srv.Clock)
		}
		url := srv.CreateQueue(t, "jobs", map[string]string{"VisibilityTimeout": "30"})
		ctx := context.Background()
		start := time.Now()
		type got struct {
			out *sqs.ReceiveMessageOutput
			err error
			at  time.Duration
		}
		received := make(chan got, 1)
		receive := func(wait int32) {
			out, err := srv.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(url), WaitTimeSeconds: wait,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
			})
			received <- got{out, err, time.Since(start)}
		}
		go receive(20)
		time.Sleep(3 * time.Second)
		if _, err := srv.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("resize")}); err != nil {
			t.Fatal(err)
		}
		r := <-received
		if r.err != nil || len(r.out.Messages) != 1 || r.at != 3*time.Second {
			t.Fatalf("first receive: %v, %v at %v; want the message at 3s", r.out, r.err, r.at)
		}
		go receive(20) // the message is in flight until 33s
		r = <-received
		if r.err != nil || len(r.out.Messages) != 0 || r.at != 23*time.Second {
			t.Fatalf("second receive: %v, %v at %v; want nothing at 23s", r.out, r.err, r.at)
		}
		go receive(20) // visible again at 33s
		r = <-received
		if r.err != nil || len(r.out.Messages) != 1 || r.at != 33*time.Second ||
			r.out.Messages[0].Attributes["ApproximateReceiveCount"] != "2" {
			t.Fatalf("third receive: %v, %v at %v; want the message again at 33s, its second receive", r.out, r.err, r.at)
		}
	})
}
