package outbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/outbox"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// The kill tests run the relay, then a pool with the inbox handler, as
// child processes (this test binary again) over one database and one
// durable broker directory, and kill them with SIGKILL after a random
// number of lines of output, again and again, until a run finishes. The
// relay prints "P payload" after each publish returned; the pool "E
// payload" after each handler's commit. Then: every committed row is in
// the queue once, each key's in commit order; every message's effect is
// in the database once.
const (
	killEnv   = "OUTBOX_KILL" // role|dialect|dsn|prefix|dir
	killRows  = 1500
	killKeys  = 10
	killBatch = 40
)

func killChild(arg string) {
	f := strings.Split(arg, "|")
	role, dsn, prefix, dir := f[0], f[2], f[3], f[4]
	dialect, driver := outbox.SQLite, "sqlite"
	if f[1] == "postgres" {
		dialect, driver = outbox.Postgres, "pgx"
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		fail(err)
	}
	b, err := broker.Open(dir, queue.StringCodec(), broker.WithSync(broker.SyncNone), broker.WithDedupWindow(time.Hour))
	if err != nil {
		fail(err)
	}
	sub, err := b.Subscription("orders", "billing")
	if err != nil {
		fail(err)
	}
	o, err := outbox.New[string](db, dialect, nil, outbox.WithTablePrefix(prefix))
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	switch role {
	case "relay":
		to := backend.Publisher[string](b)
		relay, err := o.NewRelay(wrap(to, func(payload string, publish func() error) error {
			if err := publish(); err != nil {
				return err
			}
			fmt.Printf("P %s\n", payload)
			return nil
		}), outbox.WithBatch(killBatch))
		if err != nil {
			fail(err)
		}
		if _, err := relay.RunOnce(ctx); err != nil {
			fail(err)
		}
	case "pool":
		h := o.Handler(func(ctx context.Context, tx *sql.Tx, d queue.Delivery[string]) error {
			q := "INSERT INTO " + prefix + "_effects (payload) VALUES (?)"
			if dialect == outbox.Postgres {
				q = strings.Replace(q, "?", "$1", 1)
			}
			_, err := tx.ExecContext(ctx, q, d.Payload)
			return err
		})
		p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
			if err := h(ctx, d); err != nil {
				return err
			}
			fmt.Printf("E %s\n", d.Payload)
			return nil
		}, poller.WithWorkers(4))
		if err != nil {
			fail(err)
		}
		if err := p.RunUntilIdle(ctx); err != nil {
			fail(err)
		}
	}
	if err := b.Close(); err != nil {
		fail(err)
	}
	fmt.Println("DONE")
	os.Exit(0)
}

func TestKillRelayAndHandlers(t *testing.T) {
	if arg := os.Getenv(killEnv); arg != "" {
		killChild(arg)
		return
	}
	if testing.Short() {
		t.Skip("kills child processes for a while")
	}
	each(t, func(t *testing.T, d database) {
		tmp := t.TempDir()
		dir := filepath.Join(tmp, "queue")
		dsn := os.Getenv(pgEnv)
		if d.dialect == outbox.SQLite {
			dsn = sqliteDSN(filepath.Join(tmp, "app.db"))
			db, err := sql.Open("sqlite", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			d.db = db
		}
		ctx := context.Background()
		o := open(t, d)
		effects := "CREATE TABLE " + d.prefix + "_effects (id INTEGER PRIMARY KEY AUTOINCREMENT, payload TEXT NOT NULL)"
		if d.dialect == outbox.Postgres {
			effects = "CREATE TABLE " + d.prefix + "_effects (id BIGSERIAL PRIMARY KEY, payload TEXT NOT NULL)"
		}
		if _, err := d.db.Exec(effects); err != nil {
			t.Fatal(err)
		}
		b, err := broker.Open(dir, queue.StringCodec())
		if err != nil {
			t.Fatal(err)
		}
		if err := b.CreateTopic("orders"); err != nil {
			t.Fatal(err)
		}
		// Short leases: a killed pool's are back soon, and a slow
		// handler's may lapse under it, which the inbox covers. One
		// message of a key at a time (the default): the effects of a key
		// are inserted in the order its messages were published.
		if _, err := b.Subscribe("orders", "billing", broker.WithVisibilityTimeout(300*time.Millisecond),
			broker.WithMaxAttempts(queue.UnlimitedAttempts), broker.WithMaxQueue(1<<20)); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		// Among the good rows, a poison row every 100: a topic name no
		// backend takes, written past Enqueue's checks as a row of an
		// older version's would be. The relay moves each aside, once.
		poison := rebind(d, "INSERT INTO "+d.prefix+" (topic, payload, dedup_id, enqueued_at) VALUES ('orders..bad', ?, ?, 0)")
		for i := 0; i < killRows; i += 100 {
			if err := o.InTx(ctx, func(tx *sql.Tx) error {
				for j := i; j < i+100 && j < killRows; j++ {
					if j == i+50 {
						if _, err := tx.ExecContext(ctx, poison, []byte(fmt.Sprint("poison-", j)), fmt.Sprint("poison-", j)); err != nil {
							return err
						}
					}
					if _, err := o.Enqueue(ctx, tx, "orders", fmt.Sprintf("k%d-%04d", j%killKeys, j), queue.WithKey(fmt.Sprint("k", j%killKeys))); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}

		r := rand.New(rand.NewPCG(44, uint64(d.dialect)))
		// The retry horizon, measured: from a row's first publish to its
		// last (a relay killed after publishing it and before deleting it
		// publishes it again when it starts again). The dedup window must
		// cover it; here it is how long a kill and a restart take.
		firstP, lastP := map[string]time.Time{}, map[string]time.Time{}
		arg := func(role string) string { return strings.Join([]string{role, d.name, dsn, d.prefix, dir}, "|") }
		for _, role := range []string{"relay", "pool"} {
			kills, lines := 0, 0
			for {
				kill := 1 + r.IntN(150)
				out, at, killed := killOutboxRun(t, arg(role), kill)
				lines += len(out)
				for i, ln := range out {
					if p, ok := strings.CutPrefix(ln, "P "); ok {
						if _, seen := firstP[p]; !seen {
							firstP[p] = at[i]
						}
						lastP[p] = at[i]
					}
				}
				if !killed {
					break
				}
				kills++
				if kills > 200 {
					t.Fatalf("%s: still not done after %d kills", role, kills)
				}
			}
			t.Logf("%s: killed %d times; %d lines of output", role, kills, lines)
		}
		var horizon time.Duration
		again := 0
		for p, first := range firstP {
			if h := lastP[p].Sub(first); h > 0 {
				again++
				horizon = max(horizon, h)
			}
		}
		t.Logf("relay: %d rows published again after a kill; the longest from first publish to last: %v", again, horizon)

		// Every committed row in the queue once, each key's in order: the
		// pool's effects, read from the database, say so (a row published
		// twice would be two messages, two effects).
		rows, err := d.db.Query("SELECT payload FROM " + d.prefix + "_effects ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		seen := map[string]int{}
		last := map[string]string{} // by key, the last payload seen
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				t.Fatal(err)
			}
			seen[p]++
			key, _, _ := strings.Cut(p, "-")
			if p < last[key] { // same key, same width: string order is enqueue order
				t.Fatalf("key %s: %s took effect after %s", key, p, last[key])
			}
			last[key] = p
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for j := range killRows {
			p := fmt.Sprintf("k%d-%04d", j%killKeys, j)
			if seen[p] != 1 {
				t.Fatalf("%s has %d effects, want 1", p, seen[p])
			}
		}
		if len(seen) != killRows {
			t.Fatalf("%d distinct effects, want %d", len(seen), killRows)
		}
		var left int
		if err := d.db.QueryRow("SELECT count(*) FROM " + d.prefix).Scan(&left); err != nil || left != 0 {
			t.Fatalf("%d rows left in the outbox (%v)", left, err)
		}
		dead, err := o.DeadRows(ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if want := (killRows + 99) / 100; len(dead) != want {
			t.Fatalf("%d dead rows, want the %d poison rows", len(dead), want)
		}
		for _, r := range dead {
			if r.Topic != "orders..bad" || r.DedupID != string(r.Payload) || !strings.Contains(r.Error, "empty dot-separated segment") {
				t.Fatalf("dead row %+v", r)
			}
		}
		b, err = broker.Open(dir, queue.StringCodec())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		sub, err := b.Subscription("orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		if st := sub.Stats(); st.Visible+st.Delayed+st.InFlight+st.HeldBack != 0 || len(b.DeadLetters()) != 0 {
			t.Fatalf("left in the queue: %+v, %d dead letters", st, len(b.DeadLetters()))
		}
	})
}

// killOutboxRun runs a child with arg and kills it after kill lines; it
// returns what it printed, when each line was read, and whether it was
// killed.
func killOutboxRun(t *testing.T, arg string, kill int) ([]string, []time.Time, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillRelayAndHandlers$")
	cmd.Env = append(os.Environ(), killEnv+"="+arg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var lines []string
	var at []time.Time
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		at = append(at, time.Now())
		if len(lines) == kill {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	if err == nil {
		if len(lines) == 0 || lines[len(lines)-1] != "DONE" {
			t.Fatalf("child exited 0 without DONE: %v", lines)
		}
		return lines, at, false
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v; stderr: %s", err, stderr.String())
	}
	return lines, at, true
}
