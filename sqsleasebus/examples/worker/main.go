// Command worker runs a leasebus worker pool over an SQS queue: it
// publishes signups, welcomes each, dead-letters the one it cannot, fixes
// it and redrives it. The same code runs against leasebus's SQS server and
// against AWS; only the endpoint differs.
//
//	go run ./examples/worker                                   # a leasebus SQS server in this process, on loopback
//	go run ./examples/worker -endpoint http://localhost:9324   # a running leasebus-sqs (or any SQS)
//	go run ./examples/worker -aws                              # AWS: region and keys from AWS_REGION, AWS_ACCESS_KEY_ID, ...
//
// On AWS it creates the queues leasebus-example-signups and
// leasebus-example-signups-dlq if they are missing, and leaves them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/signal"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/sqsserver"
)

func main() {
	endpoint := flag.String("endpoint", "", "the SQS endpoint (default: a leasebus SQS server started in this process)")
	useAWS := flag.Bool("aws", false, "use AWS's own endpoint for AWS_REGION, with the keys in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := start(ctx, *endpoint, *useAWS); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func start(ctx context.Context, endpoint string, useAWS bool) error {
	opts := sqs.Options{Region: "us-east-1", Credentials: staticKeys("test", "test", "")}
	switch {
	case useAWS && endpoint != "":
		return errors.New("-aws and -endpoint name two endpoints: give one")
	case useAWS:
		opts.Region = os.Getenv("AWS_REGION")
		id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		if opts.Region == "" || id == "" || secret == "" {
			return errors.New("-aws needs AWS_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
		}
		opts.Credentials = staticKeys(id, secret, os.Getenv("AWS_SESSION_TOKEN"))
	case endpoint == "":
		srv, err := sqsserver.New()
		if err != nil {
			return err
		}
		defer srv.Close()
		hs := httptest.NewServer(srv)
		defer hs.Close()
		endpoint = hs.URL
		fmt.Printf("started a leasebus SQS server at %s\n", endpoint)
		fallthrough
	default:
		opts.BaseEndpoint = aws.String(endpoint)
	}
	return run(ctx, sqs.New(opts), clock.New(), os.Stdout)
}

// staticKeys returns a credentials provider of fixed keys.
func staticKeys(id, secret, token string) aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: token, Source: "worker example"}, nil
	})
}
