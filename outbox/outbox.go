package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Outbox is the outbox table (and the inbox table) of one database, for
// payloads of type T: Enqueue writes a message in the caller's
// transaction, and a Relay publishes what committed. It is safe for
// concurrent use.
type Outbox[T any] struct {
	db      *sql.DB
	dialect Dialect
	codec   queue.Codec[T]
	clk     clock.Clock
	sql     *sqlText
	wake    chan struct{} // Wake's signal to the relays of this Outbox; buffered 1

	mu       sync.Mutex                    // guards the three below
	wakes    uint64                        // Wakes so far: a relay that saw one since it last looked does not park
	parkings map[*backend.Parking]struct{} // the parked-or-not marks of the relays running
	check    backend.PublishChecker        // what Enqueue checks a row with: WithCheck's, or the first relay's publisher
}

// Option configures an Outbox (New).
type Option struct{ apply func(*config) }

type config struct {
	prefix string
	clk    clock.Clock
	check  backend.PublishChecker
	err    error
}

// WithTablePrefix names the tables: prefix (the outbox) and prefix_inbox
// (default "leasebus_outbox"): lower-case letters, digits and '_'.
func WithTablePrefix(prefix string) Option {
	return Option{func(c *config) { c.prefix = prefix }}
}

// WithClock sets the clock the outbox reads (an enqueue's time, the
// relay's polling and backoff, the inbox's records; default the real
// one).
func WithClock(clk clock.Clock) Option {
	return Option{func(c *config) {
		if clk == nil {
			c.err = invalid("WithClock: nil clock")
		}
		c.clk = clk
	}}
}

// WithCheck makes Enqueue check each row with c (the publisher its relay
// publishes with: any backend.Publisher is one) before it writes it, so
// that a row the backend would refuse for good (a topic name it does not
// take, an option it cannot carry, a dedup ID too long) is refused in the
// caller's transaction, not moved aside by the relay later. Without it,
// the first NewRelay's publisher is the check, for the Enqueues after it.
func WithCheck(c backend.PublishChecker) Option {
	return Option{func(cfg *config) {
		if c == nil {
			cfg.err = invalid("WithCheck: nil checker")
		}
		cfg.check = c
	}}
}

// New returns the outbox of db, which speaks dialect, encoding payloads
// with codec (nil: queue.DefaultCodec, JSON but for []byte and string).
// It makes no query: call Migrate once to create the tables. A nil db, an
// unknown dialect or a bad option is an error matching
// queue.ErrInvalidArgument.
func New[T any](db *sql.DB, dialect Dialect, codec queue.Codec[T], opts ...Option) (*Outbox[T], error) {
	if db == nil {
		return nil, invalid("nil *sql.DB")
	}
	cfg := config{prefix: "leasebus_outbox", clk: clock.New()}
	for _, o := range opts {
		if o.apply == nil {
			return nil, invalid("the zero Option")
		}
		o.apply(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	st, err := newSQL(dialect, cfg.prefix)
	if err != nil {
		return nil, err
	}
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	return &Outbox[T]{db: db, dialect: dialect, codec: codec, clk: cfg.clk, sql: st, wake: make(chan struct{}, 1), check: cfg.check}, nil
}

// Migrate creates the tables and the inbox's index if they do not exist
// (Schema shows the statements). It is safe to call at every start.
func (o *Outbox[T]) Migrate(ctx context.Context) error {
	for _, stmt := range o.sql.schema {
		if _, err := o.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("outbox: migrate: %w", err)
		}
	}
	for _, c := range o.sql.columns {
		rows, err := o.db.QueryContext(ctx, `SELECT `+c.name+` FROM `+c.table+` WHERE 1 = 0`)
		if err == nil {
			rows.Close()
			continue // there already
		}
		if _, err := o.db.ExecContext(ctx, `ALTER TABLE `+c.table+` ADD COLUMN `+c.name+` `+c.def); err != nil {
			return fmt.Errorf("outbox: migrate: add %s.%s: %w", c.table, c.name, err)
		}
	}
	return nil
}

// Schema returns the statements that make the tables as Migrate does,
// for a migration tool. (Migrate also adds to tables made by an earlier
// version the columns they lack: ttl_ns, in both the outbox and the
// dead-row table.)
func (o *Outbox[T]) Schema() []string { return append([]string(nil), o.sql.schema...) }

// Enqueue writes a message to topic in tx: it is published once tx
// commits, and never if tx rolls back. It returns the message's dedup ID:
// the caller's (queue.WithDedupID), or "outbox:" and a UUID it makes. opts
// are those of any publish (queue.PublishOptions), which the relay
// publishes the message with; a TTL counts from that publish, not from
// Enqueue. A nil tx, an empty topic, an invalid option, a payload the
// codec refuses, or a row the outbox's check (WithCheck, or its first
// relay's publisher) says its backend would refuse for good is an error,
// and nothing is written. Call Wake after the commit (or use InTx, which
// does) to have the relay publish at once rather than at its next poll.
func (o *Outbox[T]) Enqueue(ctx context.Context, tx *sql.Tx, topic string, payload T, opts ...queue.PublishOption) (dedupID string, err error) {
	if tx == nil {
		return "", invalid("Enqueue: nil *sql.Tx")
	}
	if topic == "" {
		return "", invalid("Enqueue: empty topic")
	}
	var m queue.PublishOptions
	if err := m.Apply(opts...); err != nil {
		return "", fmt.Errorf("outbox: enqueue: %w", err)
	}
	if m.DedupIDs != nil {
		return "", invalid("Enqueue: WithDedupIDs names a batch's messages; a row takes WithDedupID")
	}
	if m.DedupID == "" {
		m.DedupID = "outbox:" + uuid.NewString()
	}
	headers := ""
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return "", fmt.Errorf("outbox: headers: %w", err)
		}
		headers = string(b)
	}
	if c := o.checker(); c != nil {
		if err := c.CheckPublish(topic, relayed(m)); err != nil {
			return "", fmt.Errorf("outbox: enqueue to %q: %w", topic, err)
		}
	}
	body, err := o.codec.Encode(nil, payload)
	if err != nil {
		return "", fmt.Errorf("outbox: encode: %w", err)
	}
	args := []any{topic, body, m.Key, int64(m.Priority), headers, int64(m.Delay), m.DedupID, o.clk.Now().UnixNano(), int64(m.TTL)}
	if o.dialect == Postgres {
		lock := ""
		if m.Key != "" {
			lock = o.sql.channel + ":" + m.Key
		}
		args = append(args, lock, o.sql.channel)
	}
	if _, err := tx.ExecContext(ctx, o.sql.insert, args...); err != nil {
		return "", fmt.Errorf("outbox: enqueue: %w", err)
	}
	return m.DedupID, nil
}

// relayed returns the options a row of m is published with: m's, with
// its dedup ID in the HeaderDedupID header too (the inbox keys on it).
// The caller's maps are not written.
func relayed(m queue.PublishOptions) queue.PublishOptions {
	h := make(map[string]string, len(m.Headers)+1)
	maps.Copy(h, m.Headers)
	h[HeaderDedupID] = m.DedupID
	m.Headers = h
	return m
}

// checker returns what Enqueue checks a row with, if anything.
func (o *Outbox[T]) checker() backend.PublishChecker {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.check
}

// InTx runs fn in a transaction of the outbox's database and commits it
// if fn returns nil (rolls it back otherwise, returning fn's error), then
// wakes the relay: the shape of a handler that writes its rows and
// enqueues its messages together.
func (o *Outbox[T]) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: begin: %w", err)
	}
	defer rollbackOnPanic(tx)
	if err := fn(tx); err != nil {
		return errors.Join(err, rollback(tx))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: commit: %w", err)
	}
	o.Wake()
	return nil
}

// rollbackOnPanic, deferred, rolls tx back if the caller's code panics,
// and goes on panicking: the connection goes back to the pool without an
// open transaction (and, on Postgres, its locks).
func rollbackOnPanic(tx *sql.Tx) {
	if v := recover(); v != nil {
		_ = tx.Rollback()
		panic(v)
	}
}

func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("outbox: rollback: %w", err)
	}
	return nil
}

// Wake tells the relays of this Outbox (in this process) that a
// transaction with messages committed. It never blocks.
func (o *Outbox[T]) Wake() {
	o.mu.Lock()
	o.wakes++
	for pk := range o.parkings {
		pk.Unpark()
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}
