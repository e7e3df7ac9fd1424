package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/queue"
)

// inboxQueue returns a queue whose inbox has n slots.
func inboxQueue(t *testing.T, cfg queue.Config, n int) *Queue[int] {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = clock.NewMock()
	}
	q, err := New[int](cfg, nil)
	require.NoError(t, err)
	q.in = newInbox(q, n)
	t.Cleanup(func() { q.Close() })
	return q
}

func plain(q *Queue[int], i int) *queue.Message[int] {
	return &queue.Message[int]{Payload: i, PublishedAt: q.clock.Now()}
}

// TestInboxRingWrapsAround drives the ring alone through three laps: a
// full ring refuses a push until a drain frees its slots, and a drain
// hands the messages over in push order. A push that overwrote a slot not
// yet drained, or a drain that did not hand its slots back, fails here
// rather than hanging a drain.
func TestInboxRingWrapsAround(t *testing.T) {
	q := inboxQueue(t, queue.Config{}, 4)
	b := q.in
	next := 0
	for lap := range 3 {
		for range 4 {
			require.True(t, b.push(plain(q, next)), "lap %d: push %d into a ring with room", lap, next)
			next++
		}
		if b.push(plain(q, next)) {
			q.in = newInbox(q, 4) // the ring is broken: Close must not drain it
			t.Fatalf("lap %d: a full ring took a fifth message", lap)
		}
		q.mu.Lock()
		q.drainLocked()
		q.mu.Unlock()
		assert.False(t, b.claimed(), "lap %d: drained", lap)
	}
	ds := q.TryPoll(100)
	require.Len(t, ds, 12)
	for i, d := range ds {
		assert.Equal(t, i, d.Message.Payload, "push order")
	}
}

// TestInboxKeepsTheBound offers 12 messages to a queue of 5 with an inbox
// of 2, with a Stats (which drains the inbox) after every subset of them:
// in every one of the 4,096 orders exactly the first 5 are taken and the
// other 7 refused, as without an inbox.
func TestInboxKeepsTheBound(t *testing.T) {
	const limit = 5
	offers := testkit.Scale(12, 9)
	for reads := range 1 << offers {
		q := inboxQueue(t, queue.Config{MaxQueue: limit, Overflow: queue.OverflowReject}, 2)
		var taken []int
		for i := range offers {
			err := q.Offer(context.Background(), plain(q, i), 0)
			if err == nil {
				taken = append(taken, i)
			} else {
				require.ErrorIs(t, err, queue.ErrQueueFull, "reads %b, offer %d", reads, i)
			}
			if reads&(1<<i) != 0 {
				require.LessOrEqual(t, held(q.Stats()), limit, "reads %b, after offer %d", reads, i)
			}
		}
		require.Equal(t, []int{0, 1, 2, 3, 4}, taken, "reads %b", reads)
		ds := q.TryPoll(offers)
		require.Len(t, ds, limit)
		for i, d := range ds {
			assert.Equal(t, i, d.Message.Payload, "reads %b: publish order", reads)
		}
		q.Close()
	}
}

// TestInboxThawsWithRoom: an inbox frozen near the bound opens again once
// acks leave room for two full ones, and plain Offers take it again.
func TestInboxThawsWithRoom(t *testing.T) {
	q := inboxQueue(t, queue.Config{MaxQueue: 10}, 2)
	ctx := context.Background()
	for i := range 10 {
		require.NoError(t, q.Offer(ctx, plain(q, i), 0))
	}
	q.mu.Lock()
	assert.True(t, q.in.frozen, "frozen with 10 of 10 held")
	q.mu.Unlock()
	ds := q.TryPoll(7)
	for _, d := range ds {
		require.NoError(t, q.Ack(d.LeaseID))
	}
	q.mu.Lock()
	assert.False(t, q.in.frozen, "open with 3 of 10 held: room for two inboxes of 2")
	q.mu.Unlock()
	require.NoError(t, q.Offer(ctx, plain(q, 10), 0))
	assert.True(t, q.in.claimed(), "a plain Offer takes the open inbox")
	assert.Equal(t, 4, held(q.Stats()))
}

// TestInboxNotForTheRest: a keyed, delayed or TTL'd message, a queue with
// a TTL for every message, a durable queue and a closed one all take the
// lock; messages keep their publish order across both ways.
func TestInboxNotForTheRest(t *testing.T) {
	ctx := context.Background()
	q := inboxQueue(t, queue.Config{}, 4)
	require.NoError(t, q.Offer(ctx, plain(q, 0), 0))
	require.True(t, q.in.claimed())
	keyed := plain(q, 1)
	keyed.Key = "k"
	require.NoError(t, q.Offer(ctx, keyed, 0))
	require.NoError(t, q.Offer(ctx, plain(q, 2), time.Second))
	require.NoError(t, q.Offer(ctx, plain(q, 3), 0, WithTTL(time.Hour)))
	require.NoError(t, q.Offer(ctx, plain(q, 4), 0))
	ds := q.TryPoll(10)
	var got []int
	for _, d := range ds {
		got = append(got, d.Message.Payload)
	}
	assert.Equal(t, []int{0, 1, 3, 4}, got, "publish order, the delayed one later")

	withTTL := inboxQueue(t, queue.Config{TTL: time.Hour}, 4)
	require.NoError(t, withTTL.Offer(ctx, plain(withTTL, 0), 0))
	assert.False(t, withTTL.in.claimed(), "a queue TTL: every message takes the lock")

	rec, err := NewRecorded[int](queue.Config{Clock: clock.NewMock()}, nil, nopRecorder[int]{})
	require.NoError(t, err)
	defer rec.Close()
	require.NoError(t, rec.Offer(ctx, plain(rec, 0), 0))
	assert.False(t, rec.in.claimed(), "durable: every Offer is recorded under the lock")

	require.NoError(t, q.Close())
	assert.ErrorIs(t, q.Offer(ctx, plain(q, 5), 0), queue.ErrClosed)
}

type nopRecorder[T any] struct{}

func (nopRecorder[T]) Offered(Entry[T], any)                        {}
func (nopRecorder[T]) Delivered([]queue.Delivery[T])                {}
func (nopRecorder[T]) Retried(*queue.Message[T], time.Time, string) {}
func (nopRecorder[T]) Released(*queue.Message[T])                   {}
func (nopRecorder[T]) Removed(*queue.Message[T], any)               {}
func (nopRecorder[T]) DeadLettered(Letter[T])                       {}
func (nopRecorder[T]) Purged()                                      {}
func (nopRecorder[T]) Paused(bool)                                  {}
func (nopRecorder[T]) Commit() error                                { return nil }

// held is how many messages a Stats says the queue holds.
func held(s queue.Stats) int { return s.Visible + s.Delayed + s.InFlight + s.HeldBack }

// TestInboxConcurrent: publishers on the inbox and consumers that park
// when it is empty; every message is delivered once (no wake-up lost), an
// AwaitIdle after the last Offer sees them all, and with OverflowReject
// the bound holds: taken plus refused is every Offer, and the queue never
// holds more than its bound. Run it with -race.
func TestInboxConcurrent(t *testing.T) {
	const pubs, cons, per, limit = 4, 4, 2000, 1000
	q := inboxQueue(t, queue.Config{Clock: clock.New(), MaxQueue: limit, Overflow: queue.OverflowReject}, 8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var taken, refused, got atomic.Int64
	seen := make([]atomic.Int32, pubs*per)
	var pg, cg sync.WaitGroup
	for p := range pubs {
		pg.Go(func() {
			for i := range per {
				switch err := q.Offer(ctx, plain(q, p*per+i), 0); {
				case err == nil:
					taken.Add(1)
				case errors.Is(err, queue.ErrQueueFull):
					refused.Add(1)
				default:
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	for range cons {
		cg.Go(func() {
			for {
				ds, err := q.Poll(ctx, 3)
				if err != nil {
					select {
					case <-done:
					default:
						t.Error(err)
					}
					return
				}
				for _, d := range ds {
					seen[d.Message.Payload].Add(1)
					got.Add(1)
					if err := q.Ack(d.LeaseID); err != nil {
						t.Error(err)
					}
				}
				if s := q.Stats(); held(s) > limit {
					t.Errorf("holds %d, bound %d", held(s), limit)
				}
			}
		})
	}
	pg.Wait()
	require.NoError(t, q.AwaitIdle(ctx))
	assert.Equal(t, taken.Load(), got.Load(), "every message taken is delivered before the queue is idle")
	close(done)
	cancel()
	cg.Wait()
	assert.Equal(t, int64(pubs*per), taken.Load()+refused.Load())
	for i := range seen {
		if n := seen[i].Load(); n > 1 {
			t.Fatalf("message %d delivered %d times", i, n)
		}
	}
}

// TestInboxWakesAParkingPoll: a Poll on its way to park and a plain Offer
// race, a few thousand times, the Offer at a spread of moments: the Poll
// always returns the message. (Without the Poll's last look at the inbox
// after it says it waits, an Offer between its first look and that flag
// is left in the inbox with the Poll asleep.)
func TestInboxWakesAParkingPoll(t *testing.T) {
	q := inboxQueue(t, queue.Config{Clock: clock.New()}, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var sink atomic.Int64
	for round := range 3000 {
		got := make(chan queue.Delivery[int], 1)
		go func() {
			ds, err := q.Poll(ctx, 1)
			if err != nil {
				t.Errorf("round %d: %v (a lost wake-up runs into the guard)", round, err)
				close(got)
				return
			}
			got <- ds[0]
		}()
		for i := range round % 64 * 8 { // a spread of moments
			sink.Add(int64(i))
		}
		require.NoError(t, q.Offer(ctx, plain(q, round), 0))
		d, ok := <-got
		require.True(t, ok)
		require.Equal(t, round, d.Message.Payload)
		require.NoError(t, q.Ack(d.LeaseID))
	}
}
