package sqsleasebus_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/servertest"
	"github.com/benbjohnson/clock"
	"github.com/sirupsen/logrus"

	"github.com/leasebus/leasebus/poller/sourcetest"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// TestConformanceGoaws runs the suite against goaws, an SQS server
// written apart from leasebus (github.com/Admiral-Piett/goaws), started in
// this process on loopback, on real time, so that the suite does not
// only agree with leasebus's own server. goaws speaks SQS's query
// protocol and the SDK the JSON one: queryBridge translates.
func TestConformanceGoaws(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: the suite waits out visibility timeouts and delays")
	}
	srv, err := servertest.New("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Quit() })
	// goaws's own main runs its periodic tasks (what makes a message
	// whose visibility timeout passed visible again); servertest does not.
	quit := make(chan struct{})
	go gosqs.PeriodicTasks(100*time.Millisecond, quit)
	t.Cleanup(func() { close(quit) })
	logrus.SetLevel(logrus.WarnLevel)
	client := sqstest.NewClient(srv.URL(), &http.Client{Transport: queryBridge{http.DefaultTransport}})
	h := &sqsHarness{client: client, clk: clock.New(), caps: sourcetest.Capabilities{
		Unit:            time.Second,
		StaleAck:        true,
		ArbitraryExtend: true,
		LateAck:         true,
		Differs:         goawsDiffers,
	}, topics: map[string][]string{}, subs: map[sourcetest.Subscription]string{}}
	sourcetest.Run(t, h)
}

// goawsDiffers are the cases goaws v0.4.5 fails, and why: what differs
// from SQS, which leasebus's server and the package follow.
var goawsDiffers = func() map[string]string {
	const attempts = "goaws reports ApproximateReceiveCount 1 on every receive (it never counts one), so a message received again says attempt 1"
	m := map[string]string{}
	for _, c := range []string{
		"AttemptCounts", "NackDelay", "FailBackoff", "RedeliveryAfterVisibilityTimeout", "StaleAck",
		"SettleAfterDeadline", "MaxAttemptsAfterFail", "DeliveryMaxAttempts", "FanOutIsolation", "PoolSlowDown", "PoolBatchOutcomes",
		"PoolCancel",
	} {
		m[c] = attempts
	}
	m["Stats"] = "goaws's ApproximateNumberOfMessages counts every message, leased or not (3 with one leased), " +
		"and its ApproximateNumberOfMessagesNotVisible read 0"
	// Seen in a CI run: passing or not depends on whether the periodic
	// task ran between the deadline and the Ack, so it cannot run here.
	m["Redrive"] = "goaws ignores ReceiveMessage's VisibilityTimeout and hides a received message for its " +
		"queue's own (gosqs.go:473); the suite's dead-letter queue has none, so the periodic task can clear " +
		"the receipt handle of a dead letter Redrive has read before Redrive deletes it (seen in a CI run)"
	// Seen in a CI run: 2 dead letters, both the one message.
	m["MaxAttemptsAfterExpiry"] = "goaws ignores ReceiveMessage's VisibilityTimeout (as for Redrive): " +
		"DeadLetters peeks with receives that hide each letter for a while, but the suite's dead-letter queue " +
		"hides for 0 s, so when goaws's periodic task runs between two of those receives the same letter is " +
		"received, and listed, twice"
	m["LateAck"] = "goaws's periodic task (every 100 ms here) makes a message whose visibility timeout passed " +
		"visible again and clears its receipt handle (gosqs.go:72), so an Ack after the deadline fails " +
		"once that task has run; SQS, and leasebus's server, keep the handle until the message is received again"
	return m
}()
