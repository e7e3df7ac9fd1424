package main

import (
	"strings"
	"testing"
)

func TestDemoOutput(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	const want = `=== Fan-out: each subscription has its own queue ===
audit:        payment(critical) signup(high) signup(normal) login(low)
mailer:       payment(critical) signup(high) signup(normal) login(low)
signups-only: signup(high) signup(normal)
mailer never acked; audit is unaffected: 4 acked, 4 still leased by mailer

=== Retry with backoff, then dead letter ===
t=0s  attempt 1: card declined
t=1s  attempt 2: card declined
t=3s  attempt 3: card declined
dead letter: charge #42 on "charge": max-attempts after 3 attempts, last error "card declined"

=== Idempotent consumer: a duplicate is processed once ===
shipped order 7
redelivery attempt 2 of message true: processed again? false
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
