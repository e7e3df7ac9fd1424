package core

// Minimal reproductions of the bugs the model found (see model_test.go),
// kept as regression tests: fixed in b4e5c2b.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/lease"

	"github.com/leasebus/leasebus/queue"
)

func newMockQueue(t *testing.T, cfg queue.Config) (*Queue[int], *clock.Mock, *[]Letter[int]) {
	t.Helper()
	mock := clock.NewMock()
	mock.Set(modelEpoch)
	cfg.Clock = mock
	var dead []Letter[int]
	q, err := New(cfg, func(dl Letter[int]) { dead = append(dead, dl) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q, mock, &dead
}

func offerN(t *testing.T, q *Queue[int], payloads ...int) {
	t.Helper()
	for _, p := range payloads {
		if err := q.Offer(context.Background(), &queue.Message[int]{Payload: p}, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func payloadsOf(ds []queue.Delivery[int]) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = d.Payload
	}
	return out
}

// Redrive: "A dead letter of this queue keeps its place (priority and
// publish order)". An overflow dead letter used to be recorded with place
// 0, so once redriven it jumped ahead of every message published before it.
func TestRedrivenOverflowDeadLetterKeepsItsPlace(t *testing.T) {
	q, _, dead := newMockQueue(t, queue.Config{MaxQueue: 3}) // OverflowDeadLetter
	offerN(t, q, 1, 2, 3, 4, 5)                              // 4 and 5 overflow into the dead letters
	first := q.TryPoll(2)
	if err := q.AckBatch([]lease.ID{first[0].LeaseID, first[1].LeaseID}); err != nil { // room for two
		t.Fatal(err)
	}
	if len(*dead) != 2 {
		t.Fatalf("dead letters %v, want msgs 4 and 5 (overflow)", *dead)
	}
	for _, dl := range slices.Backward(*dead) { // redriven newest first: places, not redrive order, decide
		if err := q.Redrive(dl); err != nil {
			t.Fatal(err)
		}
	}
	if got := payloadsOf(q.TryPoll(10)); !slices.Equal(got, []int{3, 4, 5}) {
		t.Errorf("MaxQueue 3: offer 1..5 (4, 5 overflow), ack 1 and 2, redrive 5 then 4: delivered %v, want [3 4 5]", got)
	}
}

// Redrive: "one from elsewhere queues as if just published", and
// Config.TTL is the default TTL "from its publish (or redrive)". A foreign
// dead letter redriven into a queue with a TTL used to get none.
func TestForeignRedriveGetsConfigTTL(t *testing.T) {
	q, mock, dead := newMockQueue(t, queue.Config{TTL: time.Second})
	if err := q.Redrive(Letter[int]{DeadLetter: queue.DeadLetter[int]{Subscription: "elsewhere", Message: queue.Message[int]{Payload: 7}}}); err != nil {
		t.Fatal(err)
	}
	mock.Add(time.Second - 1)
	if st := q.Stats(); st.Visible != 1 {
		t.Fatalf("1ns before the TTL: %+v", st)
	}
	mock.Add(1)
	if st := q.Stats(); st.Visible != 0 || len(*dead) != 1 || (*dead)[0].Reason != queue.ReasonExpired {
		t.Errorf("Config.TTL 1s, foreign dead letter redriven, clock +1s: %+v, dead letters %v; want it dead-lettered (ReasonExpired)", st, *dead)
	}
}
