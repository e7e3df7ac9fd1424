package backend_test

import (
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
)

type rec struct {
	msg      string
	deadline time.Time
}

func TestLeaseTable(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lt := backend.NewLeaseTable(func(r *rec) string { return r.msg })
	a1, a2, b1 := lease.NewID(1, 1, 1), lease.NewID(1, 1, 2), lease.NewID(1, 2, 1)
	ra1, ra2, rb1 := &rec{"a", t0}, &rec{"a", t0.Add(time.Hour)}, &rec{"b", t0}
	if prev, _, _ := lt.Hold(a1, ra1); !prev.IsZero() {
		t.Fatalf("a first lease superseded %v", prev)
	}
	lt.Hold(b1, rb1)
	if prev, ph, held := lt.Hold(a2, ra2); prev != a1 || ph != ra1 || !held {
		t.Fatalf("a second delivery of a: superseded %v %v %v, want a1, held", prev, ph, held)
	}
	if _, ok := lt.Held(a1); ok {
		t.Fatal("a superseded lease is still held")
	}
	if cur, ok := lt.Latest("a"); !ok || cur != a2 {
		t.Fatalf("latest of a: %v %v", cur, ok)
	}
	if h, ok := lt.Take(a2); !ok || h != ra2 || lt.Len() != 1 {
		t.Fatalf("Take: %v %v, %d held", h, ok, lt.Len())
	}
	if !lt.PutBack(a2, ra2) || lt.Len() != 2 {
		t.Fatal("PutBack of the latest lease")
	}
	lt.Take(a2)
	lt.Hold(lease.NewID(1, 1, 3), &rec{"a", t0})
	if lt.PutBack(a2, ra2) {
		t.Fatal("PutBack of a lease superseded meanwhile")
	}
	if lt.ForgetIf(a2, "a") {
		t.Fatal("ForgetIf of a lease that is not the latest")
	}
	if id, h, held := lt.Forget("b"); id != b1 || h != rb1 || !held {
		t.Fatalf("Forget(b): %v %v %v", id, h, held)
	}
	if _, ok := lt.Latest("b"); ok {
		t.Fatal("b still has a latest lease")
	}
	var dropped []lease.ID
	stale := func(r *rec) bool { return t0.Add(2*time.Hour).Sub(r.deadline) > time.Hour }
	if !lt.Sweep(t0.Add(2*time.Hour), time.Minute, stale, func(id lease.ID, _ *rec) { dropped = append(dropped, id) }) {
		t.Fatal("the first sweep did not run")
	}
	if len(dropped) != 1 || lt.Len() != 0 {
		t.Fatalf("swept %v, %d left", dropped, lt.Len())
	}
	if _, ok := lt.Latest("a"); ok {
		t.Fatal("a swept lease is still its message's latest")
	}
	if lt.Sweep(t0.Add(2*time.Hour+time.Minute), time.Minute, stale, nil) {
		t.Fatal("a sweep ran within every of the last")
	}
	lt.Hold(b1, rb1)
	lt.Clear()
	if _, ok := lt.Latest("b"); ok || lt.Len() != 0 {
		t.Fatal("Clear kept something")
	}
}
