package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

type order struct {
	Order int    `json:"order"`
	Card  string `json:"card"`
}

var ctx = context.Background()

// running is a durable directory held open by its owner: orders fanned out
// to billing and shipping, billing with one order leased and one
// dead-lettered ("card declined").
type running struct {
	dir     string
	b       *broker.Broker[order]
	billing *broker.Subscription[order]
	dead    queue.Message[order]
}

func startOwner(t *testing.T) *running {
	t.Helper()
	r := &running{dir: t.TempDir()}
	r.open(t)
	require.NoError(t, r.b.CreateTopic("orders"))
	var err error
	r.billing, err = r.b.Subscribe("orders", "billing", broker.WithMaxAttempts(1))
	require.NoError(t, err)
	_, err = r.b.Subscribe("orders", "shipping")
	require.NoError(t, err)
	for i, card := range []string{"4242", "0000", "4242"} {
		m, err := r.b.Publish(ctx, "orders", order{Order: 1001 + i, Card: card}, broker.WithKey("cust-1"))
		require.NoError(t, err)
		if card == "0000" {
			r.dead = m
		}
	}
	ds, err := r.billing.Poll(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, r.billing.Ack(ds[0].LeaseID))
	ds, err = r.billing.Poll(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, r.billing.Fail(ds[0].LeaseID, errors.New("card declined\x1b[31m")))
	_, err = r.billing.Poll(ctx, 1) // 1003: leased by the owner
	require.NoError(t, err)
	return r
}

func (r *running) open(t *testing.T) {
	t.Helper()
	b, err := broker.Open(r.dir, queue.JSONCodec[order]())
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	r.b = b
}

// leasebus runs the command and returns its exit status, output and
// errors.
func leasebus(args ...string) (int, string, string) {
	var out, errOut strings.Builder
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func sum(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	m := map[string][32]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		m[p] = sha256.Sum256(data)
		return err
	}))
	return m
}

func TestReadingWhileTheOwnerRuns(t *testing.T) {
	r := startOwner(t)
	require.NoError(t, r.b.Sync())
	before := sum(t, r.dir)

	code, out, errOut := leasebus("inspect", r.dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "1 topic, 2 subscriptions")
	assert.Contains(t, out, "1 dead letter")
	lines := strings.Split(out, "\n")
	var billing, shipping string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "billing"):
			billing = strings.Join(strings.Fields(l), " ")
		case strings.Contains(l, "shipping"):
			shipping = strings.Join(strings.Fields(l), " ")
		}
	}
	// TOPIC SUBSCRIPTION HELD VISIBLE IN-FLIGHT DELAYED HELD-BACK OLDEST DEAD
	assert.Equal(t, "orders billing 1 0 1 0 0 - 1 (max-attempts 1)", billing)
	assert.True(t, strings.HasPrefix(shipping, "orders shipping 3 1 0 0 2 "), shipping)

	code, out, errOut = leasebus("peek", "-state", "in-flight", r.dir, "orders", "billing")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `{"order":1003,"card":"4242"}`)
	assert.Contains(t, out, "in-flight")

	code, out, errOut = leasebus("peek", "-json", "-limit", "2", r.dir, "orders", "shipping")
	require.Equal(t, 0, code, errOut)
	sc := bufio.NewScanner(strings.NewReader(out))
	n := 0
	for sc.Scan() {
		var l exportLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
		assert.Equal(t, "shipping", l.Subscription)
		n++
	}
	assert.Equal(t, 2, n)

	// Shipping holds 3: a page of 2 says there is more, a page of 3 does not.
	code, out, errOut = leasebus("peek", "-limit", "2", r.dir, "orders", "shipping")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "(more: -after ")
	code, out, errOut = leasebus("peek", "-limit", "3", r.dir, "orders", "shipping")
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, out, "(more")
	assert.Equal(t, 4, strings.Count(out, "\n"), "a header and 3 messages:\n%s", out)

	// One message by ID: the dead one, which shipping still holds.
	code, out, errOut = leasebus("peek", "-id", r.dead.ID.String(), r.dir, "orders", "shipping")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, 2, strings.Count(out, "\n"), "a header and the message:\n%s", out)
	assert.Contains(t, out, `{"order":1002,"card":"0000"}`)
	code, _, errOut = leasebus("peek", "-id", "order-2", r.dir, "orders", "shipping")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "not a message ID")

	code, out, errOut = leasebus("dead-letters", "-error", "declined", r.dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, r.dead.ID.String()+"/billing")
	assert.Contains(t, out, `"card": "0000"`, "JSON shown as JSON")
	assert.Contains(t, out, `"card declined\x1b[31m"`, "control characters quoted, never sent to the terminal")
	assert.NotContains(t, out, "\x1b")
	assert.Regexp(t, `attempt 1 +failed at \S+, held \S+: "card declined\\x1b\[31m"`, out, "each attempt, from the journal")

	code, out, errOut = leasebus("export", r.dir)
	require.Equal(t, 0, code, errOut)
	kinds := map[string]int{}
	sc = bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l exportLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
		kinds[l.Kind+" "+l.Subscription]++
	}
	assert.Equal(t, map[string]int{"message billing": 1, "message shipping": 3, "dead-letter billing": 1}, kinds)

	assert.Equal(t, before, sum(t, r.dir), "reading changed no byte")

	code, _, errOut = leasebus("redrive", "-all", r.dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "stop the process that holds it first")
}

func TestFixAPayloadRedriveAndTheOwnerAcksIt(t *testing.T) {
	r := startOwner(t)
	require.NoError(t, r.b.Close()) // the owner stops

	fixed := filepath.Join(t.TempDir(), "fixed.json")
	require.NoError(t, os.WriteFile(fixed, []byte(`{"order":1002,"card":"5555"}`), 0o644))
	code, out, errOut := leasebus("redrive", "-ref", r.dead.ID.String()+"/billing", "-payload", fixed, r.dir)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "redrove 1 dead letter\n", out)

	r.open(t) // the owner starts again
	billing, err := r.b.Subscribe("orders", "billing", broker.WithMaxAttempts(1))
	require.NoError(t, err)
	ds := billing.TryPoll(10)
	require.Len(t, ds, 1, "the fixed 1002; 1003's lease ended with the owner, on its last attempt: dead")
	assert.Equal(t, order{1002, "5555"}, ds[0].Payload)
	require.NoError(t, billing.Ack(ds[0].LeaseID))
	require.NoError(t, r.b.Sync())

	code, out, errOut = leasebus("inspect", r.dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "1 dead letter")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "billing") {
			assert.Equal(t, "orders billing 0 0 0 0 0 - 1 (max-attempts 1)", strings.Join(strings.Fields(l), " "))
		}
	}
	code, out, errOut = leasebus("dead-letters", "-subscription", "billing", r.dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "lease expired")
	assert.NotContains(t, out, "card declined")
}

func TestDiscardAndSalvageTakeTheLock(t *testing.T) {
	r := startOwner(t)
	require.NoError(t, r.b.Close())
	code, out, errOut := leasebus("discard", "-error", "declined", r.dir)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "discarded 1 dead letter\n", out)
	code, out, _ = leasebus("dead-letters", r.dir)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "lease expired", "1003, dead when the discard's Open ended the stopped owner's lease")
	code, out, errOut = leasebus("discard", "-all", r.dir)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "discarded 1 dead letter\n", out)
	code, out, _ = leasebus("dead-letters", r.dir)
	require.Equal(t, 0, code)
	assert.Equal(t, "0 dead letters\n", out)
	code, out, errOut = leasebus("salvage", r.dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "kept ")
	assert.Contains(t, out, "dropped 0 bytes")
}

func TestBadCommandLines(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{},
		{"frobnicate", dir},
		{"inspect"},
		{"inspect", dir, "extra"},
		{"peek", dir, "orders"},
		{"peek", "-state", "asleep", dir, "t", "s"},
		{"redrive", dir},
		{"discard", dir},
		{"redrive", "-reason", "boredom", dir},
		{"redrive", "-since", "yesterday", dir},
		{"redrive", "-ref", "nonsense", dir},
		{"redrive", "-payload", "x.json", "-all", dir},
		{"inspect", "-nope", dir},
	} {
		code, _, errOut := leasebus(args...)
		assert.Equal(t, 2, code, "%q: %s", args, errOut)
		assert.NotEmpty(t, errOut, "%q", args)
	}
	code, _, errOut := leasebus("inspect", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no journal there")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "a failed read left nothing behind")
	code, _, _ = leasebus("help")
	assert.Equal(t, 0, code)
}

// TestOneNameOnTwoTopics: a pattern subscription and an exact one share a
// name and both dead-letter one message. inspect counts each its own,
// -topic picks one, and a ref with its topic discards that one alone.
func TestOneNameOnTwoTopics(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.JSONCodec[order]())
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("orders.eu"))
	var subs []*broker.Subscription[order]
	for _, topic := range []string{"orders.eu", "orders.*"} {
		s, err := b.Subscribe(topic, "worker", broker.WithMaxAttempts(1))
		require.NoError(t, err)
		subs = append(subs, s)
	}
	m, err := b.Publish(ctx, "orders.eu", order{Order: 7})
	require.NoError(t, err)
	for _, s := range subs {
		ds := s.TryPoll(1)
		require.Len(t, ds, 1, s.Topic())
		require.NoError(t, s.Fail(ds[0].LeaseID, errors.New("boom on "+s.Topic())))
	}
	require.Len(t, b.DeadLetters(), 2)
	require.NoError(t, b.Close())

	code, out, errOut := leasebus("inspect", dir)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, 2, strings.Count(out, "(max-attempts 1)"), "each subscription counts its own letter:\n%s", out)

	code, out, errOut = leasebus("dead-letters", "-topic", "orders.*", dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "boom on orders.*")
	assert.NotContains(t, out, "boom on orders.eu")
	assert.Contains(t, out, "worker on orders.* (published to orders.eu)")

	code, out, errOut = leasebus("discard", "-ref", m.ID.String()+"/worker orders.eu", dir)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "discarded 1 dead letter\n", out)
	code, out, errOut = leasebus("dead-letters", dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "boom on orders.*", "the pattern's letter stays")
	assert.Contains(t, out, "1 dead letter")
}

// inspect says how each subscription paces its deliveries.
func TestInspectShowsLimits(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.JSONCodec[order]())
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("webhooks"))
	_, err = b.Subscribe("webhooks", "deliver", broker.WithRateLimit(10, time.Second),
		broker.WithKeyRateLimit(2, time.Second), broker.WithKeyConcurrency(2), broker.WithFairKeys())
	require.NoError(t, err)
	_, err = b.Subscribe("webhooks", "audit")
	require.NoError(t, err)
	require.NoError(t, b.Close())

	code, out, errOut := leasebus("inspect", dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "webhooks deliver paces its deliveries: at most 10 per 1s, at most 2 per 1s a key, 2 of a key at once, keys take turns\n")
	assert.NotContains(t, out, "audit paces")
}

func TestInspectShowsSchedules(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Open(filepath.Join(dir, "queue"), queue.JSONCodec[order]())
	require.NoError(t, err)
	require.NoError(t, b.Close())
	storePath := filepath.Join(dir, "schedules.json")
	code, _, errOut := leasebus("inspect", "-schedules", storePath, filepath.Join(dir, "queue"))
	assert.Equal(t, 1, code, "a store file that does not exist")
	assert.Contains(t, errOut, "schedules.json")

	st, err := schedule.NewFileStore(storePath)
	require.NoError(t, err)
	require.NoError(t, st.Save("nightly", time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)))
	require.NoError(t, st.Save("hourly", time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)))
	code, out, errOut := leasebus("inspect", "-schedules", storePath, filepath.Join(dir, "queue"))
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `SCHEDULE +LAST SLOT\s+hourly +2026-12-05T09:00:00Z\s+nightly +2026-12-05T02:00:00Z`, out)
}

// Over a directory its owner closed, peek shows what the next Open brings
// back: a message that was leased is visible again with its attempt
// spent, not in flight under a lease no one holds.
func TestPeekAfterACleanClose(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Open(dir, queue.JSONCodec[order]())
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic("orders"))
	sub, err := b.Subscribe("orders", "billing")
	require.NoError(t, err)
	_, err = b.Publish(ctx, "orders", order{Order: 7})
	require.NoError(t, err)
	_, err = sub.Poll(ctx, 1)
	require.NoError(t, err)
	code, out, errOut := leasebus("peek", dir, "orders", "billing")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "in-flight")
	assert.Contains(t, out, "(a running broker holds it: in-flight messages are its leases)")
	require.NoError(t, b.Close())

	code, out, errOut = leasebus("peek", dir, "orders", "billing")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.Equal(t, []string{"1", "visible", "1"}, strings.Fields(lines[1])[:3], "visible, attempt 1 spent: %s", out)
	code, out, errOut = leasebus("inspect", dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "(no broker holds it: shown as the next Open brings it back")

	b, err = broker.Open(dir, queue.JSONCodec[order]())
	require.NoError(t, err)
	defer b.Close()
	sub, err = b.Subscription("orders", "billing")
	require.NoError(t, err)
	ds, err := sub.Poll(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, 2, ds[0].Attempt, "as peek said")
}
