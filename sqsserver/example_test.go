package sqsserver_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// A server on a mock clock: a message not deleted comes back when the
// clock passes its visibility timeout, its receive count raised.
func Example() {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv, err := sqsserver.New(sqsserver.WithClock(mock))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	client := sqstest.NewClient(hs.URL, hs.Client())
	ctx := context.Background()

	q, _ := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("jobs"),
		Attributes: map[string]string{"VisibilityTimeout": "30"},
	})
	client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("resize")})
	receive := func() {
		out, _ := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    q.QueueUrl,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		for _, m := range out.Messages {
			fmt.Printf("%s: %s, receive %s\n", mock.Now().Format(time.TimeOnly), *m.Body, m.Attributes["ApproximateReceiveCount"])
		}
		if len(out.Messages) == 0 {
			fmt.Printf("%s: nothing\n", mock.Now().Format(time.TimeOnly))
		}
	}
	receive()                  // leased for 30 s
	receive()                  // nothing visible
	mock.Add(30 * time.Second) // no sleep: the lease expires
	receive()
	// Output:
	// 00:00:00: resize, receive 1
	// 00:00:00: nothing
	// 00:00:30: resize, receive 2
}
