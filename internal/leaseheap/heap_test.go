package leaseheap

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestTableOperations(t *testing.T) {
	var tb Table[string]
	a, b, c := lease.NewID(1, 1, 1), lease.NewID(1, 2, 1), lease.NewID(1, 3, 1)
	for _, tc := range []struct {
		id lease.ID
		at time.Duration
		v  string
	}{{a, 3 * time.Second, "a"}, {b, time.Second, "b"}, {c, 2 * time.Second, "c"}} {
		if !tb.Add(Lease{ID: tc.id, Attempt: 1, Deadline: t0.Add(tc.at)}, tc.v) {
			t.Fatalf("Add(%v) refused", tc.id)
		}
	}
	if tb.Add(Lease{ID: a}, "dup") {
		t.Error("Add accepted a duplicate ID")
	}
	if l, ok := tb.Next(); !ok || l.ID != b {
		t.Errorf("Next = %v, want b", l.ID)
	}
	if !tb.SetDeadline(b, t0.Add(4*time.Second)) || tb.SetDeadline(lease.NewID(9, 9, 9), t0) {
		t.Error("SetDeadline")
	}
	if l, _ := tb.Next(); l.ID != c {
		t.Errorf("after SetDeadline Next = %v, want c", l.ID)
	}
	if _, _, ok := tb.PopExpired(t0.Add(2*time.Second - 1)); ok {
		t.Error("PopExpired popped before the deadline")
	}
	if _, v, ok := tb.PopExpired(t0.Add(2 * time.Second)); !ok || v != "c" {
		t.Errorf("PopExpired at the deadline = %q, %v", v, ok)
	}
	if _, v, ok := tb.Remove(a); !ok || v != "a" {
		t.Errorf("Remove(a) = %q, %v", v, ok)
	}
	if _, _, ok := tb.Remove(a); ok {
		t.Error("Remove twice")
	}
	if _, v, ok := tb.Get(b); !ok || v != "b" || tb.Len() != 1 {
		t.Errorf("Get(b) = %q, %v; Len %d", v, ok, tb.Len())
	}
	tb.Clear()
	if tb.Len() != 0 {
		t.Error("Clear")
	}
	if _, _, ok := tb.Get(b); ok {
		t.Error("Get after Clear")
	}
}

// TestTableAgainstModel replays random operations against a sorted-slice
// model and checks the heap invariant after each.
func TestTableAgainstModel(t *testing.T) {
	type rec struct {
		l     Lease
		stamp int
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var tb Table[int]
	var model []rec
	stamp := 0
	now := t0
	for step := range 20_000 {
		switch op := rng.IntN(10); {
		case op < 4:
			stamp++
			l := Lease{ID: lease.NewID(7, uint64(stamp), 1), Deadline: now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)}
			tb.Add(l, stamp)
			model = append(model, rec{l, stamp})
		case op < 6 && len(model) > 0:
			i := rng.IntN(len(model))
			if _, v, ok := tb.Remove(model[i].l.ID); !ok || v != model[i].stamp {
				t.Fatalf("step %d: Remove = %d, %v", step, v, ok)
			}
			model = slices.Delete(model, i, i+1)
		case op < 7 && len(model) > 0:
			i := rng.IntN(len(model))
			d := now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
			tb.SetDeadline(model[i].l.ID, d)
			model[i].l.Deadline = d
		case op < 9:
			now = now.Add(time.Duration(rng.IntN(5)) * time.Millisecond)
			for {
				l, v, ok := tb.PopExpired(now)
				// the model's earliest (deadline, then insertion) due lease
				best := -1
				for i, r := range model {
					if r.l.Expired(now) && (best < 0 || r.l.Deadline.Before(model[best].l.Deadline)) {
						best = i
					}
				}
				if ok != (best >= 0) {
					t.Fatalf("step %d: PopExpired ok = %v, model has due = %v", step, ok, best >= 0)
				}
				if !ok {
					break
				}
				if !l.Deadline.Equal(model[best].l.Deadline) {
					t.Fatalf("step %d: popped deadline %v, model's earliest %v", step, l.Deadline, model[best].l.Deadline)
				}
				i := slices.IndexFunc(model, func(r rec) bool { return r.stamp == v })
				model = slices.Delete(model, i, i+1)
			}
		}
		if tb.Len() != len(model) {
			t.Fatalf("step %d: Len = %d, model %d", step, tb.Len(), len(model))
		}
		items := tb.heap.all()
		for i := 1; i < len(items); i++ {
			if itemLess(items[i], items[(i-1)/2]) {
				t.Fatalf("step %d: heap invariant broken at %d", step, i)
			}
			if items[i].index != i {
				t.Fatalf("step %d: index of item %d is %d", step, i, items[i].index)
			}
		}
	}
}

func TestTableSteadyStateAllocatesNothing(t *testing.T) {
	var tb Table[int]
	for i := range 64 {
		tb.Add(Lease{ID: lease.NewID(1, uint64(i), 1), Deadline: t0}, i)
	}
	for i := range 64 {
		tb.Remove(lease.NewID(1, uint64(i), 1))
	}
	seq := uint64(1000)
	allocs := testing.AllocsPerRun(1000, func() {
		seq++
		id := lease.NewID(1, seq, 1)
		tb.Add(Lease{ID: id, Deadline: t0}, 0)
		tb.Remove(id)
	})
	if allocs != 0 {
		t.Errorf("Add+Remove allocates %v times", allocs)
	}
}

func BenchmarkTableAddRemove(b *testing.B) {
	var tb Table[int]
	for i := range 1024 {
		tb.Add(Lease{ID: lease.NewID(1, uint64(i), 1), Deadline: t0.Add(time.Duration(i))}, i)
	}
	seq := uint64(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		seq++
		id := lease.NewID(1, seq, 1)
		tb.Add(Lease{ID: id, Deadline: t0.Add(time.Duration(seq % 2048))}, 0)
		tb.Remove(id)
	}
}

func BenchmarkTableExpirySweep(b *testing.B) {
	var tb Table[int]
	b.ReportAllocs()
	for b.Loop() {
		for i := range 1000 {
			tb.Add(Lease{ID: lease.NewID(1, uint64(i), 1), Deadline: t0.Add(time.Duration(i))}, i)
		}
		for {
			if _, _, ok := tb.PopExpired(t0.Add(time.Hour)); !ok {
				break
			}
		}
	}
}

func TestExpiredIsInclusiveOfDeadline(t *testing.T) {
	l := Lease{Deadline: t0}
	for _, tc := range []struct {
		now  time.Time
		want bool
	}{
		{t0.Add(-time.Nanosecond), false},
		{t0, true},
		{t0.Add(time.Nanosecond), true},
	} {
		if got := l.Expired(tc.now); got != tc.want {
			t.Errorf("Expired(%v) = %v, want %v", tc.now.Sub(t0), got, tc.want)
		}
	}
}
