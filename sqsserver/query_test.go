package sqsserver_test

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// queryCall sends an SQS query-protocol request (form-encoded, POST to
// path, or GET with the form as the query) as an older SDK would, and
// returns the status and the XML.
func queryCall(t *testing.T, srv *sqstest.Server, method, path string, form url.Values) (int, string) {
	t.Helper()
	var req *http.Request
	var err error
	if method == http.MethodGet {
		req, err = http.NewRequest(method, srv.URL+path+"?"+form.Encode(), nil)
	} else {
		req, err = http.NewRequest(method, srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	}
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "text/xml" {
		t.Fatalf("Content-Type %q", ct)
	}
	return resp.StatusCode, string(b)
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

// The shapes a query client reads, as AWS's XML has them.
type (
	xmlAttr struct {
		Name  string `xml:"Name"`
		Value string `xml:"Value"`
	}
	xmlMessageAttr struct {
		Name  string `xml:"Name"`
		Value struct {
			DataType    string `xml:"DataType"`
			StringValue string `xml:"StringValue"`
			BinaryValue string `xml:"BinaryValue"`
		} `xml:"Value"`
	}
	xmlMessage struct {
		MessageID         string           `xml:"MessageId"`
		ReceiptHandle     string           `xml:"ReceiptHandle"`
		MD5OfBody         string           `xml:"MD5OfBody"`
		Body              string           `xml:"Body"`
		Attributes        []xmlAttr        `xml:"Attribute"`
		MessageAttributes []xmlMessageAttr `xml:"MessageAttribute"`
	}
	xmlBatchError struct {
		ID          string `xml:"Id"`
		Code        string `xml:"Code"`
		SenderFault bool   `xml:"SenderFault"`
	}
	xmlResponse struct {
		XMLName   xml.Name
		RequestID string `xml:"ResponseMetadata>RequestId"`
		Result    struct {
			QueueURLs  []string     `xml:"QueueUrl"`
			MessageID  string       `xml:"MessageId"`
			MD5        string       `xml:"MD5OfMessageBody"`
			Attributes []xmlAttr    `xml:"Attribute"`
			Messages   []xmlMessage `xml:"Message"`
			Tags       []struct {
				Key   string `xml:"Key"`
				Value string `xml:"Value"`
			} `xml:"Tag"`
			SendEntries []struct {
				ID        string `xml:"Id"`
				MessageID string `xml:"MessageId"`
			} `xml:"SendMessageBatchResultEntry"`
			DeleteEntries []struct {
				ID string `xml:"Id"`
			} `xml:"DeleteMessageBatchResultEntry"`
			Failed []xmlBatchError `xml:"BatchResultErrorEntry"`
		} `xml:",any"`
	}
	xmlError struct {
		XMLName   xml.Name `xml:"ErrorResponse"`
		Type      string   `xml:"Error>Type"`
		Code      string   `xml:"Error>Code"`
		Message   string   `xml:"Error>Message"`
		RequestID string   `xml:"RequestId"`
	}
)

func parseResponse(t *testing.T, status int, body, action string) xmlResponse {
	t.Helper()
	if status != http.StatusOK {
		t.Fatalf("%s: status %d: %s", action, status, body)
	}
	var r xmlResponse
	if err := xml.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("%s: %v in %s", action, err, body)
	}
	if r.XMLName.Local != action+"Response" || r.XMLName.Space != "http://queue.amazonaws.com/doc/2012-11-05/" || r.RequestID == "" {
		t.Fatalf("%s: envelope %v, request id %q", action, r.XMLName, r.RequestID)
	}
	return r
}

func parseError(t *testing.T, status int, body string) xmlError {
	t.Helper()
	var e xmlError
	if err := xml.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error response %d: %v in %s", status, err, body)
	}
	return e
}

// Every kind of field a query client sends and reads, through the same
// handlers as the JSON side: maps (Attribute.N, Tag.N, MessageAttribute.N),
// lists (AttributeName.N), batch entries, a request posted to the queue's
// URL without QueueUrl, a GET, and no Version.
func TestQueryProtocol(t *testing.T) {
	srv := sqstest.Start(t)
	status, body := queryCall(t, srv, http.MethodPost, "/", form("Action", "CreateQueue", "QueueName", "jobs",
		"Attribute.1.Name", "VisibilityTimeout", "Attribute.1.Value", "45", "Tag.1.Key", "team", "Tag.1.Value", "a"))
	created := parseResponse(t, status, body, "CreateQueue").Result.QueueURLs
	if len(created) != 1 || created[0] != srv.URL+"/000000000000/jobs" {
		t.Fatalf("QueueUrl %q", created)
	}
	q := created[0]
	status, body = queryCall(t, srv, http.MethodGet, "/", form("Action", "GetQueueUrl", "QueueName", "jobs"))
	if got := parseResponse(t, status, body, "GetQueueUrl").Result.QueueURLs; len(got) != 1 || got[0] != q {
		t.Fatalf("GetQueueUrl %q", got)
	}
	status, body = queryCall(t, srv, http.MethodPost, "/", form("Action", "ListQueues"))
	if got := parseResponse(t, status, body, "ListQueues").Result.QueueURLs; len(got) != 1 || got[0] != q {
		t.Fatalf("ListQueues %v", got)
	}

	status, body = queryCall(t, srv, http.MethodPost, "/", form("Action", "SendMessage", "QueueUrl", q, "MessageBody", "resize <b>&</b>",
		"MessageAttribute.1.Name", "size", "MessageAttribute.1.Value.DataType", "Number", "MessageAttribute.1.Value.StringValue", "42",
		"MessageAttribute.2.Name", "raw", "MessageAttribute.2.Value.DataType", "Binary", "MessageAttribute.2.Value.BinaryValue", "AAE="))
	sent := parseResponse(t, status, body, "SendMessage").Result
	if sent.MessageID == "" || sent.MD5 != md5Hex("resize <b>&</b>") {
		t.Fatalf("SendMessage %+v", sent)
	}
	status, body = queryCall(t, srv, http.MethodPost, "/000000000000/jobs", form("Action", "SendMessageBatch",
		"SendMessageBatchRequestEntry.1.Id", "a", "SendMessageBatchRequestEntry.1.MessageBody", "x",
		"SendMessageBatchRequestEntry.2.Id", "b", "SendMessageBatchRequestEntry.2.MessageBody", "y",
		"SendMessageBatchRequestEntry.2.DelaySeconds", "5"))
	batch := parseResponse(t, status, body, "SendMessageBatch").Result
	if len(batch.SendEntries) != 2 || batch.SendEntries[0].ID != "a" || batch.SendEntries[1].MessageID == "" {
		t.Fatalf("SendMessageBatch %+v", batch)
	}

	status, body = queryCall(t, srv, http.MethodPost, "/000000000000/jobs", form("Action", "ReceiveMessage",
		"MaxNumberOfMessages", "10", "AttributeName.1", "All", "MessageAttributeName.1", "All"))
	msgs := parseResponse(t, status, body, "ReceiveMessage").Result.Messages
	if len(msgs) != 2 {
		t.Fatalf("ReceiveMessage: %d messages: %s", len(msgs), body)
	}
	m := msgs[0]
	if m.Body != "resize <b>&</b>" || m.MessageID != sent.MessageID || len(m.MessageAttributes) != 2 {
		t.Fatalf("message %+v", m)
	}
	if a := m.MessageAttributes[0]; a.Name != "raw" || a.Value.DataType != "Binary" || a.Value.BinaryValue != "AAE=" {
		t.Fatalf("binary attribute %+v", a)
	}
	if a := m.MessageAttributes[1]; a.Name != "size" || a.Value.StringValue != "42" {
		t.Fatalf("number attribute %+v", a)
	}
	count := ""
	for _, a := range m.Attributes {
		if a.Name == "ApproximateReceiveCount" {
			count = a.Value
		}
	}
	if count != "1" {
		t.Fatalf("ApproximateReceiveCount %q in %+v", count, m.Attributes)
	}

	status, body = queryCall(t, srv, http.MethodPost, "/", form("Action", "DeleteMessageBatch", "QueueUrl", q,
		"DeleteMessageBatchRequestEntry.1.Id", "one", "DeleteMessageBatchRequestEntry.1.ReceiptHandle", msgs[1].ReceiptHandle,
		"DeleteMessageBatchRequestEntry.2.Id", "two", "DeleteMessageBatchRequestEntry.2.ReceiptHandle", "bogus"))
	del := parseResponse(t, status, body, "DeleteMessageBatch").Result
	if len(del.DeleteEntries) != 1 || del.DeleteEntries[0].ID != "one" || len(del.Failed) != 1 ||
		del.Failed[0] != (xmlBatchError{"two", "ReceiptHandleIsInvalid", true}) {
		t.Fatalf("DeleteMessageBatch %+v", del)
	}
	status, body = queryCall(t, srv, http.MethodPost, "/000000000000/jobs", form("Action", "DeleteMessage", "ReceiptHandle", m.ReceiptHandle))
	parseResponse(t, status, body, "DeleteMessage")
	if strings.Contains(body, "DeleteMessageResult") {
		t.Fatalf("an action without output has no Result: %s", body)
	}

	status, body = queryCall(t, srv, http.MethodPost, "/", form("Action", "GetQueueAttributes", "QueueUrl", q,
		"AttributeName.1", "VisibilityTimeout", "AttributeName.2", "ApproximateNumberOfMessagesDelayed"))
	attrs := parseResponse(t, status, body, "GetQueueAttributes").Result.Attributes
	if len(attrs) != 2 || attrs[0] != (xmlAttr{"ApproximateNumberOfMessagesDelayed", "1"}) || attrs[1] != (xmlAttr{"VisibilityTimeout", "45"}) {
		t.Fatalf("GetQueueAttributes %+v", attrs)
	}
	status, body = queryCall(t, srv, http.MethodPost, "/", form("Action", "TagQueue", "QueueUrl", q, "Tag.1.Key", "env", "Tag.1.Value", "test"))
	parseResponse(t, status, body, "TagQueue")
	status, body = queryCall(t, srv, http.MethodPost, "/", form("Action", "UntagQueue", "QueueUrl", q, "TagKey.1", "team"))
	parseResponse(t, status, body, "UntagQueue")
	status, body = queryCall(t, srv, http.MethodPost, "/", form("Action", "ListQueueTags", "QueueUrl", q))
	if tags := parseResponse(t, status, body, "ListQueueTags").Result.Tags; len(tags) != 1 || tags[0].Key != "env" || tags[0].Value != "test" {
		t.Fatalf("ListQueueTags %+v", tags)
	}
}

// Errors are AWS's XML ErrorResponse with the legacy code, the type and
// the JSON side's status.
func TestQueryProtocolErrors(t *testing.T) {
	srv := sqstest.Start(t)
	for _, c := range []struct {
		form   url.Values
		status int
		typ    string
		code   string
	}{
		{form("Action", "GetQueueUrl", "QueueName", "missing"), 400, "Sender", "AWS.SimpleQueueService.NonExistentQueue"},
		{form("Action", "Frobnicate"), 400, "Sender", "InvalidAction"},
		{form("QueueName", "x"), 400, "Sender", "MissingAction"},
		{form("Action", "ReceiveMessage", "QueueUrl", srv.URL+"/000000000000/x", "MaxNumberOfMessages", "ten"), 400, "Sender", "InvalidParameterValue"},
		{form("Action", "CreateQueue"), 400, "Sender", "MissingParameter"},
		{form("Action", "AddPermission"), 400, "Sender", "AWS.SimpleQueueService.UnsupportedOperation"},
	} {
		status, body := queryCall(t, srv, http.MethodPost, "/", c.form)
		e := parseError(t, status, body)
		if status != c.status || e.Type != c.typ || e.Code != c.code || e.Message == "" || e.RequestID == "" {
			t.Errorf("%v: %d %+v", c.form, status, e)
		}
	}
	status, body := queryCall(t, srv, http.MethodPut, "/", form("Action", "ListQueues"))
	if e := parseError(t, status, body); status != 400 || e.Code != "InvalidAction" {
		t.Errorf("PUT: %d %+v", status, e)
	}
	// A message with markup in it stays well-formed XML.
	status, body = queryCall(t, srv, http.MethodPost, "/", form("Action", "GetQueueUrl", "QueueName", "<&>"))
	if e := parseError(t, status, body); e.Code == "" {
		t.Errorf("%d %s", status, body)
	}
}
