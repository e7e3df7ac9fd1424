package testkit

import "testing"

// Long skips a test in -short mode, the README's quick run, saying why:
// it is long (a kill loop, a model at scale, thousands of rounds). bash
// .ci/run runs it.
func Long(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("long (%s): -short skips it; bash .ci/run runs it", what)
	}
}

// Scale returns full, or small in -short mode: the size of a test that
// still shows its point at small, and is long at full.
func Scale(full, small int) int {
	if testing.Short() {
		return small
	}
	return full
}
