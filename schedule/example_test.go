package schedule_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/schedule"
)

// A nightly job at 03:00 Berlin time, driven over three days of a mock
// clock in one move; each night's slot is published once, with its date.
func Example() {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 3, 27, 12, 0, 0, 0, berlin))

	b, _ := broker.New[string](broker.WithClock(mock))
	defer b.Close()
	_ = b.CreateTopic("reports")
	sub, _ := b.Subscribe("reports", "workers")

	s, _ := schedule.New(schedule.WithClock(mock))
	err := s.Add("nightly-report", schedule.CronIn(berlin, "0 3 * * *"),
		schedule.Publish(b, "reports", func(f schedule.Fire) string {
			return "report for " + f.Slot.AddDate(0, 0, -1).Format(time.DateOnly)
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)

	_ = s.AwaitQuiet(ctx)
	mock.Add(72 * time.Hour)
	_ = s.AwaitQuiet(ctx)

	for _, d := range sub.TryPoll(10) {
		fmt.Println(d.Payload)
		_ = sub.Ack(d.LeaseID)
	}
	st := s.Status()[0]
	fmt.Println("fired:", st.Fired, "next:", st.NextSlot.Format(time.RFC3339))
	// Output:
	// report for 2026-03-27
	// report for 2026-03-28
	// report for 2026-03-29
	// fired: 3 next: 2026-03-31T03:00:00+02:00
}
