package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/outbox"
)

// An outbox is what the console shows dead rows of.
var _ console.Outbox = (*outbox.Outbox[string])(nil)

func leasebusOutbox(args ...string) (int, string, string) {
	var out, errOut strings.Builder
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Over a SQLite outbox with two rows its relay moved aside: dead lists
// them, requeue puts one back, discard deletes the other; bad usage
// exits 2 and says so.
func TestDeadRequeueDiscard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	o, err := outbox.New[string](db, outbox.SQLite, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"orders..x", "or ders"} {
		if err := o.InTx(ctx, func(tx *sql.Tx) error {
			_, err := o.Enqueue(ctx, tx, topic, "payload of "+topic)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := brokertest.New[string](t)
	relay, err := o.NewRelay(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := leasebusOutbox("dead", "-db", path)
	if code != 0 || !strings.Contains(out, "2 dead rows") || !strings.Contains(out, "orders..x") || !strings.Contains(out, "or ders") {
		t.Fatalf("dead: %d %q %q", code, out, errOut)
	}
	if !strings.Contains(out, "empty dot-separated segment") || !strings.Contains(out, "payload of orders..x") {
		t.Fatalf("dead: %q", out)
	}
	code, out, _ = leasebusOutbox("dead", "-db", path, "-limit", "1")
	if code != 0 || !strings.Contains(out, "(more: -after 1)") {
		t.Fatalf("dead -limit 1: %d %q", code, out)
	}
	code, out, _ = leasebusOutbox("dead", "-db", path, "-json")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"Topic":"orders..x"`) {
		t.Fatalf("dead -json: %d %q", code, out)
	}
	code, out, errOut = leasebusOutbox("requeue", "-db", path, "1")
	if code != 0 || out != "requeued 1 dead row\n" {
		t.Fatalf("requeue: %d %q %q", code, out, errOut)
	}
	code, out, errOut = leasebusOutbox("discard", "-db", path, "-all")
	if code != 0 || out != "discarded 1 dead row\n" {
		t.Fatalf("discard -all: %d %q %q", code, out, errOut)
	}
	if n, err := o.DeadRowCount(ctx); err != nil || n != 0 {
		t.Fatalf("%d dead rows left (%v)", n, err)
	}
	var left int
	if err := db.QueryRow("SELECT count(*) FROM leasebus_outbox").Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d rows in the outbox (%v), want the one requeued", left, err)
	}
	for _, bad := range [][]string{{}, {"nope"}, {"dead"}, {"requeue", "-db", path}, {"requeue", "-db", path, "-all", "1"}, {"discard", "-db", path, "x"}, {"dead", "-db", path, "-limit", "0"}} {
		if code, _, errOut := leasebusOutbox(bad...); code != 2 || !strings.Contains(errOut, "usage") {
			t.Errorf("%q: exit %d, %q; want 2 and the usage", bad, code, errOut)
		}
	}
	if code, _, errOut := leasebusOutbox("dead", "-db", filepath.Join(t.TempDir(), "missing.db")); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("a missing SQLite file: exit %d, %q", code, errOut)
	}
}
