package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

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

	mu       sync.Mutex                    // guards the two below
	wakes    uint64                        // Wakes so far: a relay that saw one since it last looked does not park
	parkings map[*backend.Parking]struct{} // the parked-or-not marks of the relays running
}

// Option configures an Outbox (New).
type Option struct{ apply func(*config) }

type config struct {
	prefix string
	clk    clock.Clock
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
	return &Outbox[T]{db: db, dialect: dialect, codec: codec, clk: cfg.clk, sql: st, wake: make(chan struct{}, 1)}, nil
}

// Migrate creates the tables and the inbox's index if they do not exist
// (Schema shows the statements). It is safe to call at every start.
func (o *Outbox[T]) Migrate(ctx context.Context) error {
	for _, stmt := range o.sql.schema {
		if _, err := o.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("outbox: migrate: %w", err)
		}
	}
	return nil
}

// Schema returns the statements Migrate runs, for a migration tool.
func (o *Outbox[T]) Schema() []string { return append([]string(nil), o.sql.schema...) }

// EnqueueOption sets what a message carries besides its topic and
// payload: what a publish option of the broker sets.
type EnqueueOption struct{ apply func(*meta) }

// meta is what the EnqueueOptions set.
type meta struct {
	Key      string
	Priority queue.Priority
	Headers  map[string]string
	Delay    time.Duration
	DedupID  string
}

// WithKey gives the message an ordering key (broker.WithKey); the relay
// publishes a key's messages in the order their transactions committed.
func WithKey(key string) EnqueueOption {
	return EnqueueOption{func(m *meta) { m.Key = key }}
}

// WithPriority gives the message a priority (broker.WithPriority).
func WithPriority(p queue.Priority) EnqueueOption {
	return EnqueueOption{func(m *meta) { m.Priority = p }}
}

// WithHeaders gives the message headers (broker.WithHeaders).
func WithHeaders(h map[string]string) EnqueueOption {
	return EnqueueOption{func(m *meta) { m.Headers = maps.Clone(h) }}
}

// WithDelay delays the message's delivery by d from its publish
// (broker.WithDelay); d >= 0.
func WithDelay(d time.Duration) EnqueueOption {
	return EnqueueOption{func(m *meta) { m.Delay = d }}
}

// WithDedupID publishes the message under the caller's dedup ID instead of
// the one the outbox makes: a message enqueued twice under one ID (two
// transactions that both committed) is in the queue once, within the
// backend's dedup window.
func WithDedupID(id string) EnqueueOption {
	return EnqueueOption{func(m *meta) { m.DedupID = id }}
}

// Message is one row of the outbox, as the relay hands it to a Publisher.
type Message[T any] struct {
	ID         int64 // the row's ID: commit order within a key
	Topic      string
	Payload    T
	Key        string
	Priority   queue.Priority
	Headers    map[string]string
	Delay      time.Duration
	DedupID    string    // the caller's (WithDedupID), or "outbox:" + a UUID made at Enqueue
	EnqueuedAt time.Time // the outbox clock's time at Enqueue
}

// Enqueue writes a message to topic in tx: it is published once tx
// commits, and never if tx rolls back. It returns the message's dedup ID.
// An empty topic, a negative delay or a payload the codec refuses is an
// error, and nothing is written. Call Wake after the commit (or use
// InTx, which does) to have the relay publish at once rather than at its
// next poll.
func (o *Outbox[T]) Enqueue(ctx context.Context, tx *sql.Tx, topic string, payload T, opts ...EnqueueOption) (dedupID string, err error) {
	if tx == nil {
		return "", invalid("Enqueue: nil *sql.Tx")
	}
	if topic == "" {
		return "", invalid("Enqueue: empty topic")
	}
	var m meta
	for _, opt := range opts {
		if opt.apply == nil {
			return "", invalid("Enqueue: the zero EnqueueOption")
		}
		opt.apply(&m)
	}
	if m.Delay < 0 {
		return "", invalid("WithDelay(%v): must be >= 0", m.Delay)
	}
	body, err := o.codec.Encode(nil, payload)
	if err != nil {
		return "", fmt.Errorf("outbox: encode: %w", err)
	}
	headers := ""
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return "", fmt.Errorf("outbox: headers: %w", err)
		}
		headers = string(b)
	}
	if m.DedupID == "" {
		m.DedupID = "outbox:" + uuid.NewString()
	}
	args := []any{topic, body, m.Key, int64(m.Priority), headers, int64(m.Delay), m.DedupID, o.clk.Now().UnixNano()}
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
