// Package testkit holds the helpers that the tests of several packages
// share: a call that turns a panic into an error, the check that an error
// is the documented one and no panic, and what a program prints.
package testkit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

// panicked begins the text of an error CallSafely made of a panic.
const panicked = "PANIC"

// CallSafely runs fn and turns a panic into an error that matches nothing.
func CallSafely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: %v\n%s", panicked, r, debug.Stack())
		}
	}()
	return fn()
}

// Panicked reports whether err is a panic CallSafely caught.
func Panicked(err error) bool { return err != nil && strings.HasPrefix(err.Error(), panicked) }

// WantErr fails t unless err matches want (nil: no error at all) and is
// not a panic; name says which call it was.
func WantErr(t testing.TB, name string, err, want error) {
	t.Helper()
	switch {
	case Panicked(err):
		t.Errorf("%s panicked: %v", name, err)
	case want == nil && err != nil:
		t.Errorf("%s = %v, want nil", name, err)
	case want != nil && !errors.Is(err, want):
		t.Errorf("%s = %v, want an error matching %v", name, err, want)
	}
}

// Stdout returns what f prints on os.Stdout: a test of a program's main.
func Stdout(t testing.TB, f func()) string {
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
