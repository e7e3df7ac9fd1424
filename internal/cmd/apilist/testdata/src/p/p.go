// Package p is apilist's test input.
package p

import "time"

// T is exported, with an exported embedded generic field and an unexported one.
type T[X any] struct {
	G[X]
	Name string
	n    int
}

// G is generic.
type G[X any] struct{ V X }

type hidden struct{}

// M is a method of an exported type.
func (t *T[X]) M(d time.Duration) error { return nil }

func (hidden) M() {}

// F is a function.
func F() {}

func f() {}

// Consts: one exported of two.
const (
	A = 1 << iota
	b
)

// V is a variable.
var V, w = 1, 2
