package sqsserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// hangGuard bounds every wait on a goroutine, so that a bug fails a test
// rather than hanging it. It is never a timing assertion.
const hangGuard = 30 * time.Second

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// apiCode returns the error code of an SDK error ("" for nil), the legacy
// one when the server sent it, as the SDK reports it.
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if err != nil {
		return "not an API error: " + err.Error()
	}
	return ""
}

// wantCode fails the test unless err is an API error with code.
func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := apiCode(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
}

func must[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func send(t *testing.T, c *sqs.Client, url, body string) *sqs.SendMessageOutput {
	t.Helper()
	out, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
	if err != nil {
		t.Fatalf("send %q: %v", body, err)
	}
	return out
}

// receive short-polls up to n messages with every system attribute.
func receive(t *testing.T, c *sqs.Client, url string, n int32) []types.Message {
	t.Helper()
	out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: n,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return out.Messages
}

func bodies(ms []types.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

func start(t *testing.T) (*sqstest.Server, *sqs.Client) {
	srv := sqstest.Start(t)
	return srv, srv.Client
}
