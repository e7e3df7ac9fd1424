package sqsleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/schedule"
	"github.com/leasebus/leasebus/sqsleasebus"
	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// TestTwoSchedulersOneFIFOQueue: two schedulers fire the same schedule
// into one FIFO queue, on the server's mock clock; its deduplication keeps
// one message a slot. On a standard queue every fire fails.
func TestTwoSchedulersOneFIFOQueue(t *testing.T) {
	srv := sqstest.Start(t)
	url := srv.CreateQueue(t, "reports.fifo", map[string]string{"FifoQueue": "true"})
	ctx := context.Background()
	pub, err := sqsleasebus.NewPublisher[string](srv.Client, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	job := sqsleasebus.SchedulePublish(pub, func(f schedule.Fire) string { return f.Slot.UTC().Format(time.RFC3339) })
	var reps []*schedule.Scheduler
	for range 2 {
		s, err := schedule.New(schedule.WithClock(srv.Clock))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add("report", schedule.Every(time.Minute), job); err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
		reps = append(reps, s)
	}
	settle := func() {
		t.Helper()
		for _, s := range reps {
			if err := s.AwaitQuiet(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle()
	for range 3 {
		srv.Clock.Add(time.Minute)
		settle()
	}
	for _, s := range reps {
		if st := s.Status()[0]; st.Fired != 3 || st.Failures != 0 {
			t.Fatalf("status %+v: each replica fired each slot", st)
		}
	}
	sub, err := sqsleasebus.Subscribe[string](ctx, srv.Client, url, nil, sqsleasebus.WithClock(srv.Clock))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var got []string
	for len(got) < 3 {
		ds, err := sub.Poll(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			got = append(got, d.Payload)
			if d.Key != "report" {
				t.Fatalf("group %q, want the schedule's name", d.Key)
			}
			if err := sub.Ack(d.LeaseID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != 3 || got[0] >= got[1] || got[1] >= got[2] {
		t.Fatalf("the queue held %v: want three slots, each once, in order", got)
	}
	if st, err := sub.Stats(ctx); err != nil || st.Visible+st.InFlight+st.Delayed != 0 {
		t.Fatalf("after three: %+v, %v; want nothing more", st, err)
	}

	std := srv.CreateQueue(t, "reports", nil)
	stdPub, err := sqsleasebus.NewPublisher[string](srv.Client, std, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = sqsleasebus.SchedulePublish(stdPub, func(schedule.Fire) string { return "x" })(ctx, schedule.Fire{Schedule: "report", DedupID: "sched:report:x"})
	if !errors.Is(err, sqsleasebus.ErrUnsupported) {
		t.Fatalf("on a standard queue: %v, want ErrUnsupported", err)
	}
}
