package outbox

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/leasebus/leasebus/backend"
)

// Dialect is the SQL a database speaks: SQLite or PostgreSQL.
type Dialect uint8

const (
	// SQLite, through any database/sql driver (the tests use the pure-Go
	// modernc.org/sqlite). SQLite runs one write transaction at a time,
	// so the relay and the enqueues take turns; give the connection a
	// busy timeout (modernc: "?_pragma=busy_timeout(5000)") so that a
	// writer waits for its turn rather than failing with SQLITE_BUSY.
	SQLite Dialect = iota + 1
	// Postgres, through any database/sql driver (the tests use pgx's
	// stdlib driver, "pgx").
	Postgres
)

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// tableName is what a table name may be: it is written into SQL.
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,50}$`)

// sqlText is one dialect's statements over one set of table names.
type sqlText struct {
	schema     []string
	columns    []column // added to a table made before they were (Migrate)
	insert     string
	relayLock  string // lets one relay batch run at a time ("" when the dialect needs none)
	selectRows string
	deleteRows func(n int) string
	inboxMark  string
	inboxPrune string
	deadMove   string // copies a row to the dead-row table, with its error and time
	deadList   string
	deadCount  string
	requeue    func(n int) string // copies dead rows back to the outbox, as new rows
	deadDelete func(n int) string
	notify     string // wakes the relays of every process at commit ("" when the dialect has no NOTIFY)
	channel    string // the LISTEN/NOTIFY channel
}

func newSQL(d Dialect, prefix string) (*sqlText, error) {
	if !tableName.MatchString(prefix) {
		return nil, invalid("table prefix %q: want [a-z_][a-z0-9_]*, at most 51 characters", prefix)
	}
	outbox, inbox, dead := prefix, prefix+"_inbox", prefix+"_dead"
	ph := func(i int) string { return "?" }
	if d == Postgres {
		ph = func(i int) string { return "$" + strconv.Itoa(i) }
	}
	phs := func(from, n int) string {
		p := make([]string, n)
		for i := range p {
			p[i] = ph(from + i)
		}
		return strings.Join(p, ", ")
	}
	s := &sqlText{channel: prefix}
	// The two schemas differ in their column types alone.
	var id, blob, small, big string
	switch d {
	case SQLite:
		id, blob, small, big = "INTEGER", "BLOB", "INTEGER", "INTEGER"
	case Postgres:
		id, blob, small, big = "BIGSERIAL", "BYTEA", "SMALLINT", "BIGINT"
		// One relay batch runs at a time, so that a key's rows are
		// published in ID order (its enqueues take turns too: see
		// insert). The lock ends with the batch's transaction.
		s.relayLock = `SELECT pg_advisory_xact_lock(hashtext(` + ph(1) + `))`
	default:
		return nil, invalid("dialect %v: want SQLite or Postgres", d)
	}
	s.schema = []string{
		`CREATE TABLE IF NOT EXISTS ` + outbox + ` (
	id          ` + id + ` PRIMARY KEY,
	topic       TEXT NOT NULL,
	payload     ` + blob + ` NOT NULL,
	msg_key     TEXT NOT NULL DEFAULT '',
	priority    ` + small + ` NOT NULL DEFAULT 0,
	headers     TEXT NOT NULL DEFAULT '',
	delay_ns    ` + big + ` NOT NULL DEFAULT 0,
	dedup_id    TEXT NOT NULL DEFAULT '',
	enqueued_at ` + big + ` NOT NULL,
	ttl_ns      ` + big + ` NOT NULL DEFAULT 0
)`,
		`CREATE TABLE IF NOT EXISTS ` + inbox + ` (
	message_id   TEXT PRIMARY KEY,
	processed_at ` + big + ` NOT NULL
)`,
		`CREATE INDEX IF NOT EXISTS ` + inbox + `_processed_at ON ` + inbox + ` (processed_at)`,
		`CREATE TABLE IF NOT EXISTS ` + dead + ` (
	id          ` + big + ` PRIMARY KEY,
	topic       TEXT NOT NULL,
	payload     ` + blob + ` NOT NULL,
	msg_key     TEXT NOT NULL DEFAULT '',
	priority    ` + small + ` NOT NULL DEFAULT 0,
	headers     TEXT NOT NULL DEFAULT '',
	delay_ns    ` + big + ` NOT NULL DEFAULT 0,
	dedup_id    TEXT NOT NULL DEFAULT '',
	enqueued_at ` + big + ` NOT NULL,
	ttl_ns      ` + big + ` NOT NULL DEFAULT 0,
	error       TEXT NOT NULL,
	dead_at     ` + big + ` NOT NULL
)`,
	}
	cols := `(topic, payload, msg_key, priority, headers, delay_ns, dedup_id, enqueued_at, ttl_ns)`
	s.insert = `INSERT INTO ` + outbox + ` ` + cols + ` VALUES (` + phs(1, 9) + `)`
	if d == Postgres {
		// One round trip: the key's lock (taken in the FROM clause, so
		// before the row's ID is drawn), the insert, and the NOTIFY that
		// Postgres sends at commit. $10 is the lock's name ("" for no
		// key: no lock), $11 the channel.
		s.insert = `WITH ins AS (INSERT INTO ` + outbox + ` ` + cols + `
	SELECT ` + phs(1, 9) + ` FROM (SELECT CASE WHEN ` + ph(10) + ` = '' THEN NULL ELSE pg_advisory_xact_lock(hashtext(` + ph(10) + `)) END) AS key_lock
	RETURNING 1)
SELECT pg_notify(` + ph(11) + `, '') FROM ins`
	}
	s.selectRows = `SELECT id, topic, payload, msg_key, priority, headers, delay_ns, dedup_id, enqueued_at, ttl_ns FROM ` + outbox + ` ORDER BY id LIMIT ` + ph(1)
	s.deleteRows = func(n int) string { return `DELETE FROM ` + outbox + ` WHERE id IN (` + phs(1, n) + `)` }
	s.inboxMark = `INSERT INTO ` + inbox + ` (message_id, processed_at) VALUES (` + phs(1, 2) + `) ON CONFLICT (message_id) DO NOTHING`
	s.inboxPrune = `DELETE FROM ` + inbox + ` WHERE processed_at < ` + ph(1)
	rowCols := `id, topic, payload, msg_key, priority, headers, delay_ns, dedup_id, enqueued_at, ttl_ns`
	s.deadMove = `INSERT INTO ` + dead + ` (` + rowCols + `, error, dead_at) SELECT ` + rowCols + `, ` + ph(1) + `, ` + ph(2) + ` FROM ` + outbox + ` WHERE id = ` + ph(3)
	s.deadList = `SELECT ` + rowCols + `, error, dead_at FROM ` + dead + ` WHERE id > ` + ph(1) + ` ORDER BY id LIMIT ` + ph(2)
	s.deadCount = `SELECT count(*) FROM ` + dead
	s.requeue = func(n int) string {
		return `INSERT INTO ` + outbox + ` ` + cols + ` SELECT topic, payload, msg_key, priority, headers, delay_ns, dedup_id, enqueued_at, ttl_ns FROM ` + dead + ` WHERE id IN (` + phs(1, n) + `) ORDER BY id`
	}
	if d == Postgres {
		s.notify = `SELECT pg_notify(` + ph(1) + `, '')`
	}
	s.columns = []column{{outbox, "ttl_ns", big + ` NOT NULL DEFAULT 0`}, {dead, "ttl_ns", big + ` NOT NULL DEFAULT 0`}}
	s.deadDelete = func(n int) string { return `DELETE FROM ` + dead + ` WHERE id IN (` + phs(1, n) + `)` }
	return s, nil
}

// column is a column a table gained after its first version: Migrate adds
// it to a table that lacks it.
type column struct{ table, name, def string }

func invalid(format string, args ...any) error {
	return backend.Invalid("outbox: %s", fmt.Sprintf(format, args...))
}
