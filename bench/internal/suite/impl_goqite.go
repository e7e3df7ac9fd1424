package suite

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"maragu.dev/goqite"
	_ "modernc.org/sqlite" // the pure-Go driver; goqite brings none ("bring your own SQL driver")
)

// schema_sqlite.sql is goqite v0.4.0's own schema, copied from its module.
//
//go:embed schema_sqlite.sql
var goqiteSchema string

// goqitePollInterval is how often a consumer with nothing to do asks again
// (goqite's ReceiveAndWait polls; it has no wake-up).
const goqitePollInterval = time.Millisecond

const goqiteNotes = "one sql.DB connection (SetMaxOpenConns(1), as goqite's README); " +
	"Receive is one message per transaction, so a batch is up to max Receives; Delete per message; " +
	"an idle consumer polls every 1 ms (ReceiveAndWait); fan-out is one queue per subscription, " +
	"published in one transaction; timestamps have 1 ms resolution"

// GoqiteMem is goqite on an in-memory SQLite database (modernc.org/sqlite),
// opened with the DSN options of goqite's README.
var GoqiteMem = Impl{
	Name:    "goqite-mem",
	Module:  "maragu.dev/goqite v0.4.0 + modernc.org/sqlite v1.62.0, :memory:",
	Notes:   goqiteNotes,
	peer:    true,
	New:     func(s Setup) (System, error) { return newGoqite(s, false) },
	skip:    goqiteSkip,
	maxMsgs: goqiteMax,
	once:    goqiteOnce,
}

// GoqiteWAL is goqite on a SQLite file in WAL mode, in a temporary
// directory, with synchronous=NORMAL (WAL's usual pairing: durable against
// a process crash, not a power cut).
var GoqiteWAL = Impl{
	Name:    "goqite-wal",
	Module:  "maragu.dev/goqite v0.4.0 + modernc.org/sqlite v1.62.0, WAL file, synchronous=NORMAL",
	Notes:   goqiteNotes,
	peer:    true,
	New:     func(s Setup) (System, error) { return newGoqite(s, true) },
	skip:    goqiteSkip,
	maxMsgs: goqiteMax,
	once:    goqiteOnce,
}

func goqiteSkip(w Workload, short bool) string {
	switch w.Bench {
	case Exp.Bench:
		return "timeouts are wall-clock text columns (1 ms resolution); no clock to inject"
	}
	return ""
}

// goqiteMax caps goqite's runs: a message costs it hundreds of
// microseconds (three SQL transactions), three orders of magnitude more
// than the in-memory queues, so its runs are shorter to keep the suite's
// time. The per-message numbers stay comparable; the table says so.
func goqiteMax(w Workload, short bool) int {
	n := 1000
	if short {
		n = 500
	}
	switch w.Bench {
	case Mem.Bench:
		return 0
	case W4.Bench:
		return n / 5
	case W2.Bench, W3.Bench, S10.Bench, S100.Bench:
		return 2 * n
	}
	return n
}

// goqiteOnce: a 10^6-row backlog takes 10–20 s to insert (the random text
// primary key), so Depth/1e6 runs once per process.
func goqiteOnce(w Workload) bool { return w.Bench == D1e6.Bench }

type goqiteSystem struct {
	db     *sql.DB
	dir    string
	queues []*goqite.Queue
}

func newGoqite(s Setup, wal bool) (System, error) {
	dsn := ":memory:?_journal=WAL&_timeout=5000&_fk=true" // goqite's README
	var dir string
	if wal {
		var err error
		if dir, err = os.MkdirTemp("", "goqite-bench-"); err != nil {
			return nil, err
		}
		dsn = "file:" + filepath.Join(dir, "q.db") + "?_journal=WAL&_timeout=5000&_fk=true&_sync=NORMAL"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // :memory: is per connection; a file would only see SQLITE_BUSY with more
	db.SetMaxIdleConns(1)
	g := &goqiteSystem{db: db, dir: dir}
	if _, err := db.Exec(goqiteSchema); err != nil {
		g.Close()
		return nil, err
	}
	for i := range s.Subs {
		g.queues = append(g.queues, goqite.New(goqite.NewOpts{DB: db, Name: fmt.Sprint("s", i), Timeout: visibility(s)}))
	}
	return g, nil
}

func (g *goqiteSystem) Publish(ctx context.Context, p []byte) error {
	if len(g.queues) == 1 {
		return g.queues[0].Send(ctx, goqite.Message{Body: p})
	}
	return g.inTx(ctx, func(tx *sql.Tx) error {
		for _, q := range g.queues {
			if err := q.SendTx(ctx, tx, goqite.Message{Body: p}); err != nil {
				return err
			}
		}
		return nil
	})
}

// Prefill sends n messages to every queue in one transaction. Above
// bulkRows it inserts the rows with one SQL statement, the rows that Send
// writes (goqite's column defaults: visible now, received 0) but with
// random bodies: Send's own statement costs ~100 µs a row here, and a 10^6
// backlog would take minutes to build.
func (g *goqiteSystem) Prefill(ctx context.Context, n int, payload func(int) []byte) error {
	return g.inTx(ctx, func(tx *sql.Tx) error {
		if n > bulkRows {
			for i := range g.queues {
				_, err := tx.ExecContext(ctx, `with recursive c(x) as (select 1 union all select x+1 from c where x < ?)
					insert into goqite (queue, body) select ?, randomblob(?) from c`, n, fmt.Sprint("s", i), PayloadSize)
				if err != nil {
					return err
				}
			}
			return nil
		}
		for i := range n {
			for _, q := range g.queues {
				if err := q.SendTx(ctx, tx, goqite.Message{Body: payload(i)}); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

const bulkRows = 10_000

func (g *goqiteSystem) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// HeldBytes reports the database's pages (plus the WAL file on disk).
func (g *goqiteSystem) HeldBytes() (int64, string, error) {
	var pages, size int64
	if err := g.db.QueryRow("pragma page_count").Scan(&pages); err != nil {
		return 0, "", err
	}
	if err := g.db.QueryRow("pragma page_size").Scan(&size); err != nil {
		return 0, "", err
	}
	if g.dir == "" {
		return pages * size, "SQLite pages (outside the Go heap)", nil
	}
	held := pages * size
	if fi, err := os.Stat(filepath.Join(g.dir, "q.db-wal")); err == nil {
		held += fi.Size()
	}
	return held, "SQLite pages + WAL on disk", nil
}

func (g *goqiteSystem) Consumer(sub int) Consumer { return &goqiteConsumer{q: g.queues[sub]} }

func (g *goqiteSystem) Close() error {
	err := g.db.Close()
	if g.dir != "" {
		os.RemoveAll(g.dir)
	}
	return err
}

type goqiteConsumer struct {
	q   *goqite.Queue
	ids []goqite.ID
}

func (c *goqiteConsumer) Take(ctx context.Context, max int, fn func([]byte)) (int, error) {
	m, err := c.q.ReceiveAndWait(ctx, goqitePollInterval)
	if err != nil {
		return 0, err
	}
	c.ids = append(c.ids[:0], m.ID)
	if fn != nil {
		fn(m.Body)
	}
	for len(c.ids) < max {
		m, err := c.q.Receive(ctx)
		if err != nil {
			return 0, err
		}
		if m == nil {
			break
		}
		c.ids = append(c.ids, m.ID)
		if fn != nil {
			fn(m.Body)
		}
	}
	for i, id := range c.ids {
		if err := c.q.Delete(ctx, id); err != nil {
			return i, err
		}
	}
	return len(c.ids), nil
}
