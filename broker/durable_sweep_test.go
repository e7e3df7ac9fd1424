package broker_test

// A durable broker whose leases expire by the thousand: the queue settles
// them a chunk per lock hold and commits the journal between chunks (issue
// 15). Helpers are durable_test.go's.

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// TestDurableSweep: 2,000 leases (four chunks and more) expire at once on
// two subscriptions, one on its last attempt. The dead letters come out in
// lease order, at the settle's time, and the others come back in place
// order with their attempt spent; both survive a restart as they were,
// with a journal compacted (the queues frozen) between the chunks too.
func TestDurableSweep(t *testing.T) {
	for _, compact := range []int64{-1, 1} { // never; whenever the journal has doubled
		t.Run(fmt.Sprint("compactMin=", compact), func(t *testing.T) {
			const n = 2000
			d := openDur[string](t, queue.StringCodec(), broker.WithCompactMin(compact))
			dead := d.subscribe("jobs", "dead", broker.WithMaxAttempts(1), broker.WithVisibilityTimeout(time.Minute))
			again := d.subscribe("jobs", "again", broker.WithMaxAttempts(3), broker.WithVisibilityTimeout(time.Minute))
			var want []string
			for i := range n {
				p := fmt.Sprintf("m%04d", i)
				d.publish("jobs", p)
				want = append(want, p)
			}
			for _, s := range []*broker.Subscription[string]{dead, again} {
				require.Len(t, s.TryPoll(n), n)
			}
			d.mock.Add(time.Minute)

			require.Equal(t, want, deadPayloads(d.Broker), "dead letters in lease order")
			letters := deadLettersOf(d.Broker)
			for _, dl := range letters {
				require.Equal(t, queue.ReasonMaxAttempts, dl.Reason)
				require.Equal(t, d.mock.Now().UnixNano(), dl.At)
			}
			require.Equal(t, queue.Stats{Visible: n, Published: n, Delivered: n, OldestVisibleAge: time.Minute}, again.Stats())

			d.restart()
			require.Equal(t, letters, deadLettersOf(d.Broker), "the dead letters after a restart")
			again = d.sub("jobs", "again")
			var got []string
			for _, dl := range again.TryPoll(n + 1) {
				require.Equal(t, 2, dl.Attempt, dl.Payload)
				got = append(got, dl.Payload)
			}
			require.Equal(t, want, got, "redelivered in place order after a restart")
		})
	}
}
