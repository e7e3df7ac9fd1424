package sqsserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// A queue created under the name of a deleted one whose topic deletion
// did not happen never adopts that topic's messages.
func TestNewQueueDoesNotAdoptALeftoverTopic(t *testing.T) {
	srv, err := New(WithDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	// What a DeleteQueue leaves when the state file was written and the
	// topic's deletion failed: a topic with a message, and no queue.
	if err := srv.b.CreateTopic("jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.b.Subscribe("jobs", subName); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.b.Publish(ctx, "jobs", message{Body: "of the deleted queue"}); err != nil {
		t.Fatal(err)
	}
	rc := &request{s: srv, r: httptest.NewRequest(http.MethodPost, "http://localhost/", nil)}
	if _, err := createQueue(rc, &createQueueInput{QueueName: aws.String("jobs")}); err != nil {
		t.Fatal(err)
	}
	q, err := srv.queue("jobs")
	if err != nil {
		t.Fatal(err)
	}
	if st := q.sub.Stats(); st.Visible != 0 {
		t.Fatalf("the new queue holds %d messages of the deleted one", st.Visible)
	}
}
