package sqsserver

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
)

// The XML namespaces of SQS's and SNS's query protocols.
const (
	queryNamespace = "http://queue.amazonaws.com/doc/2012-11-05/"
	snsNamespace   = "http://sns.amazonaws.com/doc/2010-03-31/"
)

// queryService is the query protocol of one service: its actions, how it
// names lists and maps, and its XML namespace.
type queryService struct {
	handlers  map[string]handler
	dialect   dialect
	namespace string
}

var (
	sqsQuery = queryService{handlers, sqsDialect, queryNamespace}
	snsQuery = queryService{snsHandlers, snsDialect, snsNamespace}
)

// snsHandlers are SNS's actions, served by the query protocol only (no
// SDK has another for SNS). Their names differ from every SQS action's.
var snsHandlers = map[string]handler{
	"CreateTopic":               decode(createTopic),
	"DeleteTopic":               decode(deleteTopic),
	"ListTopics":                decode(listTopics),
	"GetTopicAttributes":        decode(getTopicAttributes),
	"SetTopicAttributes":        decode(setTopicAttributes),
	"Subscribe":                 decode(subscribe),
	"Unsubscribe":               decode(unsubscribe),
	"ListSubscriptions":         decode(listSubscriptions),
	"ListSubscriptionsByTopic":  decode(listSubscriptionsByTopic),
	"GetSubscriptionAttributes": decode(getSubscriptionAttributes),
	"SetSubscriptionAttributes": decode(setSubscriptionAttributes),
	"Publish":                   decode(publish),
	"PublishBatch":              decode(publishBatch),
	"TagResource":               decode(tagResource),
	"UntagResource":             decode(untagResource),
	"ListTagsForResource":       decode(listTagsForResource),
}

// serveQuery serves a request of SQS's query protocol: the action and its
// parameters form-encoded, in a POST's body or a GET's query, posted to
// the root or to a queue's URL (which then names the queue); the answer in
// XML. Version is not required. The action runs the same handler as the
// JSON protocol's, with the same errors.
func (s *Server) serveQuery(w http.ResponseWriter, r *http.Request, reqID string) {
	if r.Method == http.MethodGet && r.URL.Path == "/" && r.URL.RawQuery == "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "leasebus-sqs: the SQS JSON protocol (POST / with X-Amz-Target: AmazonSQS.<Action>) and query protocol (Action=<Action>, form-encoded); control under /leasebus/")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		writeQueryError(w, kInvalidAction.new("SQS requests are POST or GET, not %s.", r.Method), reqID)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		writeQueryError(w, kInvalidParameterValue.new("The request could not be read as a form (at most %d bytes): %v", maxBody, err), reqID)
		return
	}
	form := r.Form
	action := form.Get("Action")
	noteAction(w, "query", action)
	svc := sqsQuery
	h, found := handlers[action]
	if sh, ok := snsHandlers[action]; ok {
		svc, h, found = snsQuery, sh, true
	}
	switch {
	case action == "":
		writeQueryError(w, kMissingAction.new("The request has no Action: this server speaks the SQS JSON protocol (X-Amz-Target) and the SQS and SNS query protocols (Action=...)."), reqID)
		return
	case !found:
		writeQueryError(w, kInvalidAction.new("The action %s is not valid for this endpoint.", action), reqID)
		return
	}
	writeErr := func(e *Error) { writeQueryErrorIn(w, e, reqID, svc.namespace) }
	rc := &request{s: s, r: r, sender: s.cfg.account}
	if err := s.authenticate(rc); err != nil {
		writeErr(err)
		return
	}
	var out any
	var err error
	if h.call != nil {
		in := reflect.New(h.in)
		if _, err := svc.dialect.fromFormInto(form, "", in.Elem(), action); err != nil {
			writeErr(asError(err))
			return
		}
		if f := in.Elem().FieldByName("QueueURL"); f.IsValid() && f.Kind() == reflect.Pointer && f.IsNil() && r.URL.Path != "/" {
			u := rc.baseURL() + r.URL.Path // posted to the queue's URL
			f.Set(reflect.ValueOf(&u))
		}
		s.advanceTasks()
		out, err = h.call(rc, in.Interface())
	} else {
		s.advanceTasks()
		out, err = h.run(rc, []byte("{}"))
	}
	if err != nil {
		writeErr(asError(err))
		return
	}
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<")
	b.WriteString(action)
	b.WriteString(`Response xmlns="`)
	b.WriteString(svc.namespace)
	b.WriteString(`">`)
	result, at := action+"Result", b.Len()
	open(&b, result)
	start := b.Len()
	svc.dialect.writeXML(&b, reflect.ValueOf(out), action)
	if b.Len() > start || hasFields(out) {
		closeTag(&b, result)
	} else {
		b.Truncate(at) // no Result element
	}
	b.WriteString("<ResponseMetadata><RequestId>")
	b.WriteString(reqID)
	b.WriteString("</RequestId></ResponseMetadata>")
	closeTag(&b, action+"Response")
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", reqID)
	_, _ = w.Write(b.Bytes()) // a write error means the client is gone
}

// emptyResult is the output of an action whose answer has an empty Result
// element (SNS's TagResource and UntagResource), where struct{} has none.
type emptyResult struct{}

// hasFields reports whether an action's output is a structure with fields
// (an empty result is still a Result element), as opposed to struct{}.
func hasFields(out any) bool {
	if _, ok := out.(emptyResult); ok {
		return true
	}
	t := reflect.TypeOf(out)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && t.Kind() == reflect.Struct && t.NumField() > 0
}

// writeQueryError sends e as SQS's query protocol does: AWS's XML
// ErrorResponse with the legacy code, and the JSON side's status, but for
// ReceiptHandleIsInvalid, which SQS's query protocol answers with 400 (the
// JSON model says 404).
func writeQueryError(w http.ResponseWriter, e *Error, reqID string) {
	writeQueryErrorIn(w, e, reqID, queryNamespace)
}

// writeQueryErrorIn is writeQueryError in a service's namespace.
func writeQueryErrorIn(w http.ResponseWriter, e *Error, reqID, namespace string) {
	noteError(w, e)
	typ := "Receiver"
	if e.Sender {
		typ = "Sender"
	}
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	fmt.Fprintf(&b, `<ErrorResponse xmlns="%s"><Error>`, namespace)
	element(&b, "Type", typ)
	element(&b, "Code", e.QueryCode)
	element(&b, "Message", e.Message)
	b.WriteString("<Detail/></Error>")
	element(&b, "RequestId", reqID)
	b.WriteString("</ErrorResponse>")
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", reqID)
	status := e.Status
	if e.Type == kReceiptHandleInvalid.typ {
		status = http.StatusBadRequest
	}
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}
