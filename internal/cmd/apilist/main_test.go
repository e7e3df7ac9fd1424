package main

import (
	"strings"
	"testing"
)

func TestListing(t *testing.T) {
	got, err := listing("testdata/src")
	if err != nil {
		t.Fatal(err)
	}
	want := `package p (testdata/src/p): 6 exported
	const A
	func (t *T[X]) M(d time.Duration) error
	func F()
	type G[X any] struct{ V X }
	type T[X any] struct { G[X] Name string ... }
	var V
`
	if string(got) != want {
		t.Errorf("listing:\n%s\nwant:\n%s", got, want)
	}
}

func TestDiff(t *testing.T) {
	d := diff([]byte("a\nb\n"), []byte("a\nc\n"))
	if !strings.Contains(d, "- b") || !strings.Contains(d, "+ c") || strings.Contains(d, "a") {
		t.Errorf("diff = %q", d)
	}
}
