package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
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
			// A send in progress when the shutdown starts: its headers and
			// half its body are in, the rest comes once the listener is
			// closed. It must still be served, and kept (round 1 finds it).
			conn, finish := startSlowSend(t, addr, *q.QueueUrl, "late")
			cancel()
			waitRefused(t, addr)
			if status := finish(); status != http.StatusOK {
				t.Fatalf("the send in progress at shutdown answered %d, want 200", status)
			}
			conn.Close()
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
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatal(err)
			}
			var bodies []string
			for _, m := range out.Messages {
				bodies = append(bodies, *m.Body)
			}
			slices.Sort(bodies)
			if !slices.Equal(bodies, []string{"late", "x"}) {
				t.Fatalf("after the restart the queue holds %q, want the message and the send served during the shutdown", bodies)
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

// startSlowSend opens a connection and starts a SendMessage of body to
// queueURL: its headers ask to continue (Expect: 100-continue), and it
// returns once the server has said so, that is, once the handler runs and
// waits for the request body. finish sends the body and returns the
// response's status.
func startSlowSend(t *testing.T, addr, queueURL, body string) (net.Conn, func() int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	payload := fmt.Sprintf(`{"QueueUrl":%q,"MessageBody":%q}`, queueURL, body)
	head := fmt.Sprintf("POST / HTTP/1.1\r\nHost: %s\r\nX-Amz-Target: AmazonSQS.SendMessage\r\n"+
		"Content-Type: application/x-amz-json-1.0\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", addr, len(payload))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatal("no 100 Continue:", resp, err)
	}
	return conn, func() int {
		if _, err := io.WriteString(conn, payload); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
}

// waitRefused waits until addr refuses connections: the shutdown has
// closed the listener.
func waitRefused(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener stayed open after the shutdown began")
		}
		runtime.Gosched()
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
