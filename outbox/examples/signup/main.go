// Command signup shows the outbox end to end on SQLite: each signup
// inserts its user and enqueues a welcome email in one transaction (a
// signup that fails validation rolls back, and no email is ever sent for
// it); a relay publishes what committed to a broker; a worker pool sends
// each email with the inbox handler, which records the email and the
// message's ID in one transaction, so a redelivery sends nothing twice.
//
//	go run ./outbox/examples/signup
//	go run ./outbox/examples/signup -db /tmp/signup.db   # keep the database
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/outbox"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// welcome is the message a signup enqueues.
type welcome struct {
	Email string `json:"email"`
}

var errInvalidEmail = errors.New("invalid email")

func main() {
	path := flag.String("db", "", "the SQLite file (default: a new one in a temporary directory)")
	flag.Parse()
	if *path == "" {
		dir, err := os.MkdirTemp("", "signup")
		if err != nil {
			fmt.Fprintln(os.Stderr, "signup:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
		*path = filepath.Join(dir, "app.db")
	}
	if err := run(context.Background(), *path, []string{"ada@example.com", "not-an-email", "grace@example.com", "edsger@example.com"}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "signup:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string, signups []string, out io.Writer) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS users (email TEXT PRIMARY KEY)`,
		`CREATE TABLE IF NOT EXISTS emails_sent (email TEXT NOT NULL, sent_at INTEGER NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	o, err := outbox.New[welcome](db, outbox.SQLite, nil)
	if err != nil {
		return err
	}
	if err := o.Migrate(ctx); err != nil {
		return err
	}

	// The signups: the user's row and the welcome email commit together.
	for _, email := range signups {
		err := o.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO users (email) VALUES (?)`, email); err != nil {
				return err
			}
			if _, err := o.Enqueue(ctx, tx, "welcome", welcome{Email: email}, queue.WithKey(email)); err != nil {
				return err
			}
			if !strings.Contains(email, "@") { // found out after the writes: all of it rolls back
				return fmt.Errorf("%q: %w", email, errInvalidEmail)
			}
			return nil
		})
		switch {
		case errors.Is(err, errInvalidEmail):
			fmt.Fprintf(out, "signup %s refused: rolled back, no email will be sent\n", email)
		case err != nil:
			return err
		default:
			fmt.Fprintf(out, "signup %s committed\n", email)
		}
	}

	// The relay: what committed, to the broker.
	b, err := broker.New[welcome]()
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.CreateTopic("welcome"); err != nil {
		return err
	}
	sub, err := b.Subscribe("welcome", "mailer")
	if err != nil {
		return err
	}
	relay, err := o.NewRelay(b)
	if err != nil {
		return err
	}
	n, err := relay.RunOnce(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "relayed %d messages\n", n)

	// The mailer: each email once, recorded with the message's ID.
	send := o.Handler(func(ctx context.Context, tx *sql.Tx, d queue.Delivery[welcome]) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO emails_sent (email, sent_at) VALUES (?, ?)`, d.Payload.Email, time.Now().UnixNano())
		return err
	})
	pool, err := poller.New(sub, send)
	if err != nil {
		return err
	}
	if err := pool.RunUntilIdle(ctx); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT email FROM emails_sent ORDER BY email`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var email string
		if err := rows.Scan(&email); err != nil {
			return err
		}
		fmt.Fprintf(out, "welcome email sent to %s\n", email)
	}
	return rows.Err()
}
