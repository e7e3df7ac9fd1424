package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"
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
		err := tc.cfg.Validate()
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

func TestRetryPolicyDelay(t *testing.T) {
	half := func() float64 { return 0.5 }
	for _, tc := range []struct {
		p       RetryPolicy
		attempt int
		want    time.Duration
	}{
		{RetryPolicy{}, 1, time.Second},
		{RetryPolicy{}, 2, 2 * time.Second},
		{RetryPolicy{}, 7, time.Minute}, // 64s capped
		{RetryPolicy{}, 0, time.Second},
		{RetryPolicy{}, 10_000, time.Minute}, // overflow-safe
		{RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 3}, 3, 900 * time.Millisecond},
		{RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 3}, 4, time.Second},
		{RetryPolicy{Initial: 2 * time.Minute}, 1, 2 * time.Minute}, // Initial above the default cap
		{RetryPolicy{Jitter: 0.5, Rand: half}, 1, 750 * time.Millisecond},
		{RetryPolicy{Jitter: 1, Rand: half}, 2, time.Second},
		{RetryPolicy{NoBackoff: true}, 5, 0},
	} {
		if got := tc.p.Delay(tc.attempt); got != tc.want {
			t.Errorf("%+v.Delay(%d) = %v, want %v", tc.p, tc.attempt, got, tc.want)
		}
	}
}

func TestRetryJitterStaysInRange(t *testing.T) {
	p := RetryPolicy{Jitter: 0.3}
	for range 1000 {
		if d := p.Delay(1); d < 700*time.Millisecond || d > time.Second {
			t.Fatalf("Delay = %v out of [700ms, 1s]", d)
		}
	}
}

func TestHeaders(t *testing.T) {
	src := map[string]string{"b": "2", "a": "1"}
	h := NewHeaders(src)
	src["a"] = "changed"
	if h.Get("a") != "1" || h.Len() != 2 || h.Get("zz") != "" {
		t.Errorf("headers = %v", h)
	}
	if _, ok := h.Lookup("b"); !ok {
		t.Error("Lookup(b)")
	}
	var keys []string
	for k := range h.All() {
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Errorf("All yields %v, want sorted keys", keys)
	}
	m := h.Map()
	m["a"] = "mutated"
	if h.Get("a") != "1" {
		t.Error("Map is not a copy")
	}
	if (Headers{}).Len() != 0 || h.String() != "map[a:1 b:2]" {
		t.Errorf("String = %q", h.String())
	}
}

func TestPriorityAndReasonStrings(t *testing.T) {
	for p, want := range map[Priority]string{PriorityLow: "low", PriorityNormal: "normal", PriorityHigh: "high", PriorityCritical: "critical", 9: "Priority(9)"} {
		if p.String() != want {
			t.Errorf("%d.String() = %q", p, p.String())
		}
	}
	for r, want := range map[Reason]string{ReasonMaxAttempts: "max-attempts", ReasonOverflow: "overflow", ReasonExpired: "expired", ReasonRejected: "rejected", 0: "Reason(0)"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q", r, r.String())
		}
	}
	for p, want := range map[OverflowPolicy]string{OverflowDeadLetter: "dead-letter", OverflowReject: "reject", OverflowBlock: "block", OverflowDropOldest: "drop-oldest", 7: "OverflowPolicy(7)"} {
		if p.String() != want {
			t.Errorf("%d.String() = %q", p, p.String())
		}
	}
}

// TestReadyOrder checks the lanes against a sort by (priority desc, place)
// for random pushes of fresh and returning entries.
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

func TestDeduper(t *testing.T) {
	d, err := NewDeduper(2)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	calls := 0
	ok := func() error { calls++; return nil }
	fail := func() error { calls++; return errors.New("boom") }

	if ran, err := d.Do(a, fail); !ran || err == nil {
		t.Errorf("failed first run: %v %v", ran, err)
	}
	if d.Seen(a) {
		t.Error("a failure was recorded")
	}
	if ran, err := d.Do(a, ok); !ran || err != nil {
		t.Errorf("retry: %v %v", ran, err)
	}
	if ran, err := d.Do(a, ok); ran || err != nil {
		t.Errorf("duplicate ran: %v %v", ran, err)
	}
	d.Do(b, ok)
	d.Do(c, ok) // evicts a
	if d.Seen(a) || !d.Seen(c) || d.Len() != 2 {
		t.Errorf("eviction: seen(a)=%v seen(c)=%v len=%d", d.Seen(a), d.Seen(c), d.Len())
	}
	if calls != 4 {
		t.Errorf("calls = %d", calls)
	}

	inner := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Do(a, func() error { close(inner); <-release; return nil })
	}()
	<-inner
	if _, err := d.Do(a, ok); !errors.Is(err, ErrInProgress) {
		t.Errorf("concurrent duplicate: %v", err)
	}
	close(release)
	<-done

	if _, err := NewDeduper(0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("NewDeduper(0) = %v", err)
	}
	if _, err := d.Do(a, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Do(nil) = %v", err)
	}
}

// TestStateReturnsToEmpty checks white-box that acked, dead-lettered,
// dropped and redriven messages leave nothing behind.
func TestStateReturnsToEmpty(t *testing.T) {
	mock := clock.NewMock()
	var dead []DeadLetter[int]
	q, err := New(Config{Clock: mock, MaxAttempts: 2, MaxQueue: 50, Overflow: OverflowDropOldest, VisibilityTimeout: time.Second},
		func(dl DeadLetter[int]) { dead = append(dead, dl) })
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
func (r *countingRecorder) DeadLettered(DeadLetter[int])             {}
func (r *countingRecorder) Purged()                                  {}
func (r *countingRecorder) Commit() error                            { r.commits++; return nil }
