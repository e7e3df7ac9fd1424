package sqsleasebus_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// withDLQ creates queue name with a dead-letter queue after maxReceive
// receives, and subscribes to it on the server's clock.
func withDLQ(t *testing.T, srv *sqstest.Server, name string, maxReceive int) *sqsleasebus.Subscription[string] {
	t.Helper()
	dlq := srv.CreateQueue(t, name+"-dlq", nil)
	policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": srv.QueueARN(t, dlq), "maxReceiveCount": maxReceive})
	url := srv.CreateQueue(t, name, map[string]string{"RedrivePolicy": string(policy)})
	sub, err := sqsleasebus.Subscribe[string](context.Background(), srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// rejectAll publishes payloads and rejects each delivery, so that each is
// a dead letter.
func rejectAll(t *testing.T, srv *sqstest.Server, sub *sqsleasebus.Subscription[string], payloads ...string) {
	t.Helper()
	ctx := context.Background()
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishBatch(ctx, topicOf(sub.QueueURL()), payloads); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(payloads); {
		ds, err := sub.Poll(ctx, len(payloads)-n)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := sub.Reject(d.LeaseID, errors.New("bad "+d.Payload)); err != nil {
				t.Fatal(err)
			}
		}
		n += len(ds)
	}
}

// deadPayloads lists the dead-letter queue's payloads, sorted.
func deadPayloads(t *testing.T, sub *sqsleasebus.Subscription[string]) []string {
	t.Helper()
	dls, err := sub.DeadLetters(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, dl := range dls {
		out = append(out, dl.Message.Payload)
	}
	slices.Sort(out)
	return out
}

// RedriveWith re-sends the dead letters it fixes with their new payload,
// as attempt 1, and leaves the others; DiscardDeadLetters deletes those it
// matches.
func TestRedriveWithAndDiscard(t *testing.T) {
	srv := sqstest.Start(t)
	sub := withDLQ(t, srv, "orders", 3)
	rejectAll(t, srv, sub, "a", "b", "c", "d")
	if got := deadPayloads(t, sub); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("dead letters %q", got)
	}
	ctx := context.Background()
	n, err := sub.RedriveWith(ctx, func(dl queue.DeadLetter[string]) (string, bool) {
		if dl.Reason != queue.ReasonRejected || dl.LastError != "bad "+dl.Message.Payload {
			t.Errorf("dead letter %q: reason %v, last error %q", dl.Message.Payload, dl.Reason, dl.LastError)
		}
		return strings.ToUpper(dl.Message.Payload), dl.Message.Payload < "c"
	})
	if err != nil || n != 2 {
		t.Fatalf("RedriveWith: %d, %v; want 2", n, err)
	}
	got := pollAll(t, sub, 2)
	var payloads []string
	for _, d := range got {
		if d.Attempt != 1 {
			t.Fatalf("redriven %q at attempt %d, want 1", d.Payload, d.Attempt)
		}
		if d.Headers.Get("leasebus-dead-letter") != "" {
			t.Fatalf("redriven %q still carries its dead-letter record", d.Payload)
		}
		payloads = append(payloads, d.Payload)
	}
	slices.Sort(payloads)
	if !slices.Equal(payloads, []string{"A", "B"}) {
		t.Fatalf("redriven %q, want the fixed A and B", payloads)
	}
	if got := deadPayloads(t, sub); !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("dead letters left %q, want c and d", got)
	}
	n, err = sub.DiscardDeadLetters(ctx, func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "c" })
	if err != nil || n != 1 {
		t.Fatalf("DiscardDeadLetters: %d, %v; want 1", n, err)
	}
	if got := deadPayloads(t, sub); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("dead letters left %q, want d", got)
	}
	if n, err := sub.DiscardDeadLetters(ctx, nil); err != nil || n != 1 {
		t.Fatalf("DiscardDeadLetters(nil): %d, %v; want 1", n, err)
	}
	if got := deadPayloads(t, sub); len(got) != 0 {
		t.Fatalf("dead letters left %q after discarding all", got)
	}
	if n, err := sub.Redrive(ctx, nil); err != nil || n != 0 {
		t.Fatalf("Redrive of an empty dead-letter queue: %d, %v", n, err)
	}
}

// StartRedrive moves the whole dead-letter queue back with SQS's own
// message move task.
func TestStartRedrive(t *testing.T) {
	srv := sqstest.Start(t)
	sub := withDLQ(t, srv, "moves", 3)
	rejectAll(t, srv, sub, "x", "y")
	ctx := context.Background()
	handle, err := sub.StartRedrive(ctx, 0)
	if err != nil || handle == "" {
		t.Fatalf("StartRedrive: %q, %v", handle, err)
	}
	got := pollAll(t, sub, 2)
	var payloads []string
	for _, d := range got {
		if d.Attempt != 1 {
			t.Fatalf("moved %q at attempt %d, want 1", d.Payload, d.Attempt)
		}
		payloads = append(payloads, d.Payload)
	}
	slices.Sort(payloads)
	if !slices.Equal(payloads, []string{"x", "y"}) {
		t.Fatalf("moved back %q", payloads)
	}
	tasks, err := srv.Client.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(srv.QueueARN(t, strings.TrimSuffix(sub.QueueURL(), "moves")+"moves-dlq"))})
	if err != nil || len(tasks.Results) != 1 {
		t.Fatalf("ListMessageMoveTasks: %+v, %v", tasks, err)
	}
}

// Without a RedrivePolicy there is no dead-letter queue: every
// dead-letter call says so; bad arguments are refused.
func TestDeadLetterCallsRefused(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "plain", nil)
	ctx := context.Background()
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for name, call := range map[string]func() error{
		"DeadLetters": func() error { _, err := sub.DeadLetters(ctx, 10); return err },
		"Redrive":     func() error { _, err := sub.Redrive(ctx, nil); return err },
		"RedriveWith": func() error {
			_, err := sub.RedriveWith(ctx, func(queue.DeadLetter[string]) (string, bool) { return "", true })
			return err
		},
		"DiscardDeadLetters": func() error { _, err := sub.DiscardDeadLetters(ctx, nil); return err },
		"StartRedrive":       func() error { _, err := sub.StartRedrive(ctx, 0); return err },
	} {
		if err := call(); !errors.Is(err, sqsleasebus.ErrUnsupported) {
			t.Errorf("%s without a dead-letter queue: %v", name, err)
		}
	}
	withDLQ := withDLQ(t, srv, "with", 2)
	for name, call := range map[string]func() error{
		"RedriveWith(nil)":     func() error { _, err := withDLQ.RedriveWith(ctx, nil); return err },
		"StartRedrive(-1)":     func() error { _, err := withDLQ.StartRedrive(ctx, -1); return err },
		"StartRedrive(501)":    func() error { _, err := withDLQ.StartRedrive(ctx, 501); return err },
		"DeadLetters(max = 0)": func() error { _, err := withDLQ.DeadLetters(ctx, 0); return err },
	} {
		if err := call(); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
