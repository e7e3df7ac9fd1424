package sqsleasebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// A pool's receive asks for the visibility timeout, not for the pool's
// hour of extension: a pool whose process dies lets its messages go
// after one visibility timeout, and the pool extends what it keeps.
func TestPollForLeasesForTheVisibilityTimeout(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "pool", nil)
	ctx := context.Background()
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock), sqsleasebus.WithVisibilityTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, topicOf(url), "m"); err != nil {
		t.Fatal(err)
	}
	before := srv.Clock.Now()
	ds, held, err := sub.PollFor(ctx, backend.PollRequest[string]{Max: 1, Hold: time.Hour})
	if err != nil || len(ds) != 1 {
		t.Fatalf("PollFor: %v, %v", ds, err)
	}
	if held || !ds[0].Deadline.Equal(before.Add(30*time.Second)) {
		t.Fatalf("held %v, deadline %v after the receive, want the visibility timeout, 30s", held, ds[0].Deadline.Sub(before))
	}
}
