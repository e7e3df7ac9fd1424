package sourcetest

import (
	"slices"
	"testing"
)

// A Differs entry must name a case of the suite: a misspelt one is
// reported, not silently ignored.
func TestUnknownCases(t *testing.T) {
	cases := []namedCase{{name: "PollBatch"}, {name: "NackDelay"}}
	got := unknownCases(map[string]string{"NackDelay": "x", "Nackdelay": "y", "Zzz": "z"}, cases)
	if want := []string{"Nackdelay", "Zzz"}; !slices.Equal(got, want) {
		t.Fatalf("unknownCases = %q, want %q", got, want)
	}
	if got := unknownCases(nil, cases); got != nil {
		t.Fatalf("unknownCases(nil) = %q", got)
	}
}
