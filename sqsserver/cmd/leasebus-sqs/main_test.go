package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The command serves on a random port with a mock clock and a durable
// directory; a client drives it and moves its clock over HTTP; it stops
// when its context ends, and a second run finds the queue again.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-mock-clock", "-mock-start", "2026-01-01T00:00:00Z", "-dir", dir}, pw, io.Discard)
			pw.Close()
		}()
		line, err := bufio.NewReader(pr).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, pr)
		addr := strings.TrimSpace(strings.TrimPrefix(line, "leasebus-sqs listening on "))
		url := "http://" + addr
		c := sqstest.NewClient(url, nil)
		if round == 0 {
			q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("q"), Attributes: map[string]string{"VisibilityTimeout": "10"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("x")}); err != nil {
				t.Fatal(err)
			}
			if out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl}); err != nil || len(out.Messages) != 1 {
				t.Fatal(out, err)
			}
			resp, err := http.Post(url+"/leasebus/clock?advance=10s", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			var r struct{ Now string }
			_ = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if r.Now != "2026-01-01T00:00:10Z" {
				t.Fatalf("clock %q", r.Now)
			}
			if out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl}); err != nil || len(out.Messages) != 1 {
				t.Fatal("not redelivered after the clock moved:", out, err)
			}
			// A long poll that the shutdown must end, at once and with
			// ServiceUnavailable.
			polled := make(chan error, 1)
			go func() {
				_, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 20})
				polled <- err
			}()
			resp, err = http.Get(url + "/leasebus/parked?queue=q&n=1")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatal("the long poll did not park:", resp, err)
			}
			resp.Body.Close()
			cancel()
			select {
			case err := <-polled:
				var ae smithy.APIError
				if !errors.As(err, &ae) || ae.ErrorCode() != "ServiceUnavailable" {
					t.Fatalf("the long poll ended with %v, want ServiceUnavailable", err)
				}
			case <-time.After(30 * time.Second): // a hang guard
				t.Fatal("the shutdown did not end the long poll")
			}
		} else {
			q, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("q")})
			if err != nil {
				t.Fatal("the queue did not survive:", err)
			}
			if out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl}); err != nil || len(out.Messages) != 1 {
				t.Fatal("the message did not survive:", out, err)
			}
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second): // a hang guard
			t.Fatal("run did not stop")
		}
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-mock-start", "2026-01-01T00:00:00Z"},
		{"-mock-clock", "-mock-start", "yesterday"},
		{"-account", "12"},
		{"extra"},
		{"-no-such-flag"},
		{"-addr", "not an address"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
