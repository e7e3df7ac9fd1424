package broker_test

// What can come between a group's offers and its append: a consumer's ack
// or reject, a compaction, a purge. The second subscription's filter runs
// in the publisher after the first subscription's offer, so it schedules
// each of them there; the state after a restart must be the state before.

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

func TestDurableGroupInterleavings(t *testing.T) {
	cases := []struct {
		name    string
		between func(t *testing.T, d *durBroker[string], first *broker.Subscription[string])
		inFirst []string // what "first" holds afterwards, before and after a restart
		dead    []string
	}{
		{"ack", func(t *testing.T, _ *durBroker[string], first *broker.Subscription[string]) {
			ds := first.TryPoll(1)
			require.Len(t, ds, 1)
			require.NoError(t, first.Ack(ds[0].LeaseID))
		}, nil, nil},
		{"reject", func(t *testing.T, _ *durBroker[string], first *broker.Subscription[string]) {
			ds := first.TryPoll(1)
			require.Len(t, ds, 1)
			require.NoError(t, first.Reject(ds[0].LeaseID, errors.New("no")))
		}, nil, []string{"m"}},
		{"poll", func(t *testing.T, _ *durBroker[string], first *broker.Subscription[string]) {
			require.Len(t, first.TryPoll(1), 1) // in flight at the restart: back, its attempt spent
		}, []string{"m/2"}, nil},
		{"compaction", func(t *testing.T, d *durBroker[string], _ *broker.Subscription[string]) {
			require.NoError(t, d.Compact())
		}, []string{"m/1"}, nil},
		{"compaction, then ack", func(t *testing.T, d *durBroker[string], first *broker.Subscription[string]) {
			require.NoError(t, d.Compact())
			ds := first.TryPoll(1)
			require.Len(t, ds, 1)
			require.NoError(t, first.Ack(ds[0].LeaseID))
		}, nil, nil},
		{"purge", func(t *testing.T, _ *durBroker[string], first *broker.Subscription[string]) {
			n, err := first.Purge()
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := openDur[string](t, queue.StringCodec(), broker.WithCompactMin(-1))
			first := d.subscribe("t", "first")
			once := false
			filter := broker.WithFilter(func(m queue.Message[string]) bool {
				if !once {
					once = true
					c.between(t, d, first)
				}
				return true
			})
			second := d.subscribe("t", "second", filter)
			orig, err := d.Publish(context.Background(), "t", "m", broker.WithDedupID("id"))
			require.NoError(t, err)
			require.True(t, once)
			check := func(when string) {
				require.Equal(t, c.inFirst, peekAttempts(t, first), "%s: first", when)
				require.Equal(t, []string{"m/1"}, peekAttempts(t, second), "%s: second", when)
				require.Equal(t, c.dead, deadPayloadsOf(d.Broker), "%s: dead letters", when)
			}
			if c.name != "poll" {
				check("live")
			}
			d.restart()
			first = d.subscribe("t", "first")
			second = d.subscribe("t", "second", broker.WithFilter(func(queue.Message[string]) bool { return true }))
			check("after a restart")
			m, err := d.Publish(context.Background(), "t", "again", broker.WithDedupID("id"))
			require.NoError(t, err)
			require.Equal(t, orig.ID, m.ID, "the dedup ID is remembered")
		})
	}
}

// peekAttempts returns what s holds, drained, as payload/attempt, and
// releases each lease (spending no attempt).
func peekAttempts(t *testing.T, s *broker.Subscription[string]) []string {
	t.Helper()
	var out []string
	var all []queue.Delivery[string]
	for ds := s.TryPoll(100); len(ds) > 0; ds = s.TryPoll(100) {
		all = append(all, ds...)
	}
	for _, d := range all {
		out = append(out, d.Payload+"/"+strconv.Itoa(d.Attempt))
		require.NoError(t, s.Release(d.LeaseID))
	}
	return out
}
