package core

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// idleGuard bounds every wait on a condition here, so that a bug shows as a
// failure rather than a hung test. It is never a timing assertion.
const idleGuard = 10 * time.Second

func newIdleQueue(t *testing.T, cfg queue.Config) (*Queue[string], *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	cfg.Clock = mock
	q, err := New[string](cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q, mock
}

func offer(t *testing.T, q *Queue[string], payload string, delay time.Duration) {
	t.Helper()
	if err := q.Offer(context.Background(), &queue.Message[string]{Payload: payload}, delay); err != nil {
		t.Fatal(err)
	}
}

func pollNow(t *testing.T, q *Queue[string]) queue.Delivery[string] {
	t.Helper()
	ds := q.TryPoll(1)
	if len(ds) != 1 {
		t.Fatalf("TryPoll(1) = %d deliveries, want 1", len(ds))
	}
	return ds[0]
}

// isIdle probes AwaitIdle without waiting: with a done context it returns
// nil only if the queue is idle now.
func isIdle(t *testing.T, q *Queue[string]) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := q.AwaitIdle(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("AwaitIdle: %v", err)
	}
	return err == nil
}

// awaitIdleBlocked starts AwaitIdle and returns once it is waiting on the
// queue's idle channel (so that what the test does next must wake it), and
// a channel with its result.
func awaitIdleBlocked(t *testing.T, q *Queue[string], ctx context.Context) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- q.AwaitIdle(ctx) }()
	deadline := time.Now().Add(idleGuard)
	for {
		q.mu.Lock()
		waiting := q.idle != nil
		q.mu.Unlock()
		if waiting {
			return done
		}
		select {
		case err := <-done:
			t.Fatalf("AwaitIdle returned %v before the queue was idle", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("AwaitIdle not waiting after %v", idleGuard)
		}
		runtime.Gosched()
	}
}

func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(idleGuard):
		t.Fatalf("AwaitIdle did not return in %v", idleGuard)
		return nil
	}
}

func TestAwaitIdleEmptyReturnsAtOnce(t *testing.T) {
	q, _ := newIdleQueue(t, queue.Config{})
	if err := q.AwaitIdle(context.Background()); err != nil {
		t.Fatalf("AwaitIdle on an empty queue: %v", err)
	}
}

func TestAwaitIdleInvalidAndClosed(t *testing.T) {
	q, _ := newIdleQueue(t, queue.Config{})
	var noCtx context.Context // a nil context, on purpose
	if err := q.AwaitIdle(noCtx); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("AwaitIdle(nil) = %v, want ErrInvalidArgument", err)
	}
	offer(t, q, "a", 0)
	done := awaitIdleBlocked(t, q, context.Background())
	q.Close()
	if err := result(t, done); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("AwaitIdle at Close = %v, want ErrClosed", err)
	}
	if err := q.AwaitIdle(context.Background()); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("AwaitIdle after Close = %v, want ErrClosed", err)
	}
}

func TestAwaitIdleContextEnds(t *testing.T) {
	q, _ := newIdleQueue(t, queue.Config{})
	offer(t, q, "a", 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := awaitIdleBlocked(t, q, ctx)
	cancel()
	if err := result(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("AwaitIdle = %v, want context.Canceled", err)
	}
}

// Each way a queue can become empty wakes a waiting AwaitIdle.
func TestAwaitIdleWokenByEveryWayToEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  queue.Config
		// empty empties a queue that holds one visible message.
		empty func(t *testing.T, q *Queue[string], mock *clock.Mock)
	}{
		{"ack", queue.Config{}, func(t *testing.T, q *Queue[string], _ *clock.Mock) {
			if err := q.Ack(pollNow(t, q).LeaseID); err != nil {
				t.Fatal(err)
			}
		}},
		{"ack batch", queue.Config{}, func(t *testing.T, q *Queue[string], _ *clock.Mock) {
			if err := q.AckBatch(nil); err != nil { // changes nothing: still busy
				t.Fatal(err)
			}
			if err := q.AckBatch(leaseIDs(pollNow(t, q))); err != nil {
				t.Fatal(err)
			}
		}},
		{"fail on the last attempt", queue.Config{MaxAttempts: 1}, func(t *testing.T, q *Queue[string], _ *clock.Mock) {
			if err := q.Fail(pollNow(t, q).LeaseID, errors.New("boom")); err != nil {
				t.Fatal(err)
			}
		}},
		{"nack on the last attempt", queue.Config{MaxAttempts: 1}, func(t *testing.T, q *Queue[string], _ *clock.Mock) {
			if err := q.Nack(pollNow(t, q).LeaseID, time.Minute); err != nil {
				t.Fatal(err)
			}
		}},
		{"reject", queue.Config{}, func(t *testing.T, q *Queue[string], _ *clock.Mock) {
			if err := q.Reject(pollNow(t, q).LeaseID, errors.New("poison")); err != nil {
				t.Fatal(err)
			}
		}},
		{"purge", queue.Config{}, func(t *testing.T, q *Queue[string], _ *clock.Mock) {
			pollNow(t, q) // in flight: purged too
			if n, err := q.Purge(); n != 1 || err != nil {
				t.Fatalf("Purge = %d, %v", n, err)
			}
		}},
		{"last lease expires, settled by another call", queue.Config{MaxAttempts: 1, VisibilityTimeout: time.Minute}, func(t *testing.T, q *Queue[string], mock *clock.Mock) {
			pollNow(t, q)
			mock.Add(time.Minute) // nothing settles yet: nobody calls
			q.Sweep()
		}},
		{"TTL passes, settled by Stats", queue.Config{TTL: time.Minute}, func(t *testing.T, q *Queue[string], mock *clock.Mock) {
			mock.Add(time.Minute)
			if st := q.Stats(); st.DeadLettered != 1 {
				t.Fatalf("stats %+v", st)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, mock := newIdleQueue(t, tc.cfg)
			offer(t, q, "m", 0)
			done := awaitIdleBlocked(t, q, context.Background())
			tc.empty(t, q, mock)
			if err := result(t, done); err != nil {
				t.Fatalf("AwaitIdle = %v, want nil", err)
			}
		})
	}
}

func leaseIDs(ds ...queue.Delivery[string]) []lease.ID {
	ids := make([]lease.ID, len(ds))
	for i, d := range ds {
		ids[i] = d.LeaseID
	}
	return ids
}

// Delayed, held-back, in-flight and retrying messages all keep the queue
// busy; AwaitIdle does not move time.
func TestAwaitIdleBusyStates(t *testing.T) {
	q, mock := newIdleQueue(t, queue.Config{Retry: queue.RetryPolicy{Initial: 10 * time.Second}, MaxAttempts: 2})
	offer(t, q, "later", time.Minute)
	if isIdle(t, q) {
		t.Fatal("idle with a delayed message")
	}
	mock.Add(time.Minute)
	d := pollNow(t, q)
	if isIdle(t, q) {
		t.Fatal("idle with a message in flight")
	}
	if err := q.Fail(d.LeaseID, errors.New("once")); err != nil {
		t.Fatal(err)
	}
	if isIdle(t, q) {
		t.Fatal("idle with a message waiting out its retry backoff")
	}
	mock.Add(10 * time.Second)
	d = pollNow(t, q)

	// An ordering key: the second waits behind the first.
	for _, p := range []string{"k1", "k2"} {
		if err := q.Offer(context.Background(), &queue.Message[string]{Payload: p, Key: "k"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Ack(d.LeaseID); err != nil {
		t.Fatal(err)
	}
	k1 := pollNow(t, q)
	if err := q.Ack(k1.LeaseID); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Visible != 1 || isIdle(t, q) {
		t.Fatalf("after the key's head: %+v, want its next visible and the queue busy", st)
	}
	k2 := pollNow(t, q)
	if err := q.Ack(k2.LeaseID); err != nil {
		t.Fatal(err)
	}
	if !isIdle(t, q) {
		t.Fatalf("not idle with nothing held: %+v", q.Stats())
	}
}

// A held-back message keeps the queue busy while its key's head is in
// flight, and AwaitIdle waits through the key's whole run.
func TestAwaitIdleHeldBack(t *testing.T) {
	q, _ := newIdleQueue(t, queue.Config{})
	for _, p := range []string{"k1", "k2"} {
		if err := q.Offer(context.Background(), &queue.Message[string]{Payload: p, Key: "k"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	k1 := pollNow(t, q)
	if st := q.Stats(); st.HeldBack != 1 {
		t.Fatalf("stats %+v, want one held back", st)
	}
	done := awaitIdleBlocked(t, q, context.Background())
	if err := q.Ack(k1.LeaseID); err != nil {
		t.Fatal(err)
	}
	k2 := pollNow(t, q) // still busy: k2 took k1's place
	if err := q.Ack(k2.LeaseID); err != nil {
		t.Fatal(err)
	}
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestDeliveryCarriesMaxAttempts(t *testing.T) {
	for _, tc := range []struct {
		cfg  queue.Config
		want int
	}{
		{queue.Config{}, queue.DefaultMaxAttempts},
		{queue.Config{MaxAttempts: 3}, 3},
		{queue.Config{MaxAttempts: queue.UnlimitedAttempts}, 0},
	} {
		q, _ := newIdleQueue(t, tc.cfg)
		offer(t, q, "m", 0)
		if d := pollNow(t, q); d.MaxAttempts != tc.want || d.Attempt != 1 {
			t.Errorf("MaxAttempts %d: delivery MaxAttempts %d attempt %d, want %d and 1", tc.cfg.MaxAttempts, d.MaxAttempts, d.Attempt, tc.want)
		}
	}
}
