package sqsserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

type received struct {
	ms  []types.Message
	err error
}

// longPoll starts a ReceiveMessage with WaitTimeSeconds wait in a goroutine.
func longPoll(ctx context.Context, c *sqs.Client, url string, wait int32) <-chan received {
	ch := make(chan received, 1)
	go func() {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), WaitTimeSeconds: wait, MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			ch <- received{err: err}
			return
		}
		ch <- received{ms: out.Messages}
	}()
	return ch
}

func await(t *testing.T, ch <-chan received) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(hangGuard): // a hang guard, not a timing assertion
		t.Fatal("the long poll did not return")
		return received{}
	}
}

// A long poll returns as soon as a send makes a message visible.
func TestLongPollWokenBySend(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", nil)
	ch := longPoll(ctxFor(t), c, url, 20)
	srv.AwaitParked(t, "q", 1)
	send(t, c, url, "hello")
	r := await(t, ch)
	if r.err != nil || len(r.ms) != 1 || aws.ToString(r.ms[0].Body) != "hello" {
		t.Fatalf("%v %v", r.err, bodies(r.ms))
	}
}

// A long poll returns when another receive's visibility is changed to 0,
// and when a lease expires as the clock moves.
func TestLongPollWokenByVisibility(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", map[string]string{"VisibilityTimeout": "60"})
	send(t, c, url, "a")
	m := receive(t, c, url, 1)[0]

	ch := longPoll(ctxFor(t), c, url, 20)
	srv.AwaitParked(t, "q", 1)
	must[*sqs.ChangeMessageVisibilityOutput](t)(c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}))
	r := await(t, ch)
	if r.err != nil || len(r.ms) != 1 || r.ms[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("woken by the visibility change: %v %v", r.err, r.ms)
	}
	second := r.ms[0]

	// Now its 60 s lease runs out while a poll waits for 20 s at a time.
	ch = longPoll(ctxFor(t), c, url, 20)
	srv.AwaitParked(t, "q", 1)
	srv.Clock.Add(20 * time.Second)
	if r := await(t, ch); r.err != nil || len(r.ms) != 0 {
		t.Fatalf("the wait should end empty at 20 s: %v %v", r.err, r.ms)
	}
	ch = longPoll(ctxFor(t), c, url, 20)
	srv.AwaitParked(t, "q", 1)
	srv.Clock.Add(20 * time.Second) // 40 s
	if r := await(t, ch); len(r.ms) != 0 {
		t.Fatalf("visible at 40 s: %v", r.ms)
	}
	// At 40 s the lease is set to end at 50 s; a poll waits until 60 s.
	must[*sqs.ChangeMessageVisibilityOutput](t)(c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: second.ReceiptHandle, VisibilityTimeout: 10}))
	ch = longPoll(ctxFor(t), c, url, 20)
	srv.AwaitParked(t, "q", 1)
	srv.Clock.Add(5 * time.Second) // 45 s: still leased
	srv.AwaitParked(t, "q", 1)
	srv.Clock.Add(5 * time.Second) // 50 s: the lease expires, inside the wait
	if r := await(t, ch); r.err != nil || len(r.ms) != 1 || r.ms[0].Attributes["ApproximateReceiveCount"] != "3" {
		t.Fatalf("woken by the expiry: %v %v", r.err, r.ms)
	}
}

// A delayed message wakes a long poll when the clock reaches it; the
// queue's ReceiveMessageWaitTimeSeconds applies to a receive that names
// no wait.
func TestLongPollDelayAndQueueWait(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", map[string]string{"ReceiveMessageWaitTimeSeconds": "20", "DelaySeconds": "10"})
	send(t, c, url, "later")
	ch := longPoll(ctxFor(t), c, url, 0) // 0 is left out: the queue's 20 s
	srv.AwaitParked(t, "q", 1)
	srv.Clock.Add(10 * time.Second)
	if r := await(t, ch); r.err != nil || len(r.ms) != 1 {
		t.Fatalf("the delayed message did not wake the poll: %v %v", r.err, r.ms)
	}
}

// A client that goes away ends its long poll: the server stops waiting
// (the receive is no longer parked) and leases nothing.
func TestLongPollEndsWithTheClient(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", nil)
	ctx, cancel := context.WithCancel(context.Background())
	ch := longPoll(ctx, c, url, 20)
	srv.AwaitParked(t, "q", 1)
	cancel()
	if r := await(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err %v", r.err)
	}
	// Wait for the server to let go of it, then check nothing was leased.
	send(t, c, url, "x")
	if ms := receive(t, c, url, 1); len(ms) != 1 {
		t.Fatal("the abandoned poll took the message")
	}
}

// Closing the server ends its long polls; later requests fail cleanly.
func TestCloseEndsLongPolls(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", nil)
	ch := longPoll(ctxFor(t), c, url, 20)
	srv.AwaitParked(t, "q", 1)
	if err := srv.Server.Close(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, await(t, ch).err, "ServiceUnavailable") // not QueueDoesNotExist: the queue is there
	_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")})
	wantCode(t, err, "ServiceUnavailable")
	if err := srv.Server.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// Deleting a queue ends its long polls with QueueDoesNotExist.
func TestDeleteQueueEndsLongPolls(t *testing.T) {
	srv, c := start(t)
	url := srv.CreateQueue(t, "q", nil)
	ch := longPoll(ctxFor(t), c, url, 20)
	srv.AwaitParked(t, "q", 1)
	must[*sqs.DeleteQueueOutput](t)(c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}))
	wantCode(t, await(t, ch).err, "AWS.SimpleQueueService.NonExistentQueue")
}
