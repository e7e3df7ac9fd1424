package sqsserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

type rawReply struct {
	status int
	header http.Header
	body   string
}

// rawCall posts an SQS JSON request as a client without the SDK would.
func rawCall(t *testing.T, url, action, body string) rawReply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDRAW/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawReply{resp.StatusCode, resp.Header, string(b)}
}

// Errors carry what every SDK reads: the status, the type in __type and in
// X-Amzn-ErrorType, the legacy code and fault in x-amzn-query-error.
func TestErrorWireFormat(t *testing.T) {
	srv := sqstest.Start(t)
	r := rawCall(t, srv.URL, "GetQueueUrl", `{"QueueName":"missing"}`)
	if r.status != 400 {
		t.Fatalf("status %d", r.status)
	}
	var body struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	if body.Type != "com.amazonaws.sqs#QueueDoesNotExist" || body.Message == "" {
		t.Fatalf("body %+v", body)
	}
	if got := r.header.Get("X-Amzn-ErrorType"); got != "QueueDoesNotExist" {
		t.Fatalf("X-Amzn-ErrorType %q", got)
	}
	if got := r.header.Get("X-Amzn-Query-Error"); got != "AWS.SimpleQueueService.NonExistentQueue;Sender" {
		t.Fatalf("x-amzn-query-error %q", got)
	}
	if r.header.Get("X-Amzn-RequestId") == "" || r.header.Get("Content-Type") != "application/x-amz-json-1.0" {
		t.Fatalf("headers %v", r.header)
	}
	// The SDK maps it to its typed error.
	_, err := srv.Client.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String("missing")})
	var qdne *types.QueueDoesNotExist
	if !asType(err, &qdne) {
		t.Fatalf("SDK error %T %v, want *types.QueueDoesNotExist", err, err)
	}

	for _, tc := range []struct{ name, action, body, typ string }{
		{"unknown action", "Frobnicate", `{}`, "InvalidAction"},
		{"not JSON", "ListQueues", `{"MaxResults":"x"}`, "SerializationException"},
		{"garbage handle", "DeleteMessage", `{"QueueUrl":"` + srv.URL + `/000000000000/q","ReceiptHandle":"garbage"}`, "ReceiptHandleIsInvalid"},
		{"no handle", "DeleteMessage", `{"QueueUrl":"` + srv.URL + `/000000000000/q"}`, "MissingParameter"},
		{"no queue url", "SendMessage", `{"MessageBody":"x"}`, "MissingParameter"},
		{"permission", "AddPermission", `{}`, "UnsupportedOperation"},
	} {
		if tc.typ == "ReceiptHandleIsInvalid" || tc.typ == "MissingParameter" {
			srv.CreateQueue(t, "q", nil)
		}
		r := rawCall(t, srv.URL, tc.action, tc.body)
		if got := r.header.Get("X-Amzn-ErrorType"); got != tc.typ || r.status < 400 {
			t.Errorf("%s: %d %s %s, want %s", tc.name, r.status, got, r.body, tc.typ)
		}
	}
}

func asType[E error](err error, target *E) bool {
	for err != nil {
		if e, ok := err.(E); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// Receipt handles authenticate themselves: one forged from a real one by
// changing a byte, or one of another queue, is ReceiptHandleIsInvalid.
func TestForgedReceiptHandles(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	a := srv.CreateQueue(t, "a", nil)
	b := srv.CreateQueue(t, "b", nil)
	send(t, c, a, "x")
	h := aws.ToString(receive(t, c, a, 1)[0].ReceiptHandle)
	forged := []byte(h)
	forged[len(forged)/2] ^= 1
	if forged[len(forged)/2] == '-' || forged[len(forged)/2] == '_' {
		forged[len(forged)/2] = 'A'
	}
	for name, tc := range map[string]struct{ url, handle string }{
		"forged":        {a, string(forged)},
		"other queue":   {b, h},
		"truncated":     {a, h[:len(h)-4]},
		"not base64":    {a, "!!!!"},
		"extra payload": {a, h + "AAAA"},
	} {
		_, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(tc.url), ReceiptHandle: aws.String(tc.handle)})
		if apiCode(err) != "ReceiptHandleIsInvalid" {
			t.Errorf("%s: delete: %v", name, err)
		}
		_, err = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(tc.url), ReceiptHandle: aws.String(tc.handle), VisibilityTimeout: 5})
		if apiCode(err) != "ReceiptHandleIsInvalid" {
			t.Errorf("%s: change visibility: %v", name, err)
		}
	}
	// A queue deleted and created again does not take the old handles.
	must[*sqs.DeleteQueueOutput](t)(c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(a)}))
	a = srv.CreateQueue(t, "a", nil)
	_, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(a), ReceiptHandle: aws.String(h)})
	wantCode(t, err, "ReceiptHandleIsInvalid")
}

// WithAccessKeys refuses other keys and unsigned requests.
func TestAccessKeys(t *testing.T) {
	srv := sqstest.Start(t, sqsserver.WithAccessKeys("test"))
	ctx := context.Background()
	must[*sqs.ListQueuesOutput](t)(srv.Client.ListQueues(ctx, &sqs.ListQueuesInput{}))
	other := sqstest.NewClient(srv.URL, nil)
	other = sqs.New(other.Options(), func(o *sqs.Options) {
		o.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "intruder", SecretAccessKey: "x"}, nil
		})
	})
	_, err := other.ListQueues(ctx, &sqs.ListQueuesInput{})
	wantCode(t, err, "InvalidClientTokenId")
	r := rawCall(t, srv.URL, "ListQueues", `{}`) // signed as AKIDRAW
	if r.status != 403 {
		t.Fatalf("raw with another key: %d %s", r.status, r.body)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader(`{}`))
	req.Header.Set("X-Amz-Target", "AmazonSQS.ListQueues")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Amzn-ErrorType") != "MissingAuthenticationToken" {
		t.Fatalf("unsigned: %d %s", resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"))
	}
}
