package sqsserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// wire is one protocol's way of calling the server without an SDK, so
// that the two protocols are measured on the same client code.
type wire interface {
	call(c *http.Client, base, action string, params map[string]any) []byte
	handles(body []byte) []string // the receipt handles of a ReceiveMessage answer
}

type jsonWire struct{}

func (jsonWire) call(c *http.Client, base, action string, params map[string]any) []byte {
	body, _ := json.Marshal(params)
	req, _ := http.NewRequest(http.MethodPost, base+"/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	return do(c, req)
}

func (jsonWire) handles(body []byte) []string {
	var out struct {
		Messages []struct{ ReceiptHandle string }
	}
	_ = json.Unmarshal(body, &out)
	hs := make([]string, len(out.Messages))
	for i, m := range out.Messages {
		hs[i] = m.ReceiptHandle
	}
	return hs
}

type queryWire struct{}

// call flattens params as the query protocol does: Entries become
// <Action>RequestEntry.N.<field>.
func (queryWire) call(c *http.Client, base, action string, params map[string]any) []byte {
	form := url.Values{"Action": {action}}
	for k, v := range params {
		switch x := v.(type) {
		case []map[string]string:
			for i, e := range x {
				for f, fv := range e {
					form.Set(fmt.Sprintf("%sRequestEntry.%d.%s", action, i+1, f), fv)
				}
			}
		default:
			form.Set(k, fmt.Sprint(x))
		}
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/", bytes.NewBufferString(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(c, req)
}

func (queryWire) handles(body []byte) []string {
	var out struct {
		Messages []struct{ ReceiptHandle string } `xml:"ReceiveMessageResult>Message"`
	}
	_ = xml.Unmarshal(body, &out)
	hs := make([]string, len(out.Messages))
	for i, m := range out.Messages {
		hs[i] = m.ReceiptHandle
	}
	return hs
}

func do(c *http.Client, req *http.Request) []byte {
	resp, err := c.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		panic(fmt.Sprintf("%d %s", resp.StatusCode, b))
	}
	return b
}

// BenchmarkProtocols is the send, receive and delete loop of
// BenchmarkSQSRoundTrip by hand-built requests, JSON and query side by
// side, so that only the protocol differs: one op is a batch of 10.
func BenchmarkProtocols(b *testing.B) {
	for _, p := range []struct {
		name string
		w    wire
	}{{"json", jsonWire{}}, {"query", queryWire{}}} {
		b.Run(p.name, func(b *testing.B) {
			srv, err := sqsserver.New()
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			hs := httptest.NewServer(srv)
			defer hs.Close()
			c := hs.Client()
			p.w.call(c, hs.URL, "CreateQueue", map[string]any{"QueueName": "bench"})
			q := hs.URL + "/000000000000/bench"
			entries := make([]map[string]string, 10)
			for i := range entries {
				entries[i] = map[string]string{"Id": "m" + strconv.Itoa(i), "MessageBody": sqsserver.BenchBody}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p.w.call(c, hs.URL, "SendMessageBatch", map[string]any{"QueueUrl": q, "Entries": entries})
				for got := 0; got < 10; {
					hsList := p.w.handles(p.w.call(c, hs.URL, "ReceiveMessage", map[string]any{"QueueUrl": q, "MaxNumberOfMessages": 10}))
					if len(hsList) == 0 {
						continue
					}
					del := make([]map[string]string, len(hsList))
					for i, h := range hsList {
						del[i] = map[string]string{"Id": "d" + strconv.Itoa(i), "ReceiptHandle": h}
					}
					p.w.call(c, hs.URL, "DeleteMessageBatch", map[string]any{"QueueUrl": q, "Entries": del})
					got += len(hsList)
				}
			}
			b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}

// BenchmarkLongPollWake is the time from a send to the return of the
// long poll it wakes, JSON and query: one op is one message.
func BenchmarkLongPollWake(b *testing.B) {
	for _, p := range []struct {
		name string
		w    wire
	}{{"json", jsonWire{}}, {"query", queryWire{}}} {
		b.Run(p.name, func(b *testing.B) {
			srv, err := sqsserver.New()
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			hs := httptest.NewServer(srv)
			defer hs.Close()
			c := hs.Client()
			p.w.call(c, hs.URL, "CreateQueue", map[string]any{"QueueName": "wake"})
			q := hs.URL + "/000000000000/wake"
			ctx := context.Background()
			var total time.Duration
			b.ResetTimer()
			for range b.N {
				got := make(chan time.Time, 1)
				go func() {
					hsList := p.w.handles(p.w.call(c, hs.URL, "ReceiveMessage", map[string]any{"QueueUrl": q, "WaitTimeSeconds": 20}))
					at := time.Now()
					p.w.call(c, hs.URL, "DeleteMessageBatch", map[string]any{"QueueUrl": q,
						"Entries": []map[string]string{{"Id": "d", "ReceiptHandle": hsList[0]}}})
					got <- at
				}()
				if err := srv.AwaitParked(ctx, "wake", 1); err != nil {
					b.Fatal(err)
				}
				sent := time.Now()
				p.w.call(c, hs.URL, "SendMessage", map[string]any{"QueueUrl": q, "MessageBody": "wake"})
				total += (<-got).Sub(sent)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/wake")
		})
	}
}

// BenchmarkSNSPublishToQueue publishes through the SNS SDK client to a
// topic with one raw subscription, and drains the queue by batches: one
// op is one published message, delivered and deleted.
func BenchmarkSNSPublishToQueue(b *testing.B) {
	srv := sqstest.Start(b)
	ctx := context.Background()
	topic, err := srv.SNS.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("bench")})
	if err != nil {
		b.Fatal(err)
	}
	q := srv.CreateQueue(b, "bench", nil)
	if _, err := srv.SNS.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("sqs"),
		Endpoint: aws.String(srv.QueueARN(b, q)), Attributes: map[string]string{"RawMessageDelivery": "true"}}); err != nil {
		b.Fatal(err)
	}
	c := srv.HTTP.Client()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := srv.SNS.Publish(ctx, &sns.PublishInput{TopicArn: topic.TopicArn, Message: aws.String(sqsserver.BenchBody)}); err != nil {
			b.Fatal(err)
		}
		if i%10 == 9 || i == b.N-1 {
			for {
				hsList := jsonWire{}.handles(jsonWire{}.call(c, srv.URL, "ReceiveMessage", map[string]any{"QueueUrl": q, "MaxNumberOfMessages": 10}))
				if len(hsList) == 0 {
					break
				}
				del := make([]map[string]string, len(hsList))
				for j, h := range hsList {
					del[j] = map[string]string{"Id": "d" + strconv.Itoa(j), "ReceiptHandle": h}
				}
				jsonWire{}.call(c, srv.URL, "DeleteMessageBatch", map[string]any{"QueueUrl": q, "Entries": del})
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}

// BenchmarkServeProtocols is SendMessage, ReceiveMessage of one and
// DeleteMessage served in process (ServeHTTP, no network, no SDK), over
// JSON and over the query protocol, the requests written out beforehand
// or by a concatenation alike, so that the server's own cost of each
// protocol is what differs: one op is one message's three requests.
func BenchmarkServeProtocols(b *testing.B) {
	for _, p := range []struct {
		name                  string
		ctype, target         string
		send, receive, delete func(q, handle string) string
		handle                *regexp.Regexp
	}{{
		name: "json", ctype: "application/x-amz-json-1.0", target: "AmazonSQS.",
		send: func(q, _ string) string {
			return `{"QueueUrl":"` + q + `","MessageBody":"` + sqsserver.BenchBody + `"}`
		},
		receive: func(q, _ string) string { return `{"QueueUrl":"` + q + `","MaxNumberOfMessages":1}` },
		delete:  func(q, h string) string { return `{"QueueUrl":"` + q + `","ReceiptHandle":"` + h + `"}` },
		handle:  regexp.MustCompile(`"ReceiptHandle":"([^"]*)"`),
	}, {
		name: "query", ctype: "application/x-www-form-urlencoded",
		send: func(q, _ string) string {
			return "Action=SendMessage&QueueUrl=" + url.QueryEscape(q) + "&MessageBody=" + url.QueryEscape(sqsserver.BenchBody)
		},
		receive: func(q, _ string) string {
			return "Action=ReceiveMessage&QueueUrl=" + url.QueryEscape(q) + "&MaxNumberOfMessages=1"
		},
		delete: func(q, h string) string {
			return "Action=DeleteMessage&QueueUrl=" + url.QueryEscape(q) + "&ReceiptHandle=" + url.QueryEscape(h)
		},
		handle: regexp.MustCompile(`<ReceiptHandle>([^<]*)</ReceiptHandle>`),
	}} {
		b.Run(p.name, func(b *testing.B) {
			srv, err := sqsserver.New()
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			call := func(ctype, target, body string) []byte {
				req := httptest.NewRequest(http.MethodPost, "http://sqs.local/", strings.NewReader(body))
				req.Header.Set("Content-Type", ctype)
				if target != "" {
					req.Header.Set("X-Amz-Target", target)
				}
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", target+body, w.Code, w.Body)
				}
				return w.Body.Bytes()
			}
			var created struct{ QueueUrl string }
			if err := json.Unmarshal(call("application/x-amz-json-1.0", "AmazonSQS.CreateQueue", `{"QueueName":"bench"}`), &created); err != nil {
				b.Fatal(err)
			}
			q := created.QueueUrl
			serve := func(action, body string) []byte {
				target := ""
				if p.target != "" {
					target = p.target + action
				}
				return call(p.ctype, target, body)
			}
			send, receive := p.send(q, ""), p.receive(q, "")
			b.ReportAllocs()
			for b.Loop() {
				serve("SendMessage", send)
				m := p.handle.FindSubmatch(serve("ReceiveMessage", receive))
				if m == nil {
					b.Fatal("nothing received")
				}
				h := string(m[1])
				if p.name == "query" {
					h = html.UnescapeString(h)
				}
				serve("DeleteMessage", p.delete(q, h))
			}
		})
	}
}
