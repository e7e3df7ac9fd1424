package pgleasebus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Errors of this package, matched with errors.Is.
var (
	// ErrSchemaNewer: the database's leasebus schema is of a later version
	// than this package knows; Open refuses it and changes nothing.
	ErrSchemaNewer = errors.New("pgleasebus: the database's schema is newer than this package")
	// ErrConfigMismatch: Subscribe found the subscription with other
	// settings than an option asked for (see WithUpdate).
	ErrConfigMismatch = errors.New("pgleasebus: the subscription's stored settings differ")
	// ErrTooLarge is matched by the error of a publish whose message
	// (its encoded payload and headers) is over the bus's limit
	// (WithMaxMessageSize); it matches queue.ErrInvalidArgument too.
	ErrTooLarge = fmt.Errorf("pgleasebus: message over the bus's size limit: %w", queue.ErrInvalidArgument)
)

// DefaultMaxMessageSize is the largest message a bus takes unless
// WithMaxMessageSize says otherwise: 64 MiB.
const DefaultMaxMessageSize = 64 << 20

// Bus is leasebus on a PostgreSQL database: its topics and subscriptions
// are rows in one Postgres schema, shared by every process that opens the
// bus on the same database. Its methods are safe for concurrent use.
type Bus struct {
	pool   *pgxpool.Pool
	cfg    busConfig
	q      *sqlText
	closed chan struct{}
	done   sync.WaitGroup // the listener
	notify *notifier

	mu      sync.Mutex                      // guards the two below
	handles map[string]map[*waiter]struct{} // by topic: this process's subscriptions' waiters
	isShut  bool
}

// Option configures a Bus (Open).
type Option struct{ apply func(*busConfig) }

type busConfig struct {
	clk         clock.Clock
	schema      string
	dedupWindow time.Duration
	maxSize     int
	pollEvery   time.Duration
	notifyEvery time.Duration
	noListen    bool
	err         error
}

func (c *busConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithClock sets the clock the bus reads: every lease's deadline, delay,
// backoff, TTL and dedup window is decided from its reading, passed to the
// database as a parameter (no statement reads now()), so a test drives a
// real PostgreSQL with a clock.Mock. Default: the real clock.
func WithClock(c clock.Clock) Option {
	return Option{func(cfg *busConfig) {
		if c == nil {
			cfg.fail(backend.Invalid("WithClock: nil clock"))
		}
		cfg.clk = c
	}}
}

// schemaName is what a Postgres schema of the bus may be called: it is
// written into SQL.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// WithSchema keeps the bus's tables in the Postgres schema name (default
// "leasebus"), created if missing: lower-case letters, digits and '_'.
// Two buses in one database with different schemas share nothing.
func WithSchema(name string) Option {
	return Option{func(cfg *busConfig) {
		if !schemaName.MatchString(name) {
			cfg.fail(backend.Invalid("WithSchema(%q): want [a-z_][a-z0-9_]*, at most 63 characters", name))
		}
		cfg.schema = name
	}}
}

// WithDedupWindow sets how long after a publish with a dedup ID
// (queue.WithDedupID) another publish of the ID to its topic stores
// nothing (default five minutes, as SQS FIFO's); d > 0.
func WithDedupWindow(d time.Duration) Option {
	return Option{func(cfg *busConfig) {
		if d <= 0 {
			cfg.fail(backend.Invalid("WithDedupWindow(%v): must be > 0", d))
		}
		cfg.dedupWindow = d
	}}
}

// WithMaxMessageSize sets the largest message, in bytes of its encoded
// payload and headers, a publish takes (default DefaultMaxMessageSize); a
// larger one is refused with an error matching ErrTooLarge, before it is
// sent. A row holds up to a gigabyte, but every Poll that leases it
// carries it whole. 1 <= n <= 1 GiB.
func WithMaxMessageSize(n int) Option {
	return Option{func(cfg *busConfig) {
		if n < 1 || n > 1<<30 {
			cfg.fail(backend.Invalid("WithMaxMessageSize(%d): must be in [1, 1 GiB]", n))
		}
		cfg.maxSize = n
	}}
}

// WithPollInterval sets how long a Poll with nothing to lease waits at most
// before it looks again (default one second, on the bus's clock): the
// bound on how late it learns of what another process published without a
// NOTIFY reaching it (see WithNotifyInterval, WithoutListen). What this
// process publishes or settles wakes it at once. d > 0.
func WithPollInterval(d time.Duration) Option {
	return Option{func(cfg *busConfig) {
		if d <= 0 {
			cfg.fail(backend.Invalid("WithPollInterval(%v): must be > 0", d))
		}
		cfg.pollEvery = d
	}}
}

// WithNotifyInterval sets how often at most this bus's publishes to one
// topic send a NOTIFY, which wakes the Polls of the other processes
// (default 10ms; 0: at every publish). Postgres commits notifying
// transactions one at a time, so a NOTIFY per publish caps a busy topic's
// publishes at that rate. A publish that sends none is announced by a
// NOTIFY at the interval's end; one in the caller's transaction
// (PublishTx) that commits later than that is found by the Polls at their
// next look (WithPollInterval). An autocommit publish (Publish,
// PublishBatch) wakes this process's Polls at once either way. d >= 0.
func WithNotifyInterval(d time.Duration) Option {
	return Option{func(cfg *busConfig) {
		if d < 0 {
			cfg.fail(backend.Invalid("WithNotifyInterval(%v): must be >= 0", d))
		}
		cfg.notifyEvery = d
	}}
}

// WithoutListen does not LISTEN for other processes' publishes, and its
// publishes send no NOTIFY: a Poll learns of another process's publish at
// its next look (WithPollInterval). For a test that runs in one process, or a
// database whose connections cannot LISTEN (a transaction-pooling
// pgbouncer).
func WithoutListen() Option {
	return Option{func(cfg *busConfig) { cfg.noListen = true }}
}

// Open returns the bus in pool's database, creating its schema and tables
// if missing, or migrating them from an earlier version (under an
// advisory lock, so that replicas starting together take turns). A schema
// of a later version than this package knows is refused with an error
// matching ErrSchemaNewer. Unless WithoutListen, the bus keeps one
// connection of its own LISTENing for publishes, so that a Poll blocked
// in this process wakes at another process's commit; it is taken again
// after a failure. A nil pool or a bad option is an error matching
// queue.ErrInvalidArgument. Close the bus when done (the pool stays the
// caller's).
func Open(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Bus, error) {
	if pool == nil {
		return nil, backend.Invalid("Open: nil *pgxpool.Pool")
	}
	cfg := busConfig{clk: clock.New(), schema: "leasebus", dedupWindow: 5 * time.Minute, maxSize: DefaultMaxMessageSize,
		pollEvery: time.Second, notifyEvery: 10 * time.Millisecond}
	for _, o := range opts {
		if o.apply == nil {
			return nil, backend.Invalid("Open: the zero Option")
		}
		o.apply(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	b := &Bus{pool: pool, cfg: cfg, q: newSQL(cfg.schema), closed: make(chan struct{}), handles: map[string]map[*waiter]struct{}{}}
	b.notify = newNotifier(b, cfg.notifyEvery)
	if err := b.migrate(ctx); err != nil {
		return nil, err
	}
	if !cfg.noListen {
		b.done.Add(1)
		go b.listen()
	}
	return b, nil
}

// migrate makes or migrates the schema, or refuses a newer one.
func (b *Bus) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "leasebus:migrate:"+b.cfg.schema); err != nil {
			return fmt.Errorf("pgleasebus: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+b.cfg.schema); err != nil {
			return fmt.Errorf("pgleasebus: migrate: %w", err)
		}
		var have int
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, b.cfg.schema+".meta").Scan(&exists); err != nil {
			return fmt.Errorf("pgleasebus: migrate: %w", err)
		}
		if exists {
			var v string
			err := tx.QueryRow(ctx, `SELECT value FROM `+b.cfg.schema+`.meta WHERE key = 'version'`).Scan(&v)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("pgleasebus: migrate: %w", err)
			}
			if err == nil {
				if have, err = strconv.Atoi(v); err != nil {
					return fmt.Errorf("pgleasebus: schema %s: version %q: %w", b.cfg.schema, v, err)
				}
			}
		}
		if have > schemaVersion {
			return fmt.Errorf("pgleasebus: schema %s is version %d, this package knows %d: %w", b.cfg.schema, have, schemaVersion, ErrSchemaNewer)
		}
		if have == schemaVersion {
			return nil
		}
		for _, stmt := range ddl(b.cfg.schema) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("pgleasebus: migrate: %w", err)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+b.cfg.schema+`.meta (key, value) VALUES ('version', $1)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, strconv.Itoa(schemaVersion))
		return err
	})
}

// Close stops the bus's listener and closes every subscription handle
// opened on it (their blocked Polls return queue.ErrClosed). The pool
// stays open. A second Close returns nil.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.isShut {
		b.mu.Unlock()
		return nil
	}
	b.isShut = true
	close(b.closed)
	var ws []*waiter
	for _, set := range b.handles {
		for w := range set {
			ws = append(ws, w)
		}
	}
	b.mu.Unlock()
	for _, w := range ws {
		w.close()
	}
	b.done.Wait()
	b.notify.wg.Wait()
	return nil
}

func (b *Bus) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

// now reads the bus's clock, as Unix nanoseconds.
func (b *Bus) now() int64 { return b.cfg.clk.Now().UnixNano() }

// after returns the instant d after t, as Unix nanoseconds, held at the
// largest int64 rather than overflowing: a delay of centuries is never.
func after(t time.Time, d time.Duration) int64 {
	ns := t.UnixNano()
	if d > 0 && ns > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return ns + int64(d)
}

// planSettings is the first statement of every transaction genericTx
// sends: its statements are planned once per connection (a generic plan),
// and the plan can only be the one meant. Left to choose, Postgres plans
// statements like these afresh at every call, and the planning costs more
// than the statement; and a plan made while the statistics were those of
// an empty queue (its first minute, before autovacuum analyzes it) reads
// the whole queue, per call, for as long as the connection lives. Without
// sequential scans, bitmap scans or sorts, what is left is the index walk
// each statement is written for: the order index for a lease, stopping at
// n rows; the primary key for a settle.
const planSettings = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)`

// genericTx runs sql with args in a transaction of its own, planned as
// planSettings says, in one round trip, read reading its one result.
func (b *Bus) genericTx(ctx context.Context, sql string, args []any, read func(pgx.BatchResults) error) error {
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(planSettings)
	batch.Queue(sql, args...)
	batch.Queue("COMMIT")
	br := b.pool.SendBatch(ctx, batch)
	err := func() error {
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if err := read(br); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// Clock returns the clock the bus reads (a pool over one of its
// subscriptions reads it too: backend.Clocked).
func (b *Bus) Clock() clock.Clock { return b.cfg.clk }

// Schema returns the Postgres schema the bus's tables are in.
func (b *Bus) Schema() string { return b.cfg.schema }

// topicName is what a topic and a subscription may be called: dot-separated
// segments of letters, digits, '-' and '_', at most 200 characters.
var topicName = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

func validName(kind, name string) error {
	if len(name) > 200 || !topicName.MatchString(name) {
		return backend.Invalid("%s name %q: want dot-separated segments of letters, digits, '-' and '_', at most 200 characters", kind, name)
	}
	return nil
}

// CreateTopic makes the topic name if it does not exist (idempotent).
func (b *Bus) CreateTopic(ctx context.Context, name string) error {
	if err := validName("topic", name); err != nil {
		return err
	}
	if b.isClosed() {
		return fmt.Errorf("pgleasebus: create topic %q: %w", name, queue.ErrClosed)
	}
	if _, err := b.pool.Exec(ctx, b.q.createTopic, name, b.now()); err != nil {
		return fmt.Errorf("pgleasebus: create topic %q: %w", name, err)
	}
	return nil
}

// DeleteTopic deletes the topic name, its subscriptions and the messages
// they hold (their dead letters stay). A topic that does not exist is an
// error matching queue.ErrTopicNotFound.
func (b *Bus) DeleteTopic(ctx context.Context, name string) error {
	if b.isClosed() {
		return fmt.Errorf("pgleasebus: delete topic %q: %w", name, queue.ErrClosed)
	}
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, b.q.deleteTopicMessages, name); err != nil {
			return fmt.Errorf("pgleasebus: delete topic %q: %w", name, err)
		}
		tag, err := tx.Exec(ctx, b.q.deleteTopic, name)
		if err != nil {
			return fmt.Errorf("pgleasebus: delete topic %q: %w", name, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("pgleasebus: delete topic %q: %w", name, queue.ErrTopicNotFound)
		}
		return nil
	})
}

// Topics returns the topics' names, sorted.
func (b *Bus) Topics(ctx context.Context) ([]string, error) {
	rows, err := b.pool.Query(ctx, b.q.topics)
	if err != nil {
		return nil, fmt.Errorf("pgleasebus: topics: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
