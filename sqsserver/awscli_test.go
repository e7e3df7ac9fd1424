package sqsserver_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// Debian's aws CLI (2.9, on Debian's botocore: the query protocol for
// SQS and SNS) against the server: a queue, a message there and back, a
// topic fanned out to it, and an error as the CLI reports it.
func TestDebianAWSCLI(t *testing.T) {
	const cli = "/usr/bin/aws"
	if out, err := exec.Command(cli, "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "debian") {
		if os.Getenv("LEASEBUS_PYTHON") == "required" {
			t.Fatalf("no Debian aws CLI at %s, and LEASEBUS_PYTHON=required (install Debian's awscli): %v %s", cli, err, out)
		}
		t.Skip("no Debian aws CLI: install Debian's awscli to run this test")
	}
	srv := sqstest.Start(t)
	aws := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(cli, append([]string{"--endpoint-url", srv.URL, "--output", "json"}, args...)...)
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=x", "AWS_DEFAULT_REGION=us-east-1",
			"AWS_PAGER=", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run := func(v any, args ...string) {
		t.Helper()
		out, err := aws(args...)
		if err != nil {
			t.Fatalf("aws %v: %v\n%s", args, err, out)
		}
		if v != nil {
			if err := json.Unmarshal([]byte(out), v); err != nil {
				t.Fatalf("aws %v: %v in %s", args, err, out)
			}
		}
	}
	var q struct{ QueueUrl string }
	run(&q, "sqs", "create-queue", "--queue-name", "cli")
	run(nil, "sqs", "send-message", "--queue-url", q.QueueUrl, "--message-body", "hi")
	var got struct {
		Messages []struct{ Body, ReceiptHandle string }
	}
	run(&got, "sqs", "receive-message", "--queue-url", q.QueueUrl)
	if len(got.Messages) != 1 || got.Messages[0].Body != "hi" {
		t.Fatalf("received %+v", got)
	}
	run(nil, "sqs", "delete-message", "--queue-url", q.QueueUrl, "--receipt-handle", got.Messages[0].ReceiptHandle)

	var topic struct{ TopicArn string }
	run(&topic, "sns", "create-topic", "--name", "t")
	run(nil, "sns", "subscribe", "--topic-arn", topic.TopicArn, "--protocol", "sqs",
		"--notification-endpoint", "arn:aws:sqs:us-east-1:000000000000:cli", "--attributes", "RawMessageDelivery=true")
	run(nil, "sns", "publish", "--topic-arn", topic.TopicArn, "--message", "hello")
	run(&got, "sqs", "receive-message", "--queue-url", q.QueueUrl)
	if len(got.Messages) != 1 || got.Messages[0].Body != "hello" {
		t.Fatalf("received %+v", got)
	}

	out, err := aws("sqs", "get-queue-url", "--queue-name", "nope")
	if err == nil || !strings.Contains(out, "AWS.SimpleQueueService.NonExistentQueue") {
		t.Fatalf("a missing queue: %v\n%s", err, out)
	}
}
