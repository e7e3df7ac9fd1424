package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite", pure Go

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/outbox"
	"github.com/leasebus/leasebus/queue"
)

// pgEnv names the Postgres the tests use: a URL such as
// postgres://leasebus@127.0.0.1:55432/postgres?sslmode=disable. .ci/run
// starts a cluster and sets it; without it the Postgres cases skip,
// saying so.
const pgEnv = "LEASEBUS_TEST_POSTGRES"

// hangGuard bounds every wait, so that a bug fails a test rather than
// hanging it. It is never a timing assertion.
const hangGuard = time.Minute

// database is one database the tests run against.
type database struct {
	name    string
	dialect outbox.Dialect
	db      *sql.DB
	prefix  string // this test's tables
}

var tableSeq atomic.Int64

// sqliteDSN is a SQLite file that waits its turn to write.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
}

// databases returns SQLite (a file in a temporary directory) and, when
// pgEnv is set, Postgres, each with tables of this test's own.
func databases(t testing.TB) []database {
	t.Helper()
	prefix := fmt.Sprintf("t%d_%d", os.Getpid(), tableSeq.Add(1))
	lite, err := sql.Open("sqlite", sqliteDSN(filepath.Join(t.TempDir(), "app.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	dbs := []database{{"sqlite", outbox.SQLite, lite, prefix}}
	if url := os.Getenv(pgEnv); url != "" {
		pg, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, tbl := range []string{prefix, prefix + "_inbox", prefix + "_effects"} {
				_, _ = pg.Exec("DROP TABLE IF EXISTS " + tbl)
			}
			pg.Close()
		})
		dbs = append(dbs, database{"postgres", outbox.Postgres, pg, prefix})
	} else if !t.Skipped() {
		t.Logf("Postgres skipped: set %s to a database URL (bash .ci/run starts one)", pgEnv)
	}
	return dbs
}

// each runs f against each database, as a subtest.
func each(t *testing.T, f func(t *testing.T, d database)) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) { f(t, d) })
	}
}

// open returns d's outbox of strings, migrated.
func open(t testing.TB, d database, opts ...outbox.Option) *outbox.Outbox[string] {
	t.Helper()
	o, err := outbox.New[string](d.db, d.dialect, nil, append([]outbox.Option{outbox.WithTablePrefix(d.prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return o
}

// rebind writes a statement with '?' placeholders in d's dialect.
func rebind(d database, q string) string {
	if d.dialect != outbox.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// pubFunc is a backend.Publisher whose Publish is a func: a test's faults
// around a real publisher (its CheckPublish is that publisher's).
type pubFunc[T any] struct {
	backend.PublishChecker
	publish func(ctx context.Context, topic string, payload T, opts ...queue.PublishOption) error
}

func (p pubFunc[T]) Publish(ctx context.Context, topic string, payload T, opts ...queue.PublishOption) (queue.Message[T], error) {
	return queue.Message[T]{Topic: topic, Payload: payload}, p.publish(ctx, topic, payload, opts...)
}

// wrap returns a publisher that runs f around pub's Publish: f gets the
// publish's payload and a func that publishes it with pub.
func wrap[T any](pub backend.Publisher[T], f func(payload T, publish func() error) error) backend.Publisher[T] {
	return pubFunc[T]{pub, func(ctx context.Context, topic string, payload T, opts ...queue.PublishOption) error {
		return f(payload, func() error { _, err := pub.Publish(ctx, topic, payload, opts...); return err })
	}}
}
