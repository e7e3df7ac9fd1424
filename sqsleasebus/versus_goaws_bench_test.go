package sqsleasebus_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app/servertest"
	"github.com/sirupsen/logrus"

	"github.com/leasebus/leasebus/sqsserver"
)

// BenchmarkVersusGoaws is SQS's plainest loop at 16 clients, each its own
// goroutine and connection, against leasebus's server over JSON and over
// the query protocol and against goaws (query, the one it speaks), all in
// this process on loopback, so the load and the servers share the cores:
// SendMessage, then ReceiveMessage of one, then DeleteMessage of what it
// got. The requests are built by hand, the same for both servers (an SDK
// would add its own cost to each), and msgs/s counts deleted messages.
//
// Each runs on an empty queue and on one with a backlog of 10,000: messages
// sent before the timer starts, which the loop keeps at that depth (each
// client sends one for each it deletes). On the empty queue some receives
// find nothing, another client having taken the one message there was; on
// the backlog every receive gets one. goaws keeps a queue's messages in
// one slice and deletes by copying the rest of it down, so its delete
// costs more with depth, where leasebus's does not.
func BenchmarkVersusGoaws(b *testing.B) {
	const clients = 16
	logrus.SetLevel(logrus.WarnLevel)
	for _, backlog := range []int{0, 10000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			for _, p := range []struct {
				name string
				do   call
			}{{"leasebus-json", jsonCall}, {"leasebus-query", queryCall}} {
				b.Run(p.name, func(b *testing.B) {
					srv, err := sqsserver.New()
					if err != nil {
						b.Fatal(err)
					}
					defer srv.Close()
					hs := httptest.NewServer(srv)
					defer hs.Close()
					runVersus(b, clients, backlog, hs.URL, p.do)
				})
			}
			b.Run("goaws-query", func(b *testing.B) {
				srv, err := servertest.New("127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				defer srv.Quit()
				runVersus(b, clients, backlog, srv.URL(), queryCall)
			})
		})
	}
}

// call is one protocol's request: it returns the answer's receipt handles
// (ReceiveMessage) or the queue's URL (CreateQueue).
type call func(c *http.Client, base, action string, params url.Values) []string

var (
	queueURLs = regexp.MustCompile(`<QueueUrl>([^<]*)</QueueUrl>`)
	receipts  = regexp.MustCompile(`<ReceiptHandle>([^<]*)</ReceiptHandle>`)
)

func queryCall(c *http.Client, base, action string, params url.Values) []string {
	form := url.Values{"Action": {action}, "Version": {"2012-11-05"}}
	for k, v := range params {
		form[k] = v
	}
	body := post(c, base, "application/x-www-form-urlencoded", "", []byte(form.Encode()))
	re := receipts
	if action == "CreateQueue" {
		re = queueURLs
	}
	var out []string
	for _, m := range re.FindAllSubmatch(body, -1) {
		var s string
		_ = xml.Unmarshal([]byte("<s>"+string(m[1])+"</s>"), &s) // unescape
		out = append(out, s)
	}
	return out
}

func jsonCall(c *http.Client, base, action string, params url.Values) []string {
	in := map[string]any{}
	for k, v := range params {
		in[k] = v[0]
		if n, err := strconv.Atoi(v[0]); err == nil { // a number in JSON (the loop sends no numeric text)
			in[k] = n
		}
	}
	req, _ := json.Marshal(in)
	body := post(c, base, "application/x-amz-json-1.0", "AmazonSQS."+action, req)
	var out struct {
		QueueUrl string
		Messages []struct{ ReceiptHandle string }
	}
	_ = json.Unmarshal(body, &out)
	if action == "CreateQueue" {
		return []string{out.QueueUrl}
	}
	hs := make([]string, len(out.Messages))
	for i, m := range out.Messages {
		hs[i] = m.ReceiptHandle
	}
	return hs
}

func post(c *http.Client, base, ctype, target string, body []byte) []byte {
	req, _ := http.NewRequest(http.MethodPost, base+"/", bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	if target != "" {
		req.Header.Set("X-Amz-Target", target)
	}
	resp, err := c.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		panic(fmt.Sprintf("%s: %d %s", target, resp.StatusCode, out))
	}
	return out
}

// versusBody is what every message of the loop says.
const versusBody = "a message of some forty bytes, say, here"

func runVersus(b *testing.B, clients, backlog int, base string, do call) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2 * clients
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	name := fmt.Sprintf("versus-%d", time.Now().UnixNano())
	q := do(c, base, "CreateQueue", url.Values{"QueueName": {name}})[0]
	var sent, deleted atomic.Int64
	var fill sync.WaitGroup
	for i := range clients {
		fill.Go(func() { // client i sends every clients-th message of the backlog
			for j := i; j < backlog; j += clients {
				do(c, base, "SendMessage", url.Values{"QueueUrl": {q}, "MessageBody": {versusBody}})
			}
		})
	}
	fill.Wait()
	n := int64(b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for deleted.Load() < n {
				if sent.Add(1) <= n {
					do(c, base, "SendMessage", url.Values{"QueueUrl": {q}, "MessageBody": {versusBody}})
				}
				for _, h := range do(c, base, "ReceiveMessage", url.Values{"QueueUrl": {q}, "MaxNumberOfMessages": {"1"}}) {
					do(c, base, "DeleteMessage", url.Values{"QueueUrl": {q}, "ReceiptHandle": {h}})
					deleted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(0, "ns/op")
}
