package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg Config
		ok  bool
	}{
		"zero is valid":              {Config{}, true},
		"unlimited attempts":         {Config{MaxAttempts: UnlimitedAttempts}, true},
		"negative visibility":        {Config{VisibilityTimeout: -1}, false},
		"attempts -2":                {Config{MaxAttempts: -2}, false},
		"negative queue":             {Config{MaxQueue: -1}, false},
		"unknown overflow":           {Config{Overflow: 9}, false},
		"negative in flight":         {Config{MaxInFlight: -1}, false},
		"retry initial above max":    {Config{Retry: RetryPolicy{Initial: time.Minute, Max: time.Second}}, false},
		"retry jitter NaN":           {Config{Retry: RetryPolicy{Jitter: nan()}}, false},
		"retry multiplier +Inf":      {Config{Retry: RetryPolicy{Multiplier: inf()}}, false},
		"retry negative max":         {Config{Retry: RetryPolicy{Max: -1}}, false},
		"retry full jitter is valid": {Config{Retry: RetryPolicy{Jitter: 1}}, true},
	} {
		err := ValidateConfig(tc.cfg)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidArgument)) {
			t.Errorf("%s: Validate() = %v", name, err)
		}
		if _, err2 := New[int](tc.cfg, nil); (err2 == nil) != tc.ok {
			t.Errorf("%s: New() = %v", name, err2)
		}
	}
}

func nan() float64 { z := 0.0; return z / z }
func inf() float64 { z := 0.0; return 1 / z }

func TestReadyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var r ready[int]
	for i := range r.lanes {
		r.lanes[i].back = newEntryHeap(byPlace[int], false)
	}
	var model []*entry[int]
	place := uint64(0)
	for step := range 5000 {
		if rng.IntN(3) > 0 {
			var e *entry[int]
			fresh := rng.IntN(2) == 0
			if fresh {
				place++
				e = &entry[int]{place: place, prio: rng.IntN(numPriorities)}
			} else { // a message coming back with an older place
				e = &entry[int]{place: uint64(rng.IntN(int(place) + 1)), prio: rng.IntN(numPriorities)}
			}
			r.push(e, fresh)
			model = append(model, e)
		} else if len(model) > 0 {
			slices.SortStableFunc(model, func(a, b *entry[int]) int {
				if a.prio != b.prio {
					return b.prio - a.prio
				}
				return int(a.place) - int(b.place)
			})
			got := r.pop()
			if got.prio != model[0].prio || got.place != model[0].place {
				t.Fatalf("step %d: pop = (%d,%d), want (%d,%d)", step, got.prio, got.place, model[0].prio, model[0].place)
			}
			model = slices.DeleteFunc(model, func(e *entry[int]) bool { return e == got })
		}
		if r.len() != len(model) {
			t.Fatalf("step %d: len %d, model %d", step, r.len(), len(model))
		}
	}
}

func TestStateReturnsToEmpty(t *testing.T) {
	mock := clock.NewMock()
	var dead []Letter[int]
	q, err := New(Config{Clock: mock, MaxAttempts: 2, MaxQueue: 50, Overflow: OverflowDropOldest, VisibilityTimeout: time.Second},
		func(dl Letter[int]) { dead = append(dead, dl) })
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	for i := range 60 {
		m := &Message[int]{Payload: i, Priority: Priority(i%4 - 1)}
		if err := q.Offer(ctx, m, time.Duration(i%3)*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; ; round++ {
		mock.Add(time.Second)
		ds := q.TryPoll(7)
		if len(ds) == 0 && q.Stats().Delayed == 0 && q.Stats().InFlight == 0 {
			if len(dead) == 0 {
				break
			}
			for _, dl := range dead {
				if err := q.Redrive(dl); err != nil {
					t.Fatal(err)
				}
			}
			dead = nil
			continue
		}
		for i, d := range ds {
			switch (i + round) % 4 {
			case 0:
				q.Ack(d.LeaseID)
			case 1:
				q.Fail(d.LeaseID, fmt.Errorf("round %d", round))
			case 2:
				q.Nack(d.LeaseID, 0)
			} // case 3: let it expire
		}
		if round > 1000 {
			t.Fatal("did not drain")
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.nheld != 0 || len(q.heldEntries()) != 0 || q.ready.len() != 0 || q.delayed.len() != 0 || q.inflight.Len() != 0 || len(q.pending) != 0 {
		t.Errorf("leftovers: held %d ready %d delayed %d inflight %d pending %d",
			q.nheld, q.ready.len(), q.delayed.len(), q.inflight.Len(), len(q.pending))
	}
	for p := range q.ready.lanes {
		if l := &q.ready.lanes[p]; len(l.fifo) != 0 || l.head != 0 || l.back.len() != 0 {
			t.Errorf("lane %d not empty", p)
		}
	}
	s := q.stats
	if s.Published+s.Redriven != s.Acked+s.DeadLettered+s.Dropped {
		t.Errorf("stats do not balance: %+v", s)
	}
}

// heldEntries returns every entry the queue holds. q.mu must be held.
func (q *Queue[T]) heldEntries() []*entry[T] {
	var out []*entry[T]
	for slot := range q.slots {
		if e := q.entryAt(slot); e.msg != nil {
			out = append(out, e)
		}
	}
	return out
}

// The durable hooks' offer options are no TTLs: WithNote(nil) and
// WithDeferredCommit are accepted by a queue with no Recorder, and
// WithDeferredCommit leaves the Recorder's Commit to the caller.
func TestOfferNoteAndDeferredCommit(t *testing.T) {
	q, err := New[int](Config{}, nil)
	require.NoError(t, err)
	require.NoError(t, q.Offer(context.Background(), &Message[int]{}, 0, WithNote(nil), WithDeferredCommit()))
	require.Equal(t, 1, q.Stats().Visible)

	rec := &countingRecorder{}
	q, err = NewRecorded[int](Config{}, nil, rec)
	require.NoError(t, err)
	require.NoError(t, q.Offer(context.Background(), &Message[int]{}, 0, WithDeferredCommit()))
	require.Equal(t, 1, rec.offered)
	require.Zero(t, rec.commits, "deferred: the caller commits")
	require.NoError(t, q.Offer(context.Background(), &Message[int]{}, 0, WithNote("n")))
	require.Equal(t, 1, rec.commits)
	require.Equal(t, "n", rec.note)
}

type countingRecorder struct {
	offered, commits int
	note             any
}

func (r *countingRecorder) Offered(_ Entry[int], note any)           { r.offered++; r.note = note }
func (r *countingRecorder) Delivered([]Delivery[int])                {}
func (r *countingRecorder) Retried(*Message[int], time.Time, string) {}
func (r *countingRecorder) Released(*Message[int])                   {}
func (r *countingRecorder) Removed(*Message[int])                    {}
func (r *countingRecorder) DeadLettered(Letter[int])                 {}
func (r *countingRecorder) Purged()                                  {}
func (r *countingRecorder) Commit() error                            { r.commits++; return nil }
