package sqsserver_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// referenceMD5 is SQS's MD5OfMessageAttributes, written out from AWS's
// description independently of the server's code: names sorted; for each,
// length-prefixed (4 bytes, big-endian) name and data type, a transport
// byte (1 string/number, 2 binary), and the length-prefixed value.
func referenceMD5(attrs map[string]types.MessageAttributeValue) string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	field := func(b []byte) {
		buf.Write([]byte{byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))})
		buf.Write(b)
	}
	for _, n := range names {
		a := attrs[n]
		field([]byte(n))
		field([]byte(aws.ToString(a.DataType)))
		if a.BinaryValue != nil {
			buf.WriteByte(2)
			field(a.BinaryValue)
		} else {
			buf.WriteByte(1)
			field([]byte(aws.ToString(a.StringValue)))
		}
	}
	sum := md5.Sum(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

func md5Of(s string) string { sum := md5.Sum([]byte(s)); return hex.EncodeToString(sum[:]) }

// Message attributes and their checksums on send and receive, the system
// attributes, and the selection of attributes by name and prefix.
func TestMessageAttributesAndChecksums(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", nil)
	attrs := map[string]types.MessageAttributeValue{
		"order.id":    {DataType: aws.String("Number"), StringValue: aws.String("12345")},
		"order.kind":  {DataType: aws.String("String.kind"), StringValue: aws.String("büro ✓")},
		"thumb":       {DataType: aws.String("Binary.png"), BinaryValue: []byte{0, 1, 2, 255}},
		"zz-priority": {DataType: aws.String("Number.float"), StringValue: aws.String("-1.5e3")},
	}
	body := "héllo\n\tworld 🌍"
	out := must[*sqs.SendMessageOutput](t)(c.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: attrs,
		MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{
			"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793")},
		},
	}))
	if aws.ToString(out.MD5OfMessageBody) != md5Of(body) {
		t.Fatalf("MD5OfMessageBody %s", aws.ToString(out.MD5OfMessageBody))
	}
	if got, want := aws.ToString(out.MD5OfMessageAttributes), referenceMD5(attrs); got != want {
		t.Fatalf("MD5OfMessageAttributes %s, want %s", got, want)
	}
	trace := map[string]types.MessageAttributeValue{"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793")}}
	if got, want := aws.ToString(out.MD5OfMessageSystemAttributes), referenceMD5(trace); got != want {
		t.Fatalf("MD5OfMessageSystemAttributes %s, want %s", got, want)
	}

	rec := must[*sqs.ReceiveMessageOutput](t)(c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MessageAttributeNames: []string{"order.*"}, VisibilityTimeout: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSenderId, types.MessageSystemAttributeNameAWSTraceHeader, types.MessageSystemAttributeNameSentTimestamp},
	}))
	m := rec.Messages[0]
	if aws.ToString(m.Body) != body || aws.ToString(m.MD5OfBody) != md5Of(body) {
		t.Fatalf("body %q md5 %s", aws.ToString(m.Body), aws.ToString(m.MD5OfBody))
	}
	if len(m.MessageAttributes) != 2 || aws.ToString(m.MD5OfMessageAttributes) != referenceMD5(m.MessageAttributes) {
		t.Fatalf("selected attributes %v, md5 %s", m.MessageAttributes, aws.ToString(m.MD5OfMessageAttributes))
	}
	if len(m.Attributes) != 3 || m.Attributes["SenderId"] != "test" || !strings.HasPrefix(m.Attributes["AWSTraceHeader"], "Root=") ||
		m.Attributes["SentTimestamp"] != "1767225600000" {
		t.Fatalf("system attributes %v", m.Attributes)
	}
	srv.Clock.Add(time.Second)
	m = receive(t, c, url, 1)[0]
	if len(m.MessageAttributes) != 4 || aws.ToString(m.MD5OfMessageAttributes) != referenceMD5(attrs) ||
		!bytes.Equal(m.MessageAttributes["thumb"].BinaryValue, []byte{0, 1, 2, 255}) {
		t.Fatalf("all attributes %v", m.MessageAttributes)
	}
}

// Bad messages are refused with SQS's errors, and nothing is queued.
func TestSendMessageChecks(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", map[string]string{"MaximumMessageSize": "1024"})
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	num := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(v)}
	}
	eleven := map[string]types.MessageAttributeValue{}
	for _, n := range strings.Split("a b c d e f g h i j k", " ") {
		eleven[n] = str("v")
	}
	for name, tc := range map[string]struct {
		in   sqs.SendMessageInput
		code string
	}{
		"control character": {sqs.SendMessageInput{MessageBody: aws.String("a\x01b")}, "InvalidMessageContents"},
		"too long":          {sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("x", 1025))}, "InvalidParameterValue"},
		"attributes count":  {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: eleven}, "InvalidParameterValue"},
		"too long with attributes": {sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("x", 1000)),
			MessageAttributes: map[string]types.MessageAttributeValue{"a": str(strings.Repeat("v", 30))}}, "InvalidParameterValue"},
		"reserved name":  {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{"Amazon.x": str("v")}}, "InvalidParameterValue"},
		"dots":           {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{"a..b": str("v")}}, "InvalidParameterValue"},
		"empty value":    {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{"a": str("")}}, "InvalidParameterValue"},
		"bad type":       {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{"a": {DataType: aws.String("Date"), StringValue: aws.String("v")}}}, "InvalidParameterValue"},
		"not a number":   {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{"a": num("12a")}}, "InvalidParameterValue"},
		"huge number":    {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{"a": num("1e127")}}, "InvalidParameterValue"},
		"39 digits":      {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{"a": num(strings.Repeat("9", 39))}}, "InvalidParameterValue"},
		"list values":    {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{"a": {DataType: aws.String("String"), StringListValues: []string{"v"}}}}, "InvalidParameterValue"},
		"binary as text": {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{"a": {DataType: aws.String("Binary"), StringValue: aws.String("v")}}}, "InvalidParameterValue"},
		"system name":    {sqs.SendMessageInput{MessageBody: aws.String("x"), MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{"Other": {DataType: aws.String("String"), StringValue: aws.String("v")}}}, "InvalidParameterValue"},
		"delay over 900": {sqs.SendMessageInput{MessageBody: aws.String("x"), DelaySeconds: 901}, "InvalidParameterValue"},
		"delay negative": {sqs.SendMessageInput{MessageBody: aws.String("x"), DelaySeconds: -1}, "InvalidParameterValue"},
	} {
		in := tc.in
		in.QueueUrl = aws.String(url)
		_, err := c.SendMessage(ctx, &in)
		if got := apiCode(err); got != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	// What the SDK checks itself, sent raw.
	for body, want := range map[string]string{
		`{"QueueUrl":"` + url + `","MessageBody":""}`: "MissingParameter",
		`{"QueueUrl":"` + url + `"}`:                  "MissingParameter",
		`{"QueueUrl":"` + url + `","MessageBody":"x","MessageAttributes":{"a":{"StringValue":"v"}}}`: "InvalidParameterValue",
	} {
		if r := rawCall(t, srv.URL, "SendMessage", body); r.header.Get("X-Amzn-ErrorType") != want {
			t.Errorf("%s: %s, want %s", body, r.body, want)
		}
	}
	// Edge values that pass.
	must[*sqs.SendMessageOutput](t)(c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(strings.Repeat("x", 1024))}))
	must[*sqs.SendMessageOutput](t)(c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
		MessageAttributes: map[string]types.MessageAttributeValue{"a": num("-0.00001"), "b": num(strings.Repeat("9", 38)), "c": num("1e-128")}}))
	if ms := receive(t, c, url, 10); len(ms) != 2 {
		t.Fatalf("queued %d, want the 2 valid ones", len(ms))
	}
	// The receive's limits.
	for name, in := range map[string]*sqs.ReceiveMessageInput{
		"max 11":        {QueueUrl: aws.String(url), MaxNumberOfMessages: 11},
		"wait 21":       {QueueUrl: aws.String(url), WaitTimeSeconds: 21},
		"visibility -1": {QueueUrl: aws.String(url), VisibilityTimeout: -1},
		"visibility":    {QueueUrl: aws.String(url), VisibilityTimeout: 43201},
	} {
		_, err := c.ReceiveMessage(ctx, in)
		if apiCode(err) != "InvalidParameterValue" {
			t.Errorf("receive %s: %v", name, err)
		}
	}
}

// DelaySeconds of the queue, and of a message (which wins).
func TestDelays(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", map[string]string{"DelaySeconds": "10"})
	send(t, c, url, "queue-delay")
	must[*sqs.SendMessageOutput](t)(c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("own-delay"), DelaySeconds: 3}))
	attrs := must[*sqs.GetQueueAttributesOutput](t)(c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessagesDelayed"}})).Attributes
	if attrs["ApproximateNumberOfMessagesDelayed"] != "2" {
		t.Fatalf("delayed %v", attrs)
	}
	srv.Clock.Add(3 * time.Second)
	if got := bodies(receive(t, c, url, 10)); len(got) != 1 || got[0] != "own-delay" {
		t.Fatalf("at 3 s: %v", got)
	}
	srv.Clock.Add(7*time.Second - time.Nanosecond)
	if got := receive(t, c, url, 10); len(got) != 0 {
		t.Fatalf("before 10 s: %v", bodies(got))
	}
	srv.Clock.Add(time.Nanosecond)
	if got := bodies(receive(t, c, url, 10)); len(got) != 1 || got[0] != "queue-delay" {
		t.Fatalf("at 10 s: %v", got)
	}
}

// MessageRetentionPeriod: a message older than the queue's retention is
// deleted, also when the retention is shortened after it was sent.
func TestRetention(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", map[string]string{"MessageRetentionPeriod": "120"})
	send(t, c, url, "old")
	srv.Clock.Add(2 * time.Minute)
	if ms := receive(t, c, url, 1); len(ms) != 0 {
		t.Fatal("received after its retention")
	}
	must[*sqs.SetQueueAttributesOutput](t)(c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{"MessageRetentionPeriod": "3600"}}))
	send(t, c, url, "new")
	srv.Clock.Add(30 * time.Minute)
	must[*sqs.SetQueueAttributesOutput](t)(c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{"MessageRetentionPeriod": "600"}}))
	if ms := receive(t, c, url, 1); len(ms) != 0 {
		t.Fatal("received after the shortened retention")
	}
}

// AWS's limits since August 2025: a message of 1 MiB, and a queue's
// MaximumMessageSize up to 1,048,576, its default.
func TestOneMiBMessages(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	q := srv.CreateQueue(t, "big", map[string]string{"MaximumMessageSize": "1048576"})
	body := strings.Repeat("m", 1<<20)
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: &body}); err != nil {
		t.Fatalf("a 1 MiB message: %v", err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q})
	if err != nil || len(out.Messages) != 1 || len(aws.ToString(out.Messages[0].Body)) != 1<<20 {
		t.Fatalf("receive: %v", err)
	}
	over := body + "m"
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q, MessageBody: &over})
	wantCode(t, err, "InvalidParameterValue")
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("bigger"), Attributes: map[string]string{"MaximumMessageSize": "1048577"}})
	wantCode(t, err, "InvalidAttributeValue")
	dflt := srv.CreateQueue(t, "default", nil)
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &dflt, AttributeNames: []types.QueueAttributeName{"MaximumMessageSize"}})
	if err != nil || attrs.Attributes["MaximumMessageSize"] != "1048576" {
		t.Fatalf("default MaximumMessageSize: %v %v", attrs, err)
	}
}
