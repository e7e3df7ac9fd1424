package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/sqsserver/sqstest"
)

// The example over leasebus's SQS server on a mock clock: three signups
// welcomed, the fourth dead-lettered with its reason, fixed, redriven and
// welcomed; run twice, as the queues are left for the next run.
func TestRun(t *testing.T) {
	srv := sqstest.Start(t)
	want := []string{
		"dead letter: user 3, rejected after 1 attempt(s): \"edsger(at)example.com\" is not an email address",
		"published 4 signups to leasebus-example-signups",
		"redrove 1 with the address fixed",
		"welcomed user 1 at ada@example.com (attempt 1)",
		"welcomed user 2 at grace@example.com (attempt 1)",
		"welcomed user 3 at edsger@example.com (attempt 1)",
		"welcomed user 4 at barbara@example.com (attempt 1)",
	}
	for round := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
		var out bytes.Buffer
		if err := run(ctx, srv.Client, srv.Clock, &out); err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, out.String())
		}
		cancel()
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		slices.Sort(lines) // the pool's four workers welcome in any order
		if !slices.Equal(lines, want) {
			t.Fatalf("round %d printed\n%s\nwant (sorted)\n%s", round, strings.Join(lines, "\n"), strings.Join(want, "\n"))
		}
	}
}
