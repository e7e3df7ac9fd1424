package sqsserver_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

// One line per request, whichever protocol, with what went wrong.
func TestRequestLog(t *testing.T) {
	var buf syncBuffer
	srv := sqstest.Start(t, sqsserver.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := context.Background()
	q := srv.CreateQueue(t, "logged", nil)
	if _, err := srv.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	_, _ = srv.Client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("missing")})
	resp, err := http.PostForm(srv.URL+"/", url.Values{"Action": {"ListQueues"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/leasebus/clock")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	lines := buf.lines()
	want := []string{
		"protocol=json action=CreateQueue status=200 request_id=",
		"protocol=json action=SendMessage status=200 request_id=",
		"protocol=json action=GetQueueUrl status=400 error=QueueDoesNotExist request_id=",
		"protocol=query action=ListQueues status=200 request_id=",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d (the control endpoint is not logged):\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], `msg="sqs request" `+w) || !strings.Contains(lines[i], " took=") {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], w)
		}
	}
}
