package main

import (
	"strings"
	"testing"

	"github.com/leasebus/leasebus/internal/testkit"
)

// The quick start runs as the README shows it, in a directory of its own:
// the first run handles every line, the second finds them all done.
func TestQuickStartRestarts(t *testing.T) {
	t.Chdir(t.TempDir())
	if out := testkit.Stdout(t, main); strings.Count(out, "line ") != 3 {
		t.Fatalf("the first run:\n%s", out)
	}
	if out := testkit.Stdout(t, main); out != "" {
		t.Fatalf("the second run queued again:\n%s", out)
	}
}
