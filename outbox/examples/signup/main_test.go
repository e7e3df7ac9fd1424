package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestSignup(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), filepath.Join(t.TempDir(), "app.db"), []string{"ada@example.com", "nope", "grace@example.com"}, &out); err != nil {
		t.Fatal(err)
	}
	want := `signup ada@example.com committed
signup nope refused: rolled back, no email will be sent
signup grace@example.com committed
relayed 2 messages
welcome email sent to ada@example.com
welcome email sent to grace@example.com
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
