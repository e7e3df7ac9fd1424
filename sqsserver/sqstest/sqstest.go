// Package sqstest starts a leasebus SQS server for a Go test: on httptest,
// on a mock clock, with an AWS SDK client configured for it, all closed
// when the test ends. A test moves time with the mock instead of sleeping:
//
//	srv := sqstest.Start(t)
//	client, mock := srv.Client, srv.Clock
//	out, _ := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs")})
//	... receive a message, do not delete it ...
//	mock.Add(30 * time.Second) // the visibility timeout passes: it is visible again
//
// Before moving the clock past a long poll's wait, or sending to wake one,
// call AwaitParked so that the receive is asleep on the clock. A receive
// of Client's whose context ends returns only once the server has let it
// go, so that a clock move after it cannot hand a message to the receive
// nobody waits for any more (over a real connection the server learns of
// it later, and real SQS may keep such a message invisible).
package sqstest

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/sqsserver"
)

// Epoch is the time the mock clock starts at: a fixed, readable instant.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// hangGuard bounds AwaitParked, so that a receive that never parks fails
// the test instead of hanging it. It is never a timing assertion.
const hangGuard = 30 * time.Second

// Server is a running test server.
type Server struct {
	*sqsserver.Server                  // the SQS server, for its Go methods (AwaitParked, ...)
	HTTP              *httptest.Server // the HTTP server it runs on (nil from StartInMemory)
	URL               string           // the endpoint: http://127.0.0.1:port
	Client            *sqs.Client      // an SQS client for URL, region us-east-1, access key "test"; a call it gives up on has ended on the server when it returns
	SNS               *sns.Client      // an SNS client for URL, likewise
	Clock             *clock.Mock      // the server's clock, set to Epoch (nil from StartInMemory: the real clock)
}

// Start starts a server on a mock clock at Epoch (opts come after
// WithClock, so a test may give WithDir for a durable one) and closes it
// and its HTTP server when the test ends. A failing start fails the test.
func Start(tb testing.TB, opts ...sqsserver.Option) *Server {
	tb.Helper()
	mock := clock.NewMock()
	mock.Set(Epoch)
	return StartWithClock(tb, mock, opts...)
}

// StartWithClock is Start on a mock clock of the caller's (a test that
// restarts a durable server keeps its clock).
func StartWithClock(tb testing.TB, mock *clock.Mock, opts ...sqsserver.Option) *Server {
	tb.Helper()
	s, err := sqsserver.New(append([]sqsserver.Option{sqsserver.WithClock(mock)}, opts...)...)
	if err != nil {
		tb.Fatalf("sqstest: %v", err)
	}
	t := newTracker()
	hs := httptest.NewServer(t.handler(s))
	srv := &Server{Server: s, HTTP: hs, URL: hs.URL, Clock: mock}
	srv.Client = NewClient(hs.URL, t.client(hs.Client()))
	srv.SNS = NewSNSClient(hs.URL, t.client(hs.Client()))
	tb.Cleanup(srv.Close)
	return srv
}

// New is Start for a test that needs only the client and the clock.
func New(tb testing.TB, opts ...sqsserver.Option) (*sqs.Client, *clock.Mock) {
	tb.Helper()
	srv := Start(tb, opts...)
	return srv.Client, srv.Clock
}

// Close stops the HTTP server and the SQS server (long polls end first).
// The test's cleanup calls it; twice is safe.
func (s *Server) Close() {
	_ = s.Server.Close()
	if s.HTTP != nil {
		s.HTTP.Close()
	}
}

// NewClient returns an SQS client for the endpoint url, signing with the
// access key "test" for region us-east-1, without retries (a test sees
// every error as the server sent it) and with the SDK's checksum checks
// on. httpClient nil means http.DefaultClient.
func NewClient(url string, httpClient sqs.HTTPClient) *sqs.Client {
	opts := sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "sqstest"}, nil
		}),
		Retryer: aws.NopRetryer{},
	}
	if httpClient != nil {
		opts.HTTPClient = httpClient
	}
	return sqs.New(opts)
}

// NewSNSClient is NewClient for SNS (which the server serves on the same
// endpoint, in SNS's query protocol).
func NewSNSClient(url string, httpClient sns.HTTPClient) *sns.Client {
	opts := sns.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "sqstest"}, nil
		}),
		Retryer: aws.NopRetryer{},
	}
	if httpClient != nil {
		opts.HTTPClient = httpClient
	}
	return sns.New(opts)
}

// QueueARN returns the ARN of the queue at url; a failure fails the test.
func (s *Server) QueueARN(tb testing.TB, url string) string {
	tb.Helper()
	out, err := s.Client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		tb.Fatalf("sqstest: queue ARN of %s: %v", url, err)
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// AwaitParked waits until n ReceiveMessage calls on the named queue are
// long-polling, asleep on the clock, and fails the test if that takes
// longer than 30 s of real time (a hang guard, not an assertion).
func (s *Server) AwaitParked(tb testing.TB, queueName string, n int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.Server.AwaitParked(ctx, queueName, n); err != nil {
		tb.Fatalf("sqstest: await %d parked receives on %s: %v", n, queueName, err)
	}
}

// CreateQueue creates a queue with the given attributes (nil: none) and
// returns its URL; a failure fails the test.
func (s *Server) CreateQueue(tb testing.TB, name string, attrs map[string]string) string {
	tb.Helper()
	out, err := s.Client.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		tb.Fatalf("sqstest: create queue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}
