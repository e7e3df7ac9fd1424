package sqsleasebus_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// benchWorkers is the concurrency of both sides: the pool's workers, and
// the hand-written loop's goroutines.
const benchWorkers = 8

// benchServer starts a leasebus SQS server on the real clock, and a
// client whose transport keeps a connection per worker and more.
func benchServer(b *testing.B) (*sqs.Client, func()) {
	srv, err := sqsserver.New()
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 4 * benchWorkers
	client := sqstest.NewClient(hs.URL, &http.Client{Transport: tr})
	return client, func() { tr.CloseIdleConnections(); hs.Close(); _ = srv.Close() }
}

// fill sends n messages to the queue, ten a request, before the timer.
func fill(b *testing.B, client *sqs.Client, url string, n int) {
	b.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(n, i+10); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(fmt.Sprint("job ", j))})
		}
		if _, err := client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDrain drains b.N messages published before the timer, with 8
// workers on each side: "hand" is the loop a team writes with the AWS SDK
// (8 goroutines, each ReceiveMessage of 10 with a long poll, then a
// DeleteMessage for each); "pool" is poller's default pool over a
// Subscription, whose handler returns at once (its Acks made while
// another's delete is in flight go together in one DeleteMessageBatch). Compare them with benchstat: msgs/s is what counts.
func BenchmarkDrain(b *testing.B) {
	for _, batch := range []bool{false, true} {
		name := "hand"
		if batch {
			name = "hand-batch-delete"
		}
		b.Run(name, func(b *testing.B) { benchHand(b, batch) })
	}
	b.Run("pool", func(b *testing.B) {
		client, stop := benchServer(b)
		defer stop()
		ctx := context.Background()
		out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("pool")})
		if err != nil {
			b.Fatal(err)
		}
		url := aws.ToString(out.QueueUrl)
		fill(b, client, url, b.N)
		sub, err := sqsleasebus.Subscribe[string](ctx, client, url, nil, sqsleasebus.WithWaitTime(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		var acked atomic.Int64
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		p, err := poller.New[string](sub, func(context.Context, queue.Delivery[string]) error { return nil },
			poller.WithWorkers(benchWorkers),
			poller.WithObserver(func(ev poller.Event[string]) {
				if ev.Outcome == poller.OutcomeAcked && acked.Add(1) == int64(b.N) {
					cancel()
				}
			}))
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		if err := p.Run(runCtx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		if n := acked.Load(); n != int64(b.N) {
			b.Fatalf("acked %d of %d", n, b.N)
		}
	})
}

// benchHand is the hand-written loop: 8 goroutines, each a ReceiveMessage
// of 10 then a DeleteMessage for each (batch: one DeleteMessageBatch).
func benchHand(b *testing.B, batch bool) {
	client, stop := benchServer(b)
	defer stop()
	ctx := context.Background()
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("hand")})
	if err != nil {
		b.Fatal(err)
	}
	url := aws.ToString(out.QueueUrl)
	fill(b, client, url, b.N)
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Load() > 0 {
				got, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
				if err != nil {
					b.Error(err)
					return
				}
				if batch && len(got.Messages) > 0 {
					entries := make([]types.DeleteMessageBatchRequestEntry, len(got.Messages))
					for i, m := range got.Messages {
						entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle}
					}
					if _, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
						b.Error(err)
						return
					}
					left.Add(-int64(len(got.Messages)))
					continue
				}
				for _, m := range got.Messages {
					if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
						b.Error(err)
						return
					}
					left.Add(-1)
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
