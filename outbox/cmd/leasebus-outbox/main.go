// Command leasebus-outbox shows and acts on an outbox's dead rows from the
// shell: the rows its relay moved aside because their backend refused
// them for good, or they did not decode.
//
//	leasebus-outbox dead    -db DSN [-prefix P] [-after ID] [-limit N] [-json]   the dead rows, oldest first
//	leasebus-outbox requeue -db DSN [-prefix P] (ID... | -all)                   put them back in the outbox
//	leasebus-outbox discard -db DSN [-prefix P] (ID... | -all)                   delete them for good
//
// DSN is a PostgreSQL URL (postgres://…) or a SQLite file's path. The
// prefix is the outbox's table prefix (outbox.WithTablePrefix; default
// leasebus_outbox). The exit status is 0 on success, 1 on a failure, 2
// on bad usage.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite", pure Go

	"github.com/leasebus/leasebus/outbox"
	"github.com/leasebus/leasebus/queue"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

var errUsage = errors.New("usage")

const usage = `usage:
  leasebus-outbox dead    -db DSN [-prefix P] [-after ID] [-limit N] [-json]
  leasebus-outbox requeue -db DSN [-prefix P] (ID... | -all)
  leasebus-outbox discard -db DSN [-prefix P] (ID... | -all)
DSN: a PostgreSQL URL (postgres://...) or a SQLite file's path`

// run runs the command args and returns its exit status.
func run(args []string, out, errOut io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(errOut, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "dead":
		err = dead(args[1:], out)
	case "requeue", "discard":
		err = act(args[0], args[1:], out)
	default:
		err = fmt.Errorf("%w: no command %q", errUsage, args[0])
	}
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(errOut, "leasebus-outbox: %v\n%s\n", err, usage)
		return 2
	case err != nil:
		fmt.Fprintf(errOut, "leasebus-outbox: %v\n", err)
		return 1
	}
	return 0
}

// target is the flags that name an outbox.
type target struct{ dsn, prefix *string }

func targetFlags(fs *flag.FlagSet) target {
	return target{fs.String("db", "", "a PostgreSQL URL (postgres://...) or a SQLite file's path"),
		fs.String("prefix", "leasebus_outbox", "the outbox's table prefix")}
}

// open opens the outbox t names, and returns it with its database's close.
func (t target) open() (*outbox.Outbox[[]byte], func() error, error) {
	if *t.dsn == "" {
		return nil, nil, fmt.Errorf("%w: -db is required", errUsage)
	}
	driver, dialect := "sqlite", outbox.SQLite
	if strings.HasPrefix(*t.dsn, "postgres://") || strings.HasPrefix(*t.dsn, "postgresql://") {
		driver, dialect = "pgx", outbox.Postgres
	} else if _, err := os.Stat(*t.dsn); err != nil {
		return nil, nil, fmt.Errorf("SQLite database %s: %w", *t.dsn, err) // never make an empty one
	}
	db, err := sql.Open(driver, *t.dsn)
	if err != nil {
		return nil, nil, err
	}
	o, err := outbox.New(db, dialect, queue.BytesCodec(), outbox.WithTablePrefix(*t.prefix))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return o, db.Close, nil
}

func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

func dead(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dead", flag.ContinueOnError)
	t := targetFlags(fs)
	after := fs.Int64("after", 0, "only rows after this ID (the last ID of the page before)")
	limit := fs.Int("limit", 50, "at most this many")
	asJSON := fs.Bool("json", false, "print JSON lines")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: dead takes no arguments", errUsage)
	}
	if *limit < 1 {
		return fmt.Errorf("%w: -limit %d, must be >= 1", errUsage, *limit)
	}
	o, closeDB, err := t.open()
	if err != nil {
		return err
	}
	defer closeDB()
	ctx := context.Background()
	n, err := o.DeadRowCount(ctx)
	if err != nil {
		return err
	}
	rows, err := o.DeadRows(ctx, *after, *limit+1)
	if err != nil {
		return err
	}
	more := len(rows) > *limit
	rows = rows[:min(len(rows), *limit)]
	if *asJSON {
		enc := json.NewEncoder(out)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintln(out, count(int(n), "dead row"))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOPIC\tKEY\tDEDUP ID\tMOVED ASIDE\tWHY\tPAYLOAD")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, oneLine(r.Topic), orDash(oneLine(r.Key)), oneLine(r.DedupID),
			r.DeadAt.UTC().Format(time.RFC3339), oneLine(r.Error), oneLine(preview(r.Payload)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(out, "(more: -after %d)\n", rows[len(rows)-1].ID)
	}
	return nil
}

func act(cmd string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	t := targetFlags(fs)
	all := fs.Bool("all", false, "every dead row")
	if err := parse(fs, args); err != nil {
		return err
	}
	var ids []int64
	for _, a := range fs.Args() {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: %q is not a row ID", errUsage, a)
		}
		ids = append(ids, id)
	}
	if *all == (len(ids) > 0) {
		return fmt.Errorf("%w: say which dead rows: their IDs, or -all", errUsage)
	}
	o, closeDB, err := t.open()
	if err != nil {
		return err
	}
	defer closeDB()
	ctx := context.Background()
	if *all {
		for after := int64(0); ; {
			rows, err := o.DeadRows(ctx, after, 1000)
			if err != nil {
				return err
			}
			for _, r := range rows {
				ids = append(ids, r.ID)
			}
			if len(rows) < 1000 {
				break
			}
			after = rows[len(rows)-1].ID
		}
	}
	f, verb := o.RequeueDeadRows, "requeued"
	if cmd == "discard" {
		f, verb = o.DiscardDeadRows, "discarded"
	}
	n, err := f(ctx, ids...)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s %s\n", verb, count(int(n), "dead row"))
	return nil
}

// count says n of a thing, in the plural when n is not 1.
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// preview is a payload's first bytes, as text.
func preview(p []byte) string {
	if len(p) > 60 {
		return string(p[:60]) + "…"
	}
	return string(p)
}

// oneLine keeps a text to one line of a table, and a terminal's escape
// sequences out of it: a text with a character that is not printable is
// shown quoted.
func oneLine(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}
