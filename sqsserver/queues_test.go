package sqsserver_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// CreateQueue is idempotent with the same attributes and QueueNameExists
// with others; names are checked; GetQueueUrl, ListQueues (prefix,
// pages), DeleteQueue.
func TestQueueLifecycle(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "orders", map[string]string{"VisibilityTimeout": "45"})
	if url != srv.URL+"/000000000000/orders" {
		t.Fatalf("url %s", url)
	}
	if again := srv.CreateQueue(t, "orders", map[string]string{"VisibilityTimeout": "45"}); again != url {
		t.Fatal(again)
	}
	srv.CreateQueue(t, "orders", nil) // no attributes named: the existing queue
	_, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{"VisibilityTimeout": "46"}})
	wantCode(t, err, "QueueAlreadyExists")
	for _, bad := range []string{"", "has space", "x.fifo", string(make([]byte, 81)), "dots.in.name"} {
		_, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(bad)})
		if apiCode(err) != "InvalidParameterValue" {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("std"), Attributes: map[string]string{"FifoQueue": "true"}})
	wantCode(t, err, "InvalidParameterValue")

	got := must[*sqs.GetQueueUrlOutput](t)(c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("orders")}))
	if aws.ToString(got.QueueUrl) != url {
		t.Fatal(*got.QueueUrl)
	}
	for i := range 5 {
		srv.CreateQueue(t, "page-"+strconv.Itoa(i), nil)
	}
	var seen []string
	in := &sqs.ListQueuesInput{QueueNamePrefix: aws.String("page-"), MaxResults: aws.Int32(2)}
	for p := sqs.NewListQueuesPaginator(c, in); p.HasMorePages(); {
		out := must[*sqs.ListQueuesOutput](t)(p.NextPage(ctx))
		if len(out.QueueUrls) > 2 {
			t.Fatalf("page of %d", len(out.QueueUrls))
		}
		seen = append(seen, out.QueueUrls...)
	}
	if len(seen) != 5 || seen[0] != srv.URL+"/000000000000/page-0" || seen[4] != srv.URL+"/000000000000/page-4" {
		t.Fatalf("listed %v", seen)
	}
	all := must[*sqs.ListQueuesOutput](t)(c.ListQueues(ctx, &sqs.ListQueuesInput{}))
	if len(all.QueueUrls) != 6 || all.NextToken != nil {
		t.Fatalf("all queues %v", all.QueueUrls)
	}

	must[*sqs.DeleteQueueOutput](t)(c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}))
	_, err = c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("orders")})
	wantCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")})
	wantCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")
	_, err = c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	wantCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")
}

// Queue attributes: defaults, set and read back, every read-only and
// unknown name refused, values checked against SQS's ranges.
func TestQueueAttributes(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", nil)
	attrs := must[*sqs.GetQueueAttributesOutput](t)(c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"All"}})).Attributes
	for k, v := range map[string]string{
		"VisibilityTimeout": "30", "DelaySeconds": "0", "MaximumMessageSize": "1048576", "MessageRetentionPeriod": "345600",
		"ReceiveMessageWaitTimeSeconds": "0", "QueueArn": "arn:aws:sqs:us-east-1:000000000000:q",
		"ApproximateNumberOfMessages": "0", "CreatedTimestamp": strconv.FormatInt(srv.Clock.Now().Unix(), 10),
	} {
		if attrs[k] != v {
			t.Errorf("%s = %q, want %q", k, attrs[k], v)
		}
	}
	must[*sqs.SetQueueAttributesOutput](t)(c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{
		"VisibilityTimeout": "0", "DelaySeconds": "900", "Policy": `{"Version":"2012-10-17"}`, "KmsMasterKeyId": "alias/aws/sqs",
	}}))
	attrs = must[*sqs.GetQueueAttributesOutput](t)(c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"VisibilityTimeout", "DelaySeconds", "Policy", "SqsManagedSseEnabled"}})).Attributes
	if len(attrs) != 4 || attrs["VisibilityTimeout"] != "0" || attrs["DelaySeconds"] != "900" || attrs["SqsManagedSseEnabled"] != "false" {
		t.Fatalf("after set: %v", attrs)
	}
	for name, tc := range map[string]struct {
		attrs map[string]string
		code  string
	}{
		"visibility too long": {map[string]string{"VisibilityTimeout": "43201"}, "InvalidAttributeValue"},
		"negative delay":      {map[string]string{"DelaySeconds": "-1"}, "InvalidAttributeValue"},
		"delay too long":      {map[string]string{"DelaySeconds": "901"}, "InvalidAttributeValue"},
		"wait too long":       {map[string]string{"ReceiveMessageWaitTimeSeconds": "21"}, "InvalidAttributeValue"},
		"retention too short": {map[string]string{"MessageRetentionPeriod": "59"}, "InvalidAttributeValue"},
		"size too small":      {map[string]string{"MaximumMessageSize": "1023"}, "InvalidAttributeValue"},
		"not a number":        {map[string]string{"VisibilityTimeout": "soon"}, "InvalidAttributeValue"},
		"read-only":           {map[string]string{"QueueArn": "x"}, "InvalidAttributeName"},
		"unknown":             {map[string]string{"Colour": "blue"}, "InvalidAttributeName"},
		"fifo only":           {map[string]string{"ContentBasedDeduplication": "true"}, "InvalidAttributeName"},
		"fifo later":          {map[string]string{"FifoQueue": "true"}, "InvalidAttributeName"},
		"none":                {map[string]string{}, "MissingParameter"},
	} {
		_, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: tc.attrs})
		if got := apiCode(err); got != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	_, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"Colour"}})
	wantCode(t, err, "InvalidAttributeName")
}

// Tags: set at creation, added, removed, listed.
func TestQueueTags(t *testing.T) {
	_, c := start(t)
	ctx := context.Background()
	out := must[*sqs.CreateQueueOutput](t)(c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("t"), Tags: map[string]string{"team": "a"}}))
	must[*sqs.TagQueueOutput](t)(c.TagQueue(ctx, &sqs.TagQueueInput{QueueUrl: out.QueueUrl, Tags: map[string]string{"env": "test", "team": "b"}}))
	must[*sqs.UntagQueueOutput](t)(c.UntagQueue(ctx, &sqs.UntagQueueInput{QueueUrl: out.QueueUrl, TagKeys: []string{"env"}}))
	tags := must[*sqs.ListQueueTagsOutput](t)(c.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: out.QueueUrl})).Tags
	if len(tags) != 1 || tags["team"] != "b" {
		t.Fatalf("tags %v", tags)
	}
	many := map[string]string{}
	for i := range 51 {
		many["k"+strconv.Itoa(i)] = "v"
	}
	_, err := c.TagQueue(ctx, &sqs.TagQueueInput{QueueUrl: out.QueueUrl, Tags: many})
	wantCode(t, err, "InvalidParameterValue")
}

// PurgeQueue drops every message, in flight included; a handle of a purged
// message deletes nothing and fails a visibility change.
func TestPurgeQueue(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", nil)
	send(t, c, url, "a")
	send(t, c, url, "b")
	m := receive(t, c, url, 1)[0]
	must[*sqs.PurgeQueueOutput](t)(c.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}))
	if ms := receive(t, c, url, 10); len(ms) != 0 {
		t.Fatalf("after purge: %v", bodies(ms))
	}
	must[*sqs.DeleteMessageOutput](t)(c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}))
	_, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 5})
	wantCode(t, err, "InvalidParameterValue")
}
