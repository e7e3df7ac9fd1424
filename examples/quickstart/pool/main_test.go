package main

import (
	"strings"
	"testing"

	"github.com/leasebus/leasebus/internal/testkit"
)

// The quick start runs as the README shows it: ten orders charged once each.
func TestQuickStart(t *testing.T) {
	out := testkit.Stdout(t, main)
	if n := strings.Count(out, "attempt 1\n"); n != 10 || !strings.Contains(out, "acked=10 ") {
		t.Fatalf("%d orders charged; output:\n%s", n, out)
	}
}
