package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type elem struct{ v, index int }

func TestHeapAgainstSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	h := Heap[*elem]{Less: func(a, b *elem) bool { return a.v < b.v }, SetIndex: func(e *elem, i int) { e.index = i }}
	var model []*elem
	for step := range 10_000 {
		switch op := rng.IntN(4); {
		case op < 2 || len(model) == 0:
			e := &elem{v: rng.IntN(100)}
			h.Push(e)
			model = append(model, e)
		case op == 2: // remove any
			e := model[rng.IntN(len(model))]
			if got := h.Remove(e.index); got != e || e.index != -1 {
				t.Fatalf("step %d: Remove returned %v, index %d", step, got, e.index)
			}
			model = slices.DeleteFunc(model, func(x *elem) bool { return x == e })
		default: // change one and fix
			e := model[rng.IntN(len(model))]
			e.v = rng.IntN(100)
			h.Fix(e.index)
		}
		for i, e := range h.S {
			if e.index != i || (i > 0 && h.Less(e, h.S[(i-1)/2])) {
				t.Fatalf("step %d: heap broken at %d", step, i)
			}
		}
		if h.Len() != len(model) {
			t.Fatalf("step %d: len %d, model %d", step, h.Len(), len(model))
		}
	}
	h.Clear()
	if h.Len() != 0 {
		t.Fatal("Clear")
	}
}
