package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, "", 20, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	for _, want := range []string{"20 jobs: 19 acked", "6 retries, 1 dead-lettered", "dead letter: job 13 after 3 attempts (max-attempts): mailbox does not exist"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
