package sqsserver_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/leasebus/leasebus/sqsserver"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// A Celery worker on kombu's SQS transport (Debian's python3-celery,
// python3-kombu and python3-pycurl: requests built by hand in the query
// protocol, long polls, deletes) runs the tasks sent to the server and
// leaves the queue empty. It runs on the real clock: kombu's polling is
// its own.
func TestCeleryWorker(t *testing.T) {
	py := python(t, "celery, kombu, pycurl")
	srv, err := sqsserver.New()
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	results := filepath.Join(t.TempDir(), "results.txt")
	cmd := exec.Command(py, "testdata/celery_run.py")
	cmd.Env = append(os.Environ(), "LEASEBUS_SQS="+hs.URL, "LEASEBUS_RESULTS="+results)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("celery: %v\n%s", err, out)
	}
	c := sqstest.NewClient(hs.URL, hs.Client())
	ctx := context.Background()
	q, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("jobs")})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
		AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"}})
	if err != nil {
		t.Fatal(err)
	}
	if attrs.Attributes["ApproximateNumberOfMessages"] != "0" || attrs.Attributes["ApproximateNumberOfMessagesNotVisible"] != "0" {
		t.Fatalf("the worker left %v", attrs.Attributes)
	}
}
