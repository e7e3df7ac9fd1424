// Package sqsserver serves the Amazon SQS JSON and query protocols over a
// leasebus broker, on an injected clock, so that a test of an SQS consumer moves time
// forward with a call instead of sleeping through visibility timeouts,
// delays and long polls.
//
// A Server is an http.Handler. Any SQS client can use it: those of the
// JSON protocol (application/x-amz-json-1.0, X-Amz-Target:
// AmazonSQS.<Action>: the AWS SDK for Go v2, current boto3, the
// JavaScript SDK v3) and those of the older query protocol (form-encoded
// Action=<Action>, XML answers: Debian's boto3 1.26, kombu, the aws CLI
// before 2.13). Both run one handler per action, with the same errors.
// The same port serves SNS (its query protocol): topics whose subscriptions
// deliver to this server's queues, with AWS's envelope or raw, filter
// policies and FIFO; the README's SNS section says what differs from AWS. Requests are
// signed with SigV4 by the clients; the server accepts any credentials
// unless WithAccessKeys names some. Package sqstest starts one on httptest
// with a mock clock and a configured *sqs.Client; the leasebus-sqs command
// serves one on a port for other languages' test suites.
//
// # Mapping
//
// Each queue is a leasebus topic of the same name with one subscription,
// subscribed with queue.UnlimitedAttempts: the server applies the
// queue's RedrivePolicy itself, as SQS does, moving a message to the
// dead-letter queue (an ordinary queue) on the receive that would exceed
// maxReceiveCount. A receive is PollWithVisibility with the queue's (or the
// receive's) VisibilityTimeout; ChangeMessageVisibility to 0 is Nack(id, 0)
// (the receive still counts), to more is Extend; DeleteMessage is Ack, and
// a handle of an earlier receive or of a deleted message succeeds without
// effect. As in SQS, the handle of the latest receive deletes its message
// after a visibility change to 0 too, until the message is received again
// (the server remembers the reset and drops the message when it next
// takes it from the broker); on a FIFO queue a handle expires with its
// visibility, and a delete with it then fails. FIFO queues use the MessageGroupId as the ordering key and the
// deduplication ID (or the body's SHA-256) as the broker's dedup ID, in
// leasebus's 5-minute window. The README has the whole table, with every
// place where the behaviour knowingly differs from AWS.
//
// # Receipt handles
//
// A receipt handle names the queue's incarnation, the lease and the time
// of the receive, authenticated by an HMAC-SHA256 with a per-server key
// (kept in a durable server's directory): a handle that was never issued,
// forged, or of a queue since deleted and created again is
// ReceiptHandleIsInvalid.
//
// # Time
//
// Every time the server reads and every timer it arms goes through the
// clock of WithClock. Long polls wait on it with package backend's
// timers, never a mock's channel timers, and end as soon as a message is
// visible, when the wait is over on that clock, or when the client goes
// away. Server.AwaitParked (and GET /leasebus/parked) waits until n
// receives are asleep on the clock, so a test knows whom its next move of
// the clock, or its next send, wakes. On a *clock.Mock the control
// endpoint moves time:
//
//	GET  /leasebus/clock                     {"now":"2026-01-01T00:00:00Z","mock":true}
//	POST /leasebus/clock?advance=30s         moves the mock forward, answers the new time
//	POST /leasebus/clock?set=<RFC 3339>      sets it (never backwards)
//	GET  /leasebus/parked?queue=Q&n=1        returns once 1 receive on Q is long-polling
//
// On the real clock, moving it is 409 Conflict.
//
// # Durability
//
// In memory by default. WithDir keeps the messages in a leasebus journal
// (broker.Open with queue.JSONCodec) and the queues, attributes, tags and
// the receipt-handle key in a JSON file written atomically beside it; a
// server opened again has them all back, messages in flight visible again
// with their receive counted.
package sqsserver
