package sqsserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// envelope is what SNS delivers to a queue without raw delivery.
type envelope struct {
	Type              string
	MessageID         string `json:"MessageId"`
	SequenceNumber    string
	TopicArn          string
	Subject           *string
	Message           string
	Timestamp         string
	SignatureVersion  string
	Signature         string
	SigningCertURL    string
	UnsubscribeURL    string
	MessageAttributes map[string]struct{ Type, Value string }
}

func strAttr(v string) snstypes.MessageAttributeValue {
	return snstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func numAttr(v string) snstypes.MessageAttributeValue {
	return snstypes.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(v)}
}

// receiveAll takes every message visible on q now.
func receiveAll(t *testing.T, c *sqs.Client, q string) []types.Message {
	t.Helper()
	var all []types.Message
	for {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q, MaxNumberOfMessages: 10,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return all
		}
		all = append(all, out.Messages...)
	}
}

func subscribeQueue(t *testing.T, srv *sqstest.Server, topic, queueURL string, attrs map[string]string) string {
	t.Helper()
	out, err := srv.SNS.Subscribe(context.Background(), &sns.SubscribeInput{TopicArn: &topic, Protocol: aws.String("sqs"),
		Endpoint: aws.String(srv.QueueARN(t, queueURL)), Attributes: attrs, ReturnSubscriptionArn: true})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.SubscriptionArn)
}

// A topic fanned out to two queues with different filter policies: one
// on attributes with the envelope, one on the body with raw delivery.
func TestSNSFanOutWithFilterPolicies(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	topic := aws.ToString(must[*sns.CreateTopicOutput](t)(srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("orders")})).TopicArn)
	if topic != "arn:aws:sns:us-east-1:000000000000:orders" {
		t.Fatalf("TopicArn %s", topic)
	}
	eu := srv.CreateQueue(t, "eu", nil)
	big := srv.CreateQueue(t, "big", nil)
	euSub := subscribeQueue(t, srv, topic, eu, map[string]string{
		"FilterPolicy": `{"$or": [{"region": [{"prefix": "eu-"}, "global"]}, {"vip": [{"exists": true}]}], "kind": [{"anything-but": ["test"]}]}`,
	})
	subscribeQueue(t, srv, topic, big, map[string]string{
		"FilterPolicyScope": "MessageBody", "RawMessageDelivery": "true",
		"FilterPolicy": `{"order": {"amount": [{"numeric": [">=", 100, "<", 1000]}], "lines": {"sku": [{"suffix": "-X"}]}}}`,
	})

	pub := func(body string, subject *string, attrs map[string]snstypes.MessageAttributeValue) string {
		t.Helper()
		out, err := srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: &body, Subject: subject, MessageAttributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.MessageId)
	}
	first := pub(`{"order": {"amount": 150, "lines": [{"sku": "a-X"}, {"sku": "b"}]}}`, aws.String("new <order>"),
		map[string]snstypes.MessageAttributeValue{"region": strAttr("eu-west-1"), "kind": strAttr("retail"), "qty": numAttr("3")})
	pub(`{"order": {"amount": 5000, "lines": [{"sku": "a-X"}]}}`, nil, map[string]snstypes.MessageAttributeValue{"region": strAttr("us-east-1")})
	pub(`{"order": {"amount": 150, "lines": [{"sku": "b"}]}}`, nil, map[string]snstypes.MessageAttributeValue{"region": strAttr("global"), "kind": strAttr("test")})
	pub(`not json`, nil, map[string]snstypes.MessageAttributeValue{"vip": strAttr("yes"), "kind": strAttr("retail")})

	euMsgs := receiveAll(t, srv.Client, eu)
	if len(euMsgs) != 2 {
		t.Fatalf("eu got %d messages, want 2 (eu-west-1 retail, and the vip)", len(euMsgs))
	}
	var env envelope
	if err := json.Unmarshal([]byte(aws.ToString(euMsgs[0].Body)), &env); err != nil {
		t.Fatalf("envelope: %v: %s", err, aws.ToString(euMsgs[0].Body))
	}
	if env.Type != "Notification" || env.MessageID != first || env.TopicArn != topic || env.Subject == nil || *env.Subject != "new <order>" ||
		env.Message != `{"order": {"amount": 150, "lines": [{"sku": "a-X"}, {"sku": "b"}]}}` ||
		env.Timestamp != "2026-01-01T00:00:00.000Z" || env.SignatureVersion != "1" || env.Signature == "" || env.SigningCertURL == "" {
		t.Fatalf("envelope %+v", env)
	}
	if a := env.MessageAttributes; len(a) != 3 || a["qty"].Type != "Number" || a["qty"].Value != "3" || a["region"].Value != "eu-west-1" {
		t.Fatalf("envelope attributes %+v", a)
	}
	if len(euMsgs[0].MessageAttributes) != 0 {
		t.Fatalf("an enveloped message carries its attributes in the envelope only: %v", euMsgs[0].MessageAttributes)
	}
	var second envelope
	if err := json.Unmarshal([]byte(aws.ToString(euMsgs[1].Body)), &second); err != nil || second.Subject != nil || second.Message != "not json" {
		t.Fatalf("second envelope %+v %v (Subject only when given)", second, err)
	}

	bigMsgs := receiveAll(t, srv.Client, big)
	if len(bigMsgs) != 1 || aws.ToString(bigMsgs[0].Body) != `{"order": {"amount": 150, "lines": [{"sku": "a-X"}, {"sku": "b"}]}}` {
		t.Fatalf("big got %v", bigMsgs)
	}
	if a := bigMsgs[0].MessageAttributes; len(a) != 3 || aws.ToString(a["region"].StringValue) != "eu-west-1" || aws.ToString(a["qty"].DataType) != "Number" {
		t.Fatalf("raw delivery keeps the attributes as the queue message's: %v", a)
	}

	// The envelope's UnsubscribeURL works on this server.
	resp, err := http.Get(env.UnsubscribeURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("UnsubscribeURL: %d", resp.StatusCode)
	}
	_, err = srv.SNS.GetSubscriptionAttributes(ctx, &sns.GetSubscriptionAttributesInput{SubscriptionArn: &euSub})
	wantCode(t, err, "NotFound")
	pub("after", nil, map[string]snstypes.MessageAttributeValue{"vip": strAttr("yes")})
	if n := len(receiveAll(t, srv.Client, eu)); n != 0 {
		t.Fatalf("an unsubscribed queue got %d", n)
	}
}

// A FIFO topic delivers to FIFO queues in group order, with the sequence
// number, and a duplicate (content-based) is delivered once.
func TestSNSFIFOTopicToFIFOQueue(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	topic := aws.ToString(must[*sns.CreateTopicOutput](t)(srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("orders.fifo"),
		Attributes: map[string]string{"FifoTopic": "true", "ContentBasedDeduplication": "true"}})).TopicArn)
	q := srv.CreateQueue(t, "orders.fifo", map[string]string{"FifoQueue": "true"})
	subscribeQueue(t, srv, topic, q, nil)
	std := srv.CreateQueue(t, "standard", nil)
	_, err := srv.SNS.Subscribe(ctx, &sns.SubscribeInput{TopicArn: &topic, Protocol: aws.String("sqs"), Endpoint: aws.String(srv.QueueARN(t, std))})
	wantCode(t, err, "InvalidParameter")

	var seqs []string
	for _, body := range []string{"one", "two", "one"} {
		out, err := srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String(body), MessageGroupId: aws.String("g")})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, aws.ToString(out.SequenceNumber))
	}
	if seqs[0] == "" || !sort.StringsAreSorted(seqs) {
		t.Fatalf("sequence numbers %v", seqs)
	}
	_, err = srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String("x")})
	wantCode(t, err, "InvalidParameter") // no MessageGroupId

	var got []string
	for _, m := range receiveAll(t, srv.Client, q) {
		var env envelope
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil {
			t.Fatal(err)
		}
		if env.SequenceNumber == "" || m.Attributes["MessageGroupId"] != "g" {
			t.Fatalf("FIFO delivery %+v %v", env, m.Attributes)
		}
		got = append(got, env.Message)
		// A FIFO group hands out its next message once this one is deleted.
		if _, err := srv.Client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
		got = append(got, receiveBodies(t, srv, q)...)
	}
	if len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Fatalf("the FIFO queue got %v, want [one two]", got)
	}
}

func receiveBodies(t *testing.T, srv *sqstest.Server, q string) []string {
	t.Helper()
	var out []string
	for _, m := range receiveAll(t, srv.Client, q) {
		var env envelope
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil {
			t.Fatal(err)
		}
		out = append(out, env.Message)
		if _, err := srv.Client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Topics and subscriptions: idempotent create, pages, attributes, tags,
// the errors SNS answers with.
func TestSNSTopicsAndSubscriptions(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	c := srv.SNS
	var arns []string
	for i := range 150 {
		out, err := c.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("t" + strconv.Itoa(1000+i)),
			Tags: []snstypes.Tag{{Key: aws.String("n"), Value: aws.String(strconv.Itoa(i))}}})
		if err != nil {
			t.Fatal(err)
		}
		arns = append(arns, aws.ToString(out.TopicArn))
	}
	again := must[*sns.CreateTopicOutput](t)(c.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("t1000")}))
	if aws.ToString(again.TopicArn) != arns[0] {
		t.Fatalf("create again: %s", aws.ToString(again.TopicArn))
	}
	p1 := must[*sns.ListTopicsOutput](t)(c.ListTopics(ctx, &sns.ListTopicsInput{}))
	p2 := must[*sns.ListTopicsOutput](t)(c.ListTopics(ctx, &sns.ListTopicsInput{NextToken: p1.NextToken}))
	if len(p1.Topics) != 100 || len(p2.Topics) != 50 || p2.NextToken != nil || aws.ToString(p2.Topics[49].TopicArn) != arns[149] {
		t.Fatalf("pages %d, %d, %v", len(p1.Topics), len(p2.Topics), p2.NextToken)
	}

	topic := arns[0]
	if _, err := c.SetTopicAttributes(ctx, &sns.SetTopicAttributesInput{TopicArn: &topic, AttributeName: aws.String("DisplayName"), AttributeValue: aws.String("Orders")}); err != nil {
		t.Fatal(err)
	}
	attrs := must[*sns.GetTopicAttributesOutput](t)(c.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: &topic})).Attributes
	if attrs["DisplayName"] != "Orders" || attrs["TopicArn"] != topic || attrs["Owner"] != "000000000000" || attrs["SubscriptionsConfirmed"] != "0" {
		t.Fatalf("topic attributes %v", attrs)
	}
	tags := must[*sns.ListTagsForResourceOutput](t)(c.ListTagsForResource(ctx, &sns.ListTagsForResourceInput{ResourceArn: &topic})).Tags
	if len(tags) != 1 || aws.ToString(tags[0].Value) != "0" {
		t.Fatalf("tags %v", tags)
	}
	if _, err := c.UntagResource(ctx, &sns.UntagResourceInput{ResourceArn: &topic, TagKeys: []string{"n"}}); err != nil {
		t.Fatal(err)
	}

	q := srv.CreateQueue(t, "q", nil)
	sub := subscribeQueue(t, srv, topic, q, map[string]string{"RawMessageDelivery": "true"})
	if same := subscribeQueue(t, srv, topic, q, nil); same != sub {
		t.Fatalf("subscribing again: %s, want %s", same, sub)
	}
	if _, err := c.SetSubscriptionAttributes(ctx, &sns.SetSubscriptionAttributesInput{SubscriptionArn: &sub,
		AttributeName: aws.String("FilterPolicy"), AttributeValue: aws.String(`{"a": [{"numeric": ["!", 1]}]}`)}); apiCode(err) != "InvalidParameter" {
		t.Fatalf("a bad filter policy: %v", err)
	}
	subs := must[*sns.ListSubscriptionsByTopicOutput](t)(c.ListSubscriptionsByTopic(ctx, &sns.ListSubscriptionsByTopicInput{TopicArn: &topic})).Subscriptions
	if len(subs) != 1 || aws.ToString(subs[0].Protocol) != "sqs" || aws.ToString(subs[0].Endpoint) != srv.QueueARN(t, q) {
		t.Fatalf("subscriptions %+v", subs)
	}
	sattrs := must[*sns.GetSubscriptionAttributesOutput](t)(c.GetSubscriptionAttributes(ctx, &sns.GetSubscriptionAttributesInput{SubscriptionArn: &sub})).Attributes
	if sattrs["RawMessageDelivery"] != "true" || sattrs["PendingConfirmation"] != "false" || sattrs["TopicArn"] != topic {
		t.Fatalf("subscription attributes %v", sattrs)
	}

	for name, err := range map[string]error{
		"NotFound": func() error {
			_, err := c.Publish(ctx, &sns.PublishInput{TopicArn: aws.String(topic + "-gone"), Message: aws.String("x")})
			return err
		}(),
		"InvalidParameter": func() error {
			_, err := c.Subscribe(ctx, &sns.SubscribeInput{TopicArn: &topic, Protocol: aws.String("https"), Endpoint: aws.String("https://example.com")})
			return err
		}(),
	} {
		wantCode(t, err, name)
	}
	_, err := c.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String("")})
	wantCode(t, err, "InvalidParameter")

	if _, err := c.DeleteTopic(ctx, &sns.DeleteTopicInput{TopicArn: &topic}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetSubscriptionAttributes(ctx, &sns.GetSubscriptionAttributesInput{SubscriptionArn: &sub})
	wantCode(t, err, "NotFound")
}

func TestSNSPublishBatch(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	topic := aws.ToString(must[*sns.CreateTopicOutput](t)(srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("t")})).TopicArn)
	q := srv.CreateQueue(t, "q", nil)
	subscribeQueue(t, srv, topic, q, map[string]string{"RawMessageDelivery": "true"})
	out, err := srv.SNS.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: &topic, PublishBatchRequestEntries: []snstypes.PublishBatchRequestEntry{
		{Id: aws.String("a"), Message: aws.String("one")},
		{Id: aws.String("b"), Message: aws.String("two"), MessageAttributes: map[string]snstypes.MessageAttributeValue{"x": {DataType: aws.String("Weird")}}},
		{Id: aws.String("c"), Message: aws.String("three")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Successful) != 2 || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Id) != "b" || aws.ToString(out.Failed[0].Code) != "InvalidParameterValue" {
		t.Fatalf("batch %+v", out)
	}
	var bodies []string
	for _, m := range receiveAll(t, srv.Client, q) {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	sort.Strings(bodies)
	if len(bodies) != 2 || bodies[0] != "one" || bodies[1] != "three" {
		t.Fatalf("delivered %v", bodies)
	}
	_, err = srv.SNS.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: &topic, PublishBatchRequestEntries: []snstypes.PublishBatchRequestEntry{
		{Id: aws.String("a"), Message: aws.String("one")}, {Id: aws.String("a"), Message: aws.String("two")}}})
	wantCode(t, err, "BatchEntryIdsNotDistinct")
}

// A durable server keeps its topics and subscriptions, filter policies
// included.
func TestSNSDurable(t *testing.T) {
	dir := t.TempDir()
	mock := sqstest.Start(t).Clock // a clock at Epoch
	srv := sqstest.StartWithClock(t, mock, sqsserver.WithDir(dir))
	ctx := context.Background()
	topic := aws.ToString(must[*sns.CreateTopicOutput](t)(srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("t")})).TopicArn)
	q := srv.CreateQueue(t, "q", nil)
	subscribeQueue(t, srv, topic, q, map[string]string{"RawMessageDelivery": "true", "FilterPolicy": `{"k": ["v"]}`})
	srv.Close()

	srv = sqstest.StartWithClock(t, mock, sqsserver.WithDir(dir))
	for _, v := range []string{"v", "w"} {
		if _, err := srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String(v),
			MessageAttributes: map[string]snstypes.MessageAttributeValue{"k": strAttr(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	mock.Add(time.Second)
	got := receiveAll(t, srv.Client, q)
	if len(got) != 1 || aws.ToString(got[0].Body) != "v" {
		t.Fatalf("after a restart the filtered raw subscription got %v", got)
	}
}

// A delivery its queue refuses goes to the subscription's dead-letter
// queue (RedrivePolicy).
func TestSNSSubscriptionRedrivePolicy(t *testing.T) {
	srv := sqstest.Start(t)
	ctx := context.Background()
	topic := aws.ToString(must[*sns.CreateTopicOutput](t)(srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("t")})).TopicArn)
	small := srv.CreateQueue(t, "small", map[string]string{"MaximumMessageSize": "1024"})
	dlq := srv.CreateQueue(t, "sub-dlq", nil)
	subscribeQueue(t, srv, topic, small, map[string]string{"RawMessageDelivery": "true",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + srv.QueueARN(t, dlq) + `"}`})
	long := strings.Repeat("x", 2000)
	for _, m := range []string{"fits", long} {
		if _, err := srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String(m)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := receiveAll(t, srv.Client, small); len(got) != 1 || aws.ToString(got[0].Body) != "fits" {
		t.Fatalf("the queue got %v", got)
	}
	if got := receiveAll(t, srv.Client, dlq); len(got) != 1 || aws.ToString(got[0].Body) != long {
		t.Fatalf("the subscription's DLQ got %d", len(got))
	}
}
