package sqsserver_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

const benchBody = "a message body of about one hundred bytes, like a small JSON document with an ID and a few fields...."

// BenchmarkSQSRoundTrip sends, receives and deletes batches of 10 through
// the AWS SDK against the server on loopback (real clock, in memory): one
// op is one batch, msg/s counts messages.
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
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String("m" + strconv.Itoa(i)), MessageBody: aws.String(benchBody)}
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

// BenchmarkInProcessRoundTrip is the same loop against the broker in
// process: PublishBatch of 10, Poll of 10, AckBatch.
func BenchmarkInProcessRoundTrip(b *testing.B) {
	br, err := broker.New[sqsserver.Message](broker.WithMaxAttempts(queue.UnlimitedAttempts))
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := br.CreateTopic("bench"); err != nil {
		b.Fatal(err)
	}
	sub, err := br.Subscribe("bench", "sqs")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	payloads := make([]sqsserver.Message, 10)
	for i := range payloads {
		payloads[i] = sqsserver.Message{Body: benchBody}
	}
	ids := make([]lease.ID, 0, 10)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := br.PublishBatch(ctx, "bench", payloads); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < 10; {
			ds, err := sub.Poll(ctx, 10)
			if err != nil {
				b.Fatal(err)
			}
			ids = ids[:0]
			for _, d := range ds {
				ids = append(ids, d.LeaseID)
			}
			if err := sub.AckBatch(ids); err != nil {
				b.Fatal(err)
			}
			got += len(ds)
		}
	}
	b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "msg/s")
}
