package sqsserver_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func entry(id, body string) types.SendMessageBatchRequestEntry {
	return types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(body)}
}

// A batch with bad entries sends the good ones and reports each bad one,
// SenderFault true and its code; the SDK checks the good ones' MD5s.
func TestSendMessageBatchPartialFailure(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", nil)
	bad := entry("bad-attr", "x")
	bad.MessageAttributes = map[string]types.MessageAttributeValue{"AWS.reserved": {DataType: aws.String("String"), StringValue: aws.String("v")}}
	delayed := entry("delayed", "later")
	delayed.DelaySeconds = 60
	out := must[*sqs.SendMessageBatchOutput](t)(c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
		entry("ok1", "one"), bad, entry("bad-body", "nul \x00"), delayed, entry("ok2", "two"),
	}}))
	if len(out.Successful) != 3 || len(out.Failed) != 2 {
		t.Fatalf("successful %d, failed %+v", len(out.Successful), out.Failed)
	}
	codes := map[string]string{}
	for _, f := range out.Failed {
		if !f.SenderFault {
			t.Errorf("%s: not the sender's fault", *f.Id)
		}
		codes[*f.Id] = *f.Code
	}
	if codes["bad-attr"] != "InvalidParameterValue" || codes["bad-body"] != "InvalidMessageContents" {
		t.Fatalf("codes %v", codes)
	}
	if got := bodies(receive(t, c, url, 10)); len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Fatalf("received %v", got)
	}
}

// The batch-wide limits, each with SQS's error.
func TestBatchLimits(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", nil)
	var eleven []types.SendMessageBatchRequestEntry
	for i := range 11 {
		eleven = append(eleven, entry("e"+strconv.Itoa(i), "x"))
	}
	big := strings.Repeat("x", 600_000)
	for name, tc := range map[string]struct {
		entries []types.SendMessageBatchRequestEntry
		code    string
	}{
		"empty":      {[]types.SendMessageBatchRequestEntry{}, "AWS.SimpleQueueService.EmptyBatchRequest"},
		"eleven":     {eleven, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"},
		"same ids":   {[]types.SendMessageBatchRequestEntry{entry("a", "x"), entry("a", "y")}, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"},
		"bad id":     {[]types.SendMessageBatchRequestEntry{entry("no spaces", "x")}, "AWS.SimpleQueueService.InvalidBatchEntryId"},
		"long id":    {[]types.SendMessageBatchRequestEntry{entry(strings.Repeat("i", 81), "x")}, "AWS.SimpleQueueService.InvalidBatchEntryId"},
		"over 1 MiB": {[]types.SendMessageBatchRequestEntry{entry("a", big), entry("b", big)}, "AWS.SimpleQueueService.BatchRequestTooLong"},
	} {
		// The SDK refuses an empty list itself? It sends it: the server answers.
		_, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: tc.entries})
		if got := apiCode(err); got != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	for name, body := range map[string]string{
		"delete": `{"QueueUrl":"` + url + `","Entries":[]}`,
		"change": `{"QueueUrl":"` + url + `","Entries":[{"Id":"a","ReceiptHandle":"h","VisibilityTimeout":1},{"Id":"a","ReceiptHandle":"h","VisibilityTimeout":1}]}`,
	} {
		action := map[string]string{"delete": "DeleteMessageBatch", "change": "ChangeMessageVisibilityBatch"}[name]
		r := rawCall(t, srv.URL, action, body)
		want := map[string]string{"delete": "EmptyBatchRequest", "change": "BatchEntryIdsNotDistinct"}[name]
		if r.header.Get("X-Amzn-ErrorType") != want {
			t.Errorf("%s: %d %s", action, r.status, r.body)
		}
	}
}

// DeleteMessageBatch and ChangeMessageVisibilityBatch settle each entry on
// its own: a forged handle fails, the rest succeed.
func TestSettleBatches(t *testing.T) {
	srv, c := start(t)
	ctx := context.Background()
	url := srv.CreateQueue(t, "q", nil)
	for i := range 3 {
		send(t, c, url, "m"+strconv.Itoa(i))
	}
	ms := receive(t, c, url, 10)
	if len(ms) != 3 {
		t.Fatalf("received %d", len(ms))
	}
	ch := must[*sqs.ChangeMessageVisibilityBatchOutput](t)(c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: ms[0].ReceiptHandle, VisibilityTimeout: 0},
		{Id: aws.String("b"), ReceiptHandle: aws.String("forged"), VisibilityTimeout: 10},
		{Id: aws.String("c"), ReceiptHandle: ms[1].ReceiptHandle, VisibilityTimeout: 99999},
	}}))
	if len(ch.Successful) != 1 || len(ch.Failed) != 2 || *ch.Failed[0].Code != "ReceiptHandleIsInvalid" || *ch.Failed[1].Code != "InvalidParameterValue" {
		t.Fatalf("change batch: %+v %+v", ch.Successful, ch.Failed)
	}
	if got := bodies(receive(t, c, url, 10)); len(got) != 1 || got[0] != "m0" {
		t.Fatalf("after the change to 0: %v", got)
	}
	del := must[*sqs.DeleteMessageBatchOutput](t)(c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("x"), ReceiptHandle: ms[1].ReceiptHandle},
		{Id: aws.String("y"), ReceiptHandle: aws.String("garbage")},
		{Id: aws.String("z"), ReceiptHandle: ms[2].ReceiptHandle},
	}}))
	if len(del.Successful) != 2 || len(del.Failed) != 1 || *del.Failed[0].Id != "y" {
		t.Fatalf("delete batch: %+v %+v", del.Successful, del.Failed)
	}
	st := must[*sqs.GetQueueAttributesOutput](t)(c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"All"}}))
	if st.Attributes["ApproximateNumberOfMessagesNotVisible"] != "1" || st.Attributes["ApproximateNumberOfMessages"] != "0" {
		t.Fatalf("counts %v", st.Attributes)
	}
}
