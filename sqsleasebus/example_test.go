package sqsleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// A consumer of an SQS queue: publish, poll with a lease, ack. Here the
// queue is on leasebus's SQS server in the process; against AWS only the
// client differs.
func ExampleSubscribe() {
	srv, _ := sqsserver.New()
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	client := sqstest.NewClient(hs.URL, nil)
	ctx := context.Background()
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs")})
	if err != nil {
		fmt.Println(err)
		return
	}
	url := aws.ToString(q.QueueUrl)

	pub, _ := sqsleasebus.NewPublisher[string](client, nil)
	if _, err := pub.Publish(ctx, "jobs", "resize photo 7", queue.WithHeaders(map[string]string{"tenant": "acme"})); err != nil {
		fmt.Println(err)
		return
	}
	sub, err := sqsleasebus.Subscribe[string](ctx, client, url, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	ds, err := sub.Poll(ctx, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range ds {
		fmt.Printf("%s for %s, attempt %d\n", d.Payload, d.Headers.Get("tenant"), d.Attempt)
		if err := sub.Ack(d.LeaseID); err != nil {
			fmt.Println(err)
		}
	}
	// Output: resize photo 7 for acme, attempt 1
}

// What SQS has no such thing for is refused by name, before anything is
// sent.
func ExamplePublisher_Publish_refused() {
	client := sqstest.NewClient("http://127.0.0.1:1", nil) // never reached
	pub, _ := sqsleasebus.NewPublisher[string](client, nil)
	_, err := pub.Publish(context.Background(), "jobs", "x", queue.WithKey("customer-42"))
	fmt.Println(errors.Is(err, sqsleasebus.ErrUnsupported))
	fmt.Println(err)
	// Output:
	// true
	// WithKey("customer-42"): sqsleasebus: not supported by SQS: unsupported operation: a standard queue (jobs) has no order to keep; a FIFO queue's message group is a key
}
