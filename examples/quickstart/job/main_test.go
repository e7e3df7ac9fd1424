package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// stdout returns what f prints.
func stdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = orig }()
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	w.Close()
	return <-done
}

// The quick start runs as the README shows it, in a directory of its own:
// the first run handles every line, the second finds them all done.
func TestQuickStartRestarts(t *testing.T) {
	t.Chdir(t.TempDir())
	if out := stdout(t, main); strings.Count(out, "line ") != 3 {
		t.Fatalf("the first run:\n%s", out)
	}
	if out := stdout(t, main); out != "" {
		t.Fatalf("the second run queued again:\n%s", out)
	}
}
