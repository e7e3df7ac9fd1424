package main

import (
	"os"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/internal/testkit"
)

// A fragment that compiles passes; one that passes a subscription's
// option to Open (the README's bug this command was written for), or
// names a function that does not exist, fails with the compiler's words;
// a given comment declares what the fragment leaves to its reader; a file
// comment names the file the snippet must be.
func TestCheck(t *testing.T) {
	testkit.Long(t, "type-checks fragments against the packages, from source")
	c := newChecker()
	md := "text\n```go\nb, err := broker.New[Order]()\n_ = b.CreateTopic(\"t\")\n```\n" +
		"```go\nb, err := broker.Open(dir, queue.JSONCodec[Item](), broker.WithMaxQueue(maxItems))\n```\n" +
		"```go\nbroker.NoSuchThing()\n```\n" +
		"<!-- given: raw *broker.Broker[[]byte] -->\n```go\n_, err := raw.Publish(ctx, \"t\", []byte(\"x\"))\n```\n" +
		"```go\npackage main\n\nfunc main() {}\n```\n"
	ss := extract(md)
	if len(ss) != 5 || ss[0].line != 3 || len(ss[3].given) != 1 {
		t.Fatalf("extracted %+v", ss)
	}
	for i, want := range []string{"", "cannot use broker.WithMaxQueue(maxItems)", "undefined: broker.NoSuchThing", "", ""} {
		err := c.check(ss[i])
		switch {
		case want == "" && err != nil:
			t.Errorf("snippet %d: %v", i, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("snippet %d: %v, want an error with %q", i, err, want)
		}
	}
}

func TestFileSnippet(t *testing.T) {
	c := newChecker()
	ss := extract("<!-- file: main_test.go -->\n```go\npackage main\n```\n")
	if len(ss) != 1 || ss[0].file != "main_test.go" {
		t.Fatalf("extracted %+v", ss)
	}
	if err := c.check(ss[0]); err == nil || !strings.Contains(err.Error(), "is not main_test.go") {
		t.Fatalf("a snippet that is not the file it names: %v", err)
	}
	b, err := os.ReadFile("main_test.go")
	if err != nil {
		t.Fatal(err)
	}
	ss[0].text = string(b)
	if err := c.check(ss[0]); err != nil {
		t.Fatalf("the file itself: %v", err)
	}
}
