package sqsserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
)

// queryNamespace is the XML namespace of SQS's query protocol.
const queryNamespace = "http://queue.amazonaws.com/doc/2012-11-05/"

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
	h, found := handlers[action]
	switch {
	case action == "":
		writeQueryError(w, kMissingAction.new("The request has no Action: this server speaks the SQS JSON protocol (X-Amz-Target) and query protocol (Action=...)."), reqID)
		return
	case !found:
		writeQueryError(w, kInvalidAction.new("The action %s is not valid for this endpoint.", action), reqID)
		return
	}
	rc := &request{s: s, r: r, sender: s.cfg.account}
	if err := s.authenticate(rc); err != nil {
		writeQueryError(w, err, reqID)
		return
	}
	body := []byte("{}")
	if h.in != nil {
		in, _, err := fromForm(form, "", h.in, action)
		if err != nil {
			writeQueryError(w, asError(err), reqID)
			return
		}
		m := in.(map[string]any)
		if _, ok := h.in.FieldByName("QueueURL"); ok && m["QueueUrl"] == nil && r.URL.Path != "/" {
			m["QueueUrl"] = rc.baseURL() + r.URL.Path // posted to the queue's URL
		}
		if body, err = json.Marshal(m); err != nil {
			writeQueryError(w, kInternal.new("%v", err), reqID)
			return
		}
	}
	out, err := h.run(rc, body)
	if err != nil {
		writeQueryError(w, asError(err), reqID)
		return
	}
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	fmt.Fprintf(&b, `<%sResponse xmlns="%s">`, action, queryNamespace)
	var result bytes.Buffer
	writeXML(&result, reflect.ValueOf(out), action)
	if result.Len() > 0 || hasFields(out) {
		fmt.Fprintf(&b, "<%sResult>", action)
		b.Write(result.Bytes())
		fmt.Fprintf(&b, "</%sResult>", action)
	}
	fmt.Fprintf(&b, "<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>", reqID, action)
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", reqID)
	_, _ = w.Write(b.Bytes()) // a write error means the client is gone
}

// hasFields reports whether an action's output is a structure with fields
// (an empty result is still a Result element), as opposed to struct{}.
func hasFields(out any) bool {
	t := reflect.TypeOf(out)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && t.Kind() == reflect.Struct && t.NumField() > 0
}

// writeQueryError sends e as the query protocol does: AWS's XML
// ErrorResponse with the legacy code, and the JSON side's status.
func writeQueryError(w http.ResponseWriter, e *Error, reqID string) {
	noteError(w, e)
	typ := "Receiver"
	if e.Sender {
		typ = "Sender"
	}
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	fmt.Fprintf(&b, `<ErrorResponse xmlns="%s"><Error>`, queryNamespace)
	element(&b, "Type", typ)
	element(&b, "Code", e.QueryCode)
	element(&b, "Message", e.Message)
	b.WriteString("<Detail/></Error>")
	element(&b, "RequestId", reqID)
	b.WriteString("</ErrorResponse>")
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", reqID)
	w.WriteHeader(e.Status)
	_, _ = w.Write(b.Bytes())
}
