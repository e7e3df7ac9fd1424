package sqsserver_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func sendGroup(t *testing.T, c *sqs.Client, url, body, group, dedup string) *sqs.SendMessageOutput {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageGroupId: aws.String(group)}
	if dedup != "" {
		in.MessageDeduplicationId = aws.String(dedup)
	}
	out, err := c.SendMessage(context.Background(), in)
	if err != nil {
		t.Fatalf("send %s: %v", body, err)
	}
	return out
}

// Within a message group, FIFO order and one message in flight at a time;
// other groups flow.
func TestFIFOOrderPerGroup(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "orders.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	var last string
	for i := range 3 {
		for _, g := range []string{"a", "b"} {
			out := sendGroup(t, c, url, g+strconv.Itoa(i), g, "")
			if seq := aws.ToString(out.SequenceNumber); len(seq) != 20 || seq <= last {
				t.Fatalf("sequence number %q after %q", seq, last)
			} else {
				last = seq
			}
		}
	}
	ms := receive(t, c, url, 10)
	if got := bodies(ms); len(got) != 2 || got[0] != "a0" || got[1] != "b0" {
		t.Fatalf("first receive %v: want the head of each group", got)
	}
	if ms[0].Attributes["MessageGroupId"] != "a" || ms[0].Attributes["SequenceNumber"] == "" || ms[0].Attributes["MessageDeduplicationId"] == "" {
		t.Fatalf("FIFO attributes %v", ms[0].Attributes)
	}
	if more := receive(t, c, url, 10); len(more) != 0 {
		t.Fatalf("a group handed out a second message while its first is in flight: %v", bodies(more))
	}
	must[*sqs.DeleteMessageOutput](t)(c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: ms[0].ReceiptHandle}))
	if got := bodies(receive(t, c, url, 10)); len(got) != 1 || got[0] != "a1" {
		t.Fatalf("after deleting a0: %v", got)
	}
	// b0's lease runs out: b0 again, before b1.
	srv.Clock.Add(30 * time.Second)
	if got := bodies(receive(t, c, url, 10)); len(got) != 2 || got[0] != "b0" || got[1] != "a1" { // in send order
		t.Fatalf("after the leases expired: %v", got)
	}
}

// Deduplication: the same MessageDeduplicationId (or, with
// ContentBasedDeduplication, the same body) within 5 minutes is accepted
// and not queued again, and answers with the original MessageId and
// SequenceNumber; after the window it is new.
func TestFIFODeduplication(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "d.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	first := sendGroup(t, c, url, "x", "g", "id-1")
	srv.Clock.Add(5*time.Minute - time.Second)
	dup := sendGroup(t, c, url, "other body", "g", "id-1")
	if aws.ToString(dup.MessageId) != aws.ToString(first.MessageId) || aws.ToString(dup.SequenceNumber) != aws.ToString(first.SequenceNumber) {
		t.Fatalf("duplicate answered %v/%v, want %v/%v", *dup.MessageId, *dup.SequenceNumber, *first.MessageId, *first.SequenceNumber)
	}
	byBody := sendGroup(t, c, url, "body", "g", "")
	if again := sendGroup(t, c, url, "body", "g", ""); aws.ToString(again.MessageId) != aws.ToString(byBody.MessageId) {
		t.Fatal("content-based deduplication did not recognise the same body")
	}
	srv.Clock.Add(time.Second) // id-1's window is over
	if fresh := sendGroup(t, c, url, "x", "g", "id-1"); aws.ToString(fresh.MessageId) == aws.ToString(first.MessageId) {
		t.Fatal("deduplicated after the 5-minute window")
	}
	var got []string
	for {
		ms := receive(t, c, url, 10)
		if len(ms) == 0 {
			break
		}
		got = append(got, bodies(ms)...)
		for _, m := range ms {
			must[*sqs.DeleteMessageOutput](t)(c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}))
		}
	}
	if len(got) != 3 || got[0] != "x" || got[1] != "body" || got[2] != "x" {
		t.Fatalf("queued %v, want [x body x]", got)
	}
}

// With DeduplicationScope messageGroup, one ID in two groups is two
// messages.
func TestFIFODeduplicationScope(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "s.fifo", map[string]string{"FifoQueue": "true", "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"})
	a := sendGroup(t, c, url, "x", "a", "same")
	b := sendGroup(t, c, url, "x", "b", "same")
	if aws.ToString(a.MessageId) == aws.ToString(b.MessageId) {
		t.Fatal("deduplicated across groups")
	}
}

// FIFO rules: a group is required, a dedup ID or content-based dedup too,
// no per-message delay; a standard queue takes no dedup ID.
func TestFIFORules(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "r.fifo", map[string]string{"FifoQueue": "true"})
	std := srv.CreateQueue(t, "std", nil)
	_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")})
	wantCode(t, err, "MissingParameter")
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageGroupId: aws.String("g")})
	wantCode(t, err, "InvalidParameterValue")
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d"), DelaySeconds: 5})
	wantCode(t, err, "InvalidParameterValue")
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), MessageGroupId: aws.String("bad group id \x01"), MessageDeduplicationId: aws.String("d")})
	wantCode(t, err, "InvalidParameterValue")
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(std), MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")})
	wantCode(t, err, "InvalidParameterValue")
	// A standard queue takes a MessageGroupId (fair queues) and returns it.
	must[*sqs.SendMessageOutput](t)(c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(std), MessageBody: aws.String("x"), MessageGroupId: aws.String("tenant-1")}))
	if ms := receive(t, c, std, 1); len(ms) != 1 || ms[0].Attributes["MessageGroupId"] != "tenant-1" {
		t.Fatalf("fair-queue group: %v", ms)
	}
}

// A standard queue with MessageGroupIds is a fair queue: a tenant's backlog
// does not delay another tenant's message, and a tenant's messages are not
// ordered nor held back one at a time, as on FIFO.
func TestFairQueue(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "webhooks", nil)
	entries := make([]types.SendMessageBatchRequestEntry, 10)
	for range 10 {
		for i := range entries {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String("noisy"), MessageGroupId: aws.String("noisy")}
		}
		out := must[*sqs.SendMessageBatchOutput](t)(c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}))
		if len(out.Failed) != 0 {
			t.Fatalf("batch: %v", out.Failed)
		}
	}
	send(t, c, url, "plain") // no group: a tenant of its own
	sendGroup(t, c, url, "quiet", "quiet", "")

	if got := bodies(receive(t, c, url, 3)); len(got) != 3 || got[0] != "noisy" || got[1] != "plain" || got[2] != "quiet" {
		t.Fatalf("first receive %v: want each tenant's first, the noisy backlog's not ahead of the others", got)
	}
	if got := bodies(receive(t, c, url, 10)); len(got) != 10 {
		t.Fatalf("second receive: %d messages, want 10 of the noisy tenant at once", len(got))
	}
}
