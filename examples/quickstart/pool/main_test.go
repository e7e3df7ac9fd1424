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

// The quick start runs as the README shows it: ten orders charged once each.
func TestQuickStart(t *testing.T) {
	out := stdout(t, main)
	if n := strings.Count(out, "attempt 1\n"); n != 10 || !strings.Contains(out, "acked=10 ") {
		t.Fatalf("%d orders charged; output:\n%s", n, out)
	}
}
