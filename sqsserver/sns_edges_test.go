package sqsserver_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// rawTopic returns a standard topic whose raw-delivery subscription
// delivers to a new queue, and that queue.
func rawTopic(t *testing.T, srv *sqstest.Server, name string, attrs map[string]string) (topic, queue string) {
	t.Helper()
	ctx := context.Background()
	topic = aws.ToString(must[*sns.CreateTopicOutput](t)(srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(name), Attributes: attrs})).TopicArn)
	queue = srv.CreateQueue(t, name+"-q", nil)
	subscribeQueue(t, srv, topic, queue, map[string]string{"RawMessageDelivery": "true"})
	return topic, queue
}

// rawBodies takes and deletes every message visible on q now, and returns
// their bodies.
func rawBodies(t *testing.T, srv *sqstest.Server, q string) []string {
	t.Helper()
	var out []string
	for _, m := range receiveAll(t, srv.Client, q) {
		out = append(out, aws.ToString(m.Body))
		must[*sqs.DeleteMessageOutput](t)(srv.Client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: m.ReceiptHandle}))
	}
	return out
}

// A publish SNS accepts is one its queues accept: every attribute a
// SendMessage refuses, Publish and PublishBatch refuse with
// InvalidParameterValue, and nothing reaches the queue. They used to get a
// MessageId, and the raw delivery vanished.
func TestSNSPublishRefusesWhatAQueueWould(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	topic, q := rawTopic(t, srv, "attrs", nil)
	for _, c := range []struct {
		name string
		attr snstypes.MessageAttributeValue
	}{
		{"number not a number", numAttr("not-a-number")},
		{"number out of range", numAttr("1e999")},
		{"NaN", numAttr("NaN")},
		{"number of 39 digits", numAttr(strings.Repeat("9", 39))},
		{"empty string", strAttr("")},
		{"string with a bad character", strAttr("a\x00b")},
		{"empty binary", snstypes.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte{}}},
		{"string array not an array", snstypes.MessageAttributeValue{DataType: aws.String("String.Array"), StringValue: aws.String(`"x"`)}},
		{"string array of objects", snstypes.MessageAttributeValue{DataType: aws.String("String.Array"), StringValue: aws.String(`[{"a":1}]`)}},
		{"unknown type", snstypes.MessageAttributeValue{DataType: aws.String("Blob"), StringValue: aws.String("x")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String("m"),
				MessageAttributes: map[string]snstypes.MessageAttributeValue{"a": c.attr}})
			if apiCode(err) != "InvalidParameterValue" {
				t.Fatalf("Publish: %v, want InvalidParameterValue", err)
			}
			out, err := srv.SNS.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: &topic, PublishBatchRequestEntries: []snstypes.PublishBatchRequestEntry{
				{Id: aws.String("bad"), Message: aws.String("m"), MessageAttributes: map[string]snstypes.MessageAttributeValue{"a": c.attr}},
			}})
			if err != nil || len(out.Successful) != 0 || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Code) != "InvalidParameterValue" {
				t.Fatalf("PublishBatch: %+v, %v", out, err)
			}
		})
	}
	for _, bad := range []string{"", "AWS.x", "a b", strings.Repeat("n", 257)} {
		_, err := srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String("m"),
			MessageAttributes: map[string]snstypes.MessageAttributeValue{bad: strAttr("x")}})
		if apiCode(err) != "InvalidParameterValue" {
			t.Fatalf("attribute name %q: %v", bad, err)
		}
	}
	if got := receiveAll(t, srv.Client, q); len(got) != 0 {
		t.Fatalf("the queue got %d messages", len(got))
	}
	// What is valid still goes through.
	must[*sns.PublishOutput](t)(srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String("ok"),
		MessageAttributes: map[string]snstypes.MessageAttributeValue{"n": numAttr("-1.5e10"),
			"arr": {DataType: aws.String("String.Array"), StringValue: aws.String(`["a", 1, true, null]`)}}}))
	if got := rawBodies(t, srv, q); len(got) != 1 || got[0] != "ok" {
		t.Fatalf("got %q", got)
	}
}

// An empty message, a MessageDeduplicationId on a standard topic and a
// group or deduplication ID that is not 1-128 alphanumeric or punctuation
// characters are InvalidParameter. A MessageGroupId on a standard topic is
// valid (AWS forwards it to standard queues, for fair queues).
func TestSNSPublishParameters(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	topic, q := rawTopic(t, srv, "params", nil)
	fifo := aws.ToString(must[*sns.CreateTopicOutput](t)(srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("params.fifo"),
		Attributes: map[string]string{"FifoTopic": "true", "ContentBasedDeduplication": "true"}})).TopicArn)
	for _, c := range []struct {
		name string
		in   sns.PublishInput
	}{
		{"empty message", sns.PublishInput{TopicArn: &topic, Message: aws.String("")}},
		{"dedup ID on a standard topic", sns.PublishInput{TopicArn: &topic, Message: aws.String("m"), MessageDeduplicationId: aws.String("d")}},
		{"group ID of 129 characters", sns.PublishInput{TopicArn: &topic, Message: aws.String("m"), MessageGroupId: aws.String(strings.Repeat("g", 129))}},
		{"group ID with a space", sns.PublishInput{TopicArn: &topic, Message: aws.String("m"), MessageGroupId: aws.String("a b")}},
		{"FIFO without a group", sns.PublishInput{TopicArn: &fifo, Message: aws.String("m")}},
		{"FIFO dedup ID with a space", sns.PublishInput{TopicArn: &fifo, Message: aws.String("m"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("a b")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := c.in
			if _, err := srv.SNS.Publish(ctx, &in); apiCode(err) != "InvalidParameter" {
				t.Fatalf("%v, want InvalidParameter", err)
			}
		})
	}
	must[*sns.PublishOutput](t)(srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String("grouped"), MessageGroupId: aws.String("tenant-1")}))
	if got := rawBodies(t, srv, q); len(got) != 1 || got[0] != "grouped" {
		t.Fatalf("got %q", got)
	}
}

// A topic's MaximumMessageSize (1,024 to 1,048,576, default 262,144) is
// set at CreateTopic or SetTopicAttributes, returned, and enforced on the
// message and its attributes at Publish.
func TestSNSTopicMaximumMessageSize(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	attrsOf := func(topic string) map[string]string {
		return must[*sns.GetTopicAttributesOutput](t)(srv.SNS.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: &topic})).Attributes
	}
	def := aws.ToString(must[*sns.CreateTopicOutput](t)(srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("default")})).TopicArn)
	if got := attrsOf(def)["MaximumMessageSize"]; got != "262144" {
		t.Fatalf("default MaximumMessageSize %q", got)
	}
	for _, bad := range []string{"1023", "1048577", "x", "2048.0", ""} {
		_, err := srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("bad"), Attributes: map[string]string{"MaximumMessageSize": bad}})
		if apiCode(err) != "InvalidParameter" {
			t.Fatalf("CreateTopic MaximumMessageSize %q: %v", bad, err)
		}
		_, err = srv.SNS.SetTopicAttributes(ctx, &sns.SetTopicAttributesInput{TopicArn: &def, AttributeName: aws.String("MaximumMessageSize"), AttributeValue: aws.String(bad)})
		if apiCode(err) != "InvalidParameter" {
			t.Fatalf("SetTopicAttributes MaximumMessageSize %q: %v", bad, err)
		}
	}
	topic, q := rawTopic(t, srv, "small", map[string]string{"MaximumMessageSize": "2048"})
	if got := attrsOf(topic)["MaximumMessageSize"]; got != "2048" {
		t.Fatalf("MaximumMessageSize %q", got)
	}
	// 2,048 bytes of message and attribute (name, type and value) pass; one more does not.
	attr := map[string]snstypes.MessageAttributeValue{"k": strAttr("vv")} // 1 + 6 + 2 bytes
	fits := strings.Repeat("x", 2048-9)
	must[*sns.PublishOutput](t)(srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String(fits), MessageAttributes: attr}))
	if _, err := srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String(fits + "x"), MessageAttributes: attr}); apiCode(err) != "InvalidParameter" {
		t.Fatalf("one byte over: %v", err)
	}
	must[*sns.SetTopicAttributesOutput](t)(srv.SNS.SetTopicAttributes(ctx, &sns.SetTopicAttributesInput{TopicArn: &topic,
		AttributeName: aws.String("MaximumMessageSize"), AttributeValue: aws.String("1048576")}))
	must[*sns.PublishOutput](t)(srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String(strings.Repeat("y", 300_000))}))
	if got := rawBodies(t, srv, q); len(got) != 2 || got[0] != fits || len(got[1]) != 300_000 {
		t.Fatalf("got %d bodies", len(got))
	}
}

// A delivery its queue refuses and no dead-letter queue takes is never
// silent: it is counted per subscription (Server.NotificationsLost) and
// logged. With a RedrivePolicy it goes to the dead-letter queue, and is
// not counted.
func TestSNSLostDeliveryIsCountedAndLogged(t *testing.T) {
	var log bytes.Buffer
	srv := sqstest.Start(t, sqsserver.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	ctx := context.Background()
	topic := aws.ToString(must[*sns.CreateTopicOutput](t)(srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("big"),
		Attributes: map[string]string{"MaximumMessageSize": "1048576"}})).TopicArn)
	small := srv.CreateQueue(t, "small", map[string]string{"MaximumMessageSize": "1024"})
	lost := subscribeQueue(t, srv, topic, small, map[string]string{"RawMessageDelivery": "true"})
	small2 := srv.CreateQueue(t, "small2", map[string]string{"MaximumMessageSize": "1024"})
	dlq := srv.CreateQueue(t, "dlq", nil)
	kept := subscribeQueue(t, srv, topic, small2, nil)
	must[*sns.SetSubscriptionAttributesOutput](t)(srv.SNS.SetSubscriptionAttributes(ctx, &sns.SetSubscriptionAttributesInput{SubscriptionArn: &kept,
		AttributeName: aws.String("RedrivePolicy"), AttributeValue: aws.String(`{"deadLetterTargetArn":"` + srv.QueueARN(t, dlq) + `"}`)}))
	for range 2 {
		must[*sns.PublishOutput](t)(srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String(strings.Repeat("z", 2000))}))
	}
	if got := srv.NotificationsLost(); len(got) != 1 || got[lost] != 2 {
		t.Fatalf("NotificationsLost %v, want %s: 2", got, lost)
	}
	if got := receiveAll(t, srv.Client, dlq); len(got) != 2 {
		t.Fatalf("the dead-letter queue got %d", len(got))
	}
	if got := len(receiveAll(t, srv.Client, small)) + len(receiveAll(t, srv.Client, small2)); got != 0 {
		t.Fatalf("the small queues got %d", got)
	}
	if n := strings.Count(log.String(), "sns delivery lost"); n != 2 || !strings.Contains(log.String(), lost) {
		t.Fatalf("logged %d lost deliveries:\n%s", n, log.String())
	}
}

// An invalid receipt handle over the query protocol is 400, as SQS
// answers it there.
func TestQueryInvalidReceiptHandleIs400(t *testing.T) {
	srv := sqstest.Start(t)
	q := srv.CreateQueue(t, "handles", nil)
	for _, action := range []string{"DeleteMessage", "ChangeMessageVisibility"} {
		status, body := queryCall(t, srv, http.MethodPost, "/000000000000/handles",
			form("Action", action, "QueueUrl", q, "ReceiptHandle", "bogus", "VisibilityTimeout", "5"))
		if status != http.StatusBadRequest || !strings.Contains(body, "<Code>ReceiptHandleIsInvalid</Code>") {
			t.Fatalf("%s: %d %s", action, status, body)
		}
	}
	_, err := srv.Client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: aws.String("bogus")})
	if apiCode(err) != "ReceiptHandleIsInvalid" {
		t.Fatalf("JSON: %v", err)
	}
}
