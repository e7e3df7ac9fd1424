package sqsleasebus_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// queryBridge is an http.RoundTripper that lets an AWS SDK v2 SQS client,
// which speaks SQS's JSON protocol only, talk to a server that speaks the
// older query protocol (goaws): it rewrites each JSON request as a query
// form and each XML answer as the JSON the SDK reads, for the actions the
// package and its tests use. ChangeMessageVisibilityBatch, which goaws
// lacks, becomes one ChangeMessageVisibility per entry.
type queryBridge struct{ next http.RoundTripper }

func (b queryBridge) RoundTrip(r *http.Request) (*http.Response, error) {
	action, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if !ok {
		return b.next.RoundTrip(r)
	}
	var in map[string]any
	if r.Body != nil {
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return nil, fmt.Errorf("queryBridge: %s: %w", action, err)
		}
		r.Body.Close()
	}
	if action == "ChangeMessageVisibilityBatch" {
		return b.changeVisibilityBatch(r, in)
	}
	form := url.Values{"Action": {action}, "Version": {"2012-11-05"}}
	flatten(form, action, in)
	status, body, err := b.send(r, form)
	if err != nil {
		return nil, err
	}
	out, err := toJSON(action, status, body)
	if err != nil {
		return nil, fmt.Errorf("queryBridge: %s: %w\n%s", action, err, body)
	}
	return jsonResponse(r, status, out), nil
}

// send posts form to the server and returns its status and body.
func (b queryBridge) send(r *http.Request, form url.Values) (int, []byte, error) {
	q, err := http.NewRequestWithContext(r.Context(), http.MethodPost, r.URL.Scheme+"://"+r.URL.Host+"/", strings.NewReader(form.Encode()))
	if err != nil {
		return 0, nil, err
	}
	q.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := b.next.RoundTrip(q)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func (b queryBridge) changeVisibilityBatch(r *http.Request, in map[string]any) (*http.Response, error) {
	var ok, failed []map[string]any
	entries, _ := in["Entries"].([]any)
	for _, e := range entries {
		e := e.(map[string]any)
		form := url.Values{"Action": {"ChangeMessageVisibility"}, "Version": {"2012-11-05"}}
		flatten(form, "ChangeMessageVisibility", map[string]any{"QueueUrl": in["QueueUrl"], "ReceiptHandle": e["ReceiptHandle"], "VisibilityTimeout": e["VisibilityTimeout"]})
		status, body, err := b.send(r, form)
		if err != nil {
			return nil, err
		}
		if status == http.StatusOK {
			ok = append(ok, map[string]any{"Id": e["Id"]})
			continue
		}
		code, msg := xmlError(body)
		failed = append(failed, map[string]any{"Id": e["Id"], "Code": code, "Message": msg, "SenderFault": true})
	}
	return jsonResponse(r, http.StatusOK, map[string]any{"Successful": ok, "Failed": failed}), nil
}

// queryName is the query protocol's name of a JSON member, where they
// differ: a list or map member is named for one element.
var queryName = map[string]string{
	"AttributeNames": "AttributeName", "MessageSystemAttributeNames": "AttributeName",
	"MessageAttributeNames": "MessageAttributeName", "Attributes": "Attribute",
	"MessageAttributes": "MessageAttribute", "Tags": "Tag",
}

// flatten writes v, the JSON input of action, as query parameters.
func flatten(form url.Values, action string, v map[string]any) {
	for k, x := range v {
		name := k
		if n, ok := queryName[k]; ok {
			name = n
		}
		if k == "Entries" {
			name = action + "RequestEntry"
		}
		put(form, name, x)
	}
}

func put(form url.Values, name string, x any) {
	switch x := x.(type) {
	case nil:
	case []any:
		for i, e := range x {
			put(form, fmt.Sprintf("%s.%d", name, i+1), e)
		}
	case map[string]any:
		if isStruct(name) {
			for k, e := range x {
				n := k
				if q, ok := queryName[k]; ok {
					n = q
				}
				put(form, name+"."+n, e)
			}
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			form.Set(fmt.Sprintf("%s.%d.Name", name, i+1), k)
			put(form, fmt.Sprintf("%s.%d.Value", name, i+1), x[k])
		}
	case float64:
		form.Set(name, strconv.FormatFloat(x, 'f', -1, 64))
	case bool:
		form.Set(name, strconv.FormatBool(x))
	default:
		form.Set(name, fmt.Sprint(x))
	}
}

// isStruct tells a structure (a batch entry, an attribute's value) from a
// map (attributes by name): a map's parameter name is Attribute or
// MessageAttribute, and not already one element of one.
func isStruct(name string) bool {
	last := name[strings.LastIndex(name, ".")+1:]
	return last != "Attribute" && last != "MessageAttribute"
}

// The XML answers, as SQS's query protocol writes them.
type (
	xmlAttr struct {
		Name  string `xml:"Name"`
		Value string `xml:"Value"`
	}
	xmlMsgAttr struct {
		Name  string `xml:"Name"`
		Value struct {
			DataType    string `xml:"DataType"`
			StringValue string `xml:"StringValue"`
		} `xml:"Value"`
	}
	xmlMessage struct {
		MessageId, ReceiptHandle, MD5OfBody, Body, MD5OfMessageAttributes string
		Attribute                                                         []xmlAttr    `xml:"Attribute"`
		MessageAttribute                                                  []xmlMsgAttr `xml:"MessageAttribute"`
	}
	xmlEntry struct {
		Id, MessageId, MD5OfMessageBody, MD5OfMessageAttributes, SequenceNumber, Code, Message string
		SenderFault                                                                            bool
	}
	xmlResult struct {
		QueueUrl, MessageId, MD5OfMessageBody, MD5OfMessageAttributes, SequenceNumber string
		Attribute                                                                     []xmlAttr    `xml:"Attribute"`
		Message                                                                       []xmlMessage `xml:"Message"`
		Entries                                                                       []xmlEntry   `xml:",any"`
	}
)

// toJSON turns the XML answer to action into the JSON the SDK reads.
func toJSON(action string, status int, body []byte) (map[string]any, error) {
	if status != http.StatusOK {
		code, msg := xmlError(body)
		if code == "AWS.SimpleQueueService.NonExistentQueue" {
			code = "QueueDoesNotExist"
		}
		return map[string]any{"__type": "com.amazonaws.sqs#" + code, "message": msg}, nil
	}
	var doc struct {
		Result xmlResult `xml:",any"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := xml.Unmarshal(body, &doc); err != nil {
			return nil, err
		}
	}
	res := doc.Result
	switch action {
	case "CreateQueue", "GetQueueUrl":
		return map[string]any{"QueueUrl": res.QueueUrl}, nil
	case "GetQueueAttributes":
		attrs := map[string]any{}
		for _, a := range res.Attribute {
			attrs[a.Name] = a.Value
		}
		return map[string]any{"Attributes": attrs}, nil
	case "SendMessage":
		return map[string]any{"MessageId": res.MessageId, "MD5OfMessageBody": res.MD5OfMessageBody, "MD5OfMessageAttributes": nonEmpty(res.MD5OfMessageAttributes), "SequenceNumber": nonEmpty(res.SequenceNumber)}, nil
	case "ReceiveMessage":
		msgs := []any{}
		for _, m := range res.Message {
			attrs := map[string]any{}
			for _, a := range m.Attribute {
				attrs[a.Name] = a.Value
			}
			mattrs := map[string]any{}
			for _, a := range m.MessageAttribute {
				mattrs[a.Name] = map[string]any{"DataType": a.Value.DataType, "StringValue": a.Value.StringValue}
			}
			msgs = append(msgs, map[string]any{
				"MessageId": m.MessageId, "ReceiptHandle": m.ReceiptHandle, "MD5OfBody": m.MD5OfBody, "Body": m.Body,
				"Attributes": attrs, "MessageAttributes": mattrs, "MD5OfMessageAttributes": nonEmpty(m.MD5OfMessageAttributes),
			})
		}
		return map[string]any{"Messages": msgs}, nil
	case "SendMessageBatch", "DeleteMessageBatch":
		ok, failed := []any{}, []any{}
		for _, e := range res.Entries {
			if e.Id == "" {
				continue // another element (ResponseMetadata's RequestId)
			}
			if e.Code != "" {
				failed = append(failed, map[string]any{"Id": e.Id, "Code": e.Code, "Message": e.Message, "SenderFault": e.SenderFault})
				continue
			}
			ok = append(ok, map[string]any{"Id": e.Id, "MessageId": nonEmpty(e.MessageId), "MD5OfMessageBody": nonEmpty(e.MD5OfMessageBody),
				"MD5OfMessageAttributes": nonEmpty(e.MD5OfMessageAttributes)})
		}
		return map[string]any{"Successful": ok, "Failed": failed}, nil
	}
	return map[string]any{}, nil // an action that answers nothing
}

// nonEmpty is s, or nil (left out of the JSON) when it is empty.
func nonEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// xmlError reads an ErrorResponse's code and message.
func xmlError(body []byte) (code, msg string) {
	var e struct {
		Error struct{ Code, Message string } `xml:"Error"`
	}
	if err := xml.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
		return "InternalError", strings.TrimSpace(string(body))
	}
	return e.Error.Code, e.Error.Message
}

func jsonResponse(r *http.Request, status int, v map[string]any) *http.Response {
	for k, x := range v {
		if x == nil {
			delete(v, k)
		}
	}
	for _, list := range []string{"Messages", "Successful", "Failed"} {
		if l, ok := v[list].([]any); ok {
			for _, e := range l {
				if m, ok := e.(map[string]any); ok {
					for k, x := range m {
						if x == nil {
							delete(m, k)
						}
					}
				}
			}
		}
	}
	body, _ := json.Marshal(v)
	h := http.Header{"Content-Type": {"application/x-amz-json-1.0"}}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: h, Body: io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
}
