package sqsserver_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// BenchmarkSQSRoundTrip sends, receives and deletes batches of 10 through
// the AWS SDK against the server on loopback (real clock, in memory): one
// op is one batch, msg/s counts messages. BenchmarkInProcessRoundTrip
// (bench_internal_test.go) is the same loop against the broker.
func BenchmarkSQSRoundTrip(b *testing.B) {
	srv, err := sqsserver.New()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := sqstest.NewClient(hs.URL, hs.Client())
	ctx := context.Background()
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("bench")})
	if err != nil {
		b.Fatal(err)
	}
	entries := make([]types.SendMessageBatchRequestEntry, 10)
	for i := range entries {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String("m" + strconv.Itoa(i)), MessageBody: aws.String(sqsserver.BenchBody)}
	}
	del := make([]types.DeleteMessageBatchRequestEntry, 10)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: entries}); err != nil {
			b.Fatal(err)
		}
		got := 0
		for got < 10 {
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10})
			if err != nil {
				b.Fatal(err)
			}
			del = del[:0]
			for i, m := range out.Messages {
				del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String("d" + strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
			if len(del) == 0 {
				continue
			}
			if _, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: del}); err != nil {
				b.Fatal(err)
			}
			got += len(del)
		}
	}
	b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "msg/s")
}
