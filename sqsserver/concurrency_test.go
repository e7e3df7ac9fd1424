package sqsserver_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Four consumers drain 300 messages sent by three producers at the same
// time; each message is received once (no visibility passes) and deleted,
// none is lost. Run under -race.
func TestConcurrentProducersAndConsumers(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", nil)
	ctx := ctxFor(t)
	const producers, perProducer, consumers = 3, 100, 4
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := 0; i < perProducer; i += 10 {
				var entries []types.SendMessageBatchRequestEntry
				for j := range 10 {
					entries = append(entries, entry("e"+strconv.Itoa(j), strconv.Itoa(p)+"-"+strconv.Itoa(i+j)))
				}
				out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err != nil || len(out.Failed) != 0 {
					t.Errorf("send: %v %v", err, out)
					return
				}
			}
		})
	}
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	for range consumers {
		wg.Go(func() {
			for {
				mu.Lock()
				done := total == producers*perProducer
				mu.Unlock()
				if done || ctx.Err() != nil {
					return
				}
				out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
				if err != nil {
					t.Errorf("receive: %v", err)
					return
				}
				for _, m := range out.Messages {
					if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
						t.Errorf("delete: %v", err)
					}
					mu.Lock()
					seen[aws.ToString(m.Body)]++
					total++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != producers*perProducer {
		t.Fatalf("%d distinct messages, want %d", len(seen), producers*perProducer)
	}
	for b, n := range seen {
		if n != 1 {
			t.Fatalf("%s received %d times", b, n)
		}
	}
}

// Within a FIFO group, the order of delivery is the order of the sequence
// numbers, also when producers send to the group at the same time: a
// sequence number is given in the order the queue takes the messages.
func TestFIFOSequenceOrderUnderConcurrentSends(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	ctx := ctxFor(t)
	const producers, perProducer = 8, 40
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageGroupId: aws.String("g"),
					MessageBody: aws.String(strconv.Itoa(p) + "-" + strconv.Itoa(i))}); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	last := ""
	for n := range producers * perProducer {
		ms := receive(t, c, url, 10)
		if len(ms) != 1 {
			t.Fatalf("receive %d: %d messages", n, len(ms))
		}
		seq := ms[0].Attributes["SequenceNumber"]
		if seq <= last {
			t.Fatalf("message %d of the group has sequence number %s after %s", n, seq, last)
		}
		last = seq
		must[*sqs.DeleteMessageOutput](t)(c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: ms[0].ReceiptHandle}))
	}
}
