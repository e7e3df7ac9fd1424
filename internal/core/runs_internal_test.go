package core

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The runs behind a sweep (FIFO runs of entries, the in-flight table),
// each against a simple model.

// TestRunAgainstModel replays random pushes, pops and removals against a
// slice and checks the order, the positions entries keep, and that the
// run's blocks stay within about twice its entries.
func TestRunAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var r run[int]
	var model []*entry[int]
	place := uint64(0)
	for step := range 100_000 {
		if rng.IntN(500) == 0 { // what a run does after maxRunPos pushes
			r.rebase()
		}
		switch op := rng.IntN(10); {
		case op < 5 || len(model) == 0:
			k := 1
			if rng.IntN(100) == 0 { // a burst: blocks fill up
				k = rng.IntN(3 * runBlock)
			}
			for range k {
				place++
				e := &entry[int]{place: place}
				r.push(e)
				model = append(model, e)
			}
		case op < 7:
			k := 1
			if rng.IntN(100) == 0 { // a burst: blocks empty
				k = rng.IntN(len(model)) + 1
			}
			for range k {
				e := r.pop()
				if e != model[0] {
					t.Fatalf("step %d: pop = place %d, want %d", step, e.place, model[0].place)
				}
				model = model[1:]
			}
		default:
			i := rng.IntN(len(model))
			if rng.IntN(4) == 0 { // a run of neighbours: holes inside
				i = len(model) / 2
			}
			r.remove(model[i])
			model = slices.Delete(model, i, i+1)
		}
		if r.len() != len(model) {
			t.Fatalf("step %d: len %d, model %d", step, r.len(), len(model))
		}
		if len(model) > 0 && (r.first() != model[0] || r.last() != model[len(model)-1]) {
			t.Fatalf("step %d: first/last disagree with the model", step)
		}
		if slots := len(r.blocks) * runBlock; slots > 2*len(model)+minCompact+2*runBlock {
			t.Fatalf("step %d: %d slots for %d entries", step, slots, len(model))
		}
		if step%997 == 0 {
			for _, e := range model {
				if *r.slot(-2 - int(e.index)) != e {
					t.Fatalf("step %d: entry at place %d is not where its index says", step, e.place)
				}
			}
		}
	}
}

// TestInflightAgainstModel replays leases (mostly in deadline order, some
// not), removals, deadline changes and expiry against a sorted slice: the
// table pops by deadline, then lease order, whichever part holds a lease.
func TestInflightAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	f := newInflight[int]()
	var model []*entry[int] // by (deadline, stamp)
	sortModel := func() { slices.SortFunc(model, func(a, b *entry[int]) int { return cmpDeadline(a, b) }) }
	now := tick(0)
	for step := range 100_000 {
		switch op := rng.IntN(12); {
		case op < 5:
			e := &entry[int]{at: now.after(time.Second)}
			if rng.IntN(5) == 0 { // a shorter visibility: out of order
				e.at = now.after(time.Duration(rng.IntN(1000)) * time.Millisecond)
			}
			f.Push(e)
			model = append(model, e)
		case op < 7 && len(model) > 0:
			i := rng.IntN(len(model))
			f.Remove(model[i])
			model = slices.Delete(model, i, i+1)
		case op < 8 && len(model) > 0:
			e := model[rng.IntN(len(model))]
			f.SetDeadline(e, now.after(time.Duration(rng.IntN(2000))*time.Millisecond))
		case op < 10:
			now = now.after(time.Duration(rng.IntN(40)) * time.Millisecond)
		default:
			sortModel()
			for {
				e := f.PopExpired(now)
				if e == nil {
					if len(model) > 0 && now >= model[0].at {
						t.Fatalf("step %d: nothing popped, model has one due", step)
					}
					break
				}
				if e != model[0] {
					t.Fatalf("step %d: popped %v/%d, want %v/%d", step, e.at, e.stamp, model[0].at, model[0].stamp)
				}
				model = model[1:]
			}
		}
		if f.Len() != len(model) {
			t.Fatalf("step %d: Len %d, model %d", step, f.Len(), len(model))
		}
		if len(model) > 0 {
			sortModel()
			if f.Peek() != model[0] {
				t.Fatalf("step %d: Peek disagrees with the model", step)
			}
		}
	}
}

func cmpDeadline(a, b *entry[int]) int {
	switch {
	case byDeadline(a, b):
		return -1
	case byDeadline(b, a):
		return 1
	}
	return 0
}
