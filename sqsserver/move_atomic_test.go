package sqsserver_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// serveDir runs a durable server on dir until the returned stop.
func serveDir(t *testing.T, dir string) (*sqs.Client, func()) {
	t.Helper()
	srv, err := sqsserver.New(sqsserver.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	return sqstest.NewClient(hs.URL, nil), func() {
		hs.Close()
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// bodiesIn receives everything in q, for an hour each, and returns the
// bodies.
func bodiesIn(t *testing.T, c *sqs.Client, q string) []string {
	t.Helper()
	var out []string
	for {
		r, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q, MaxNumberOfMessages: 10, VisibilityTimeout: 3600})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Messages) == 0 {
			return out
		}
		for _, m := range r.Messages {
			out = append(out, aws.ToString(m.Body))
		}
	}
}

// A move to the dead-letter queue used to be two journal commits: the
// publish there, then the delete here, and a crash between them left the
// message in both queues. Cut at every byte of what the move wrote, the
// journal has the message in one queue or the other.
func TestDeadLetterMoveIsOneCommit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, stop := serveDir(t, dir)
	src, _, _, err := killQueues(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	must[*sqs.SendMessageOutput](t)(c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &src, MessageBody: aws.String("poison")}))
	// Its one receive allowed (maxReceiveCount 1), visible again at once.
	r := must[*sqs.ReceiveMessageOutput](t)(c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &src, VisibilityTimeout: 0}))
	if len(r.Messages) != 1 {
		t.Fatalf("received %d", len(r.Messages))
	}
	stop()
	seg := onlySegment(t, dir)
	before := fileSize(t, seg)

	c, stop = serveDir(t, dir)
	if r := must[*sqs.ReceiveMessageOutput](t)(c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &src, VisibilityTimeout: 0})); len(r.Messages) != 0 {
		t.Fatalf("its second receive got it: %d", len(r.Messages))
	}
	stop()
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) <= before {
		t.Fatal("the move wrote nothing")
	}
	for cut := before; cut <= int64(len(data)); cut++ {
		cp := copyDir(t, dir)
		if err := os.WriteFile(filepath.Join(cp, "journal", filepath.Base(seg)), data[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		c, stop := serveDir(t, cp)
		src, dlq, _, err := killQueues(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		must[*sqs.SetQueueAttributesOutput](t)(c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: &src, Attributes: map[string]string{"RedrivePolicy": ""}}))
		in, out := bodiesIn(t, c, src), bodiesIn(t, c, dlq)
		stop()
		if len(in)+len(out) != 1 {
			t.Fatalf("cut at %d of %d: the source queue holds %q, the dead-letter queue %q: want it in one", cut, len(data), in, out)
		}
		if cut == int64(len(data)) && len(out) != 1 {
			t.Fatalf("the whole journal: the dead-letter queue holds %q", out)
		}
	}
}

func onlySegment(t *testing.T, dir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "journal", "seg-*.log"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	return segs[0]
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
