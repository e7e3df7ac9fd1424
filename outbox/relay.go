package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// HeaderDedupID is the header the relay gives every message it publishes:
// the row's dedup ID (Message.DedupID), which stays the same however often
// the row is published. Handler's inbox keys on it.
const HeaderDedupID = "leasebus-outbox-dedup-id"

// RelayOption configures a Relay.
type RelayOption struct{ apply func(*relayConfig) }

type relayConfig struct {
	batch int
	poll  time.Duration
	retry queue.RetryPolicy
	err   error
}

// WithBatch sets how many rows a relay reads, publishes and deletes in
// one transaction (default 100); n >= 1. A batch of any size deletes its
// rows in statements of at most 900 of them, within what every
// database takes as a statement's parameters.
func WithBatch(n int) RelayOption {
	return RelayOption{func(c *relayConfig) {
		if n < 1 {
			c.err = invalid("WithBatch(%d): must be >= 1", n)
		}
		c.batch = n
	}}
}

// WithPollInterval sets how often a relay looks for committed rows when
// nothing woke it (default 1s): the longest a message waits after a
// commit no Wake followed (another process's, or a Postgres relay whose
// LISTEN connection is down). d > 0.
func WithPollInterval(d time.Duration) RelayOption {
	return RelayOption{func(c *relayConfig) {
		if d <= 0 {
			c.err = invalid("WithPollInterval(%v): must be > 0", d)
		}
		c.poll = d
	}}
}

// WithRetry sets the backoff after a batch failed (a publish refused, the
// database down): the zero policy (the default) waits 1s doubling to 1m.
func WithRetry(p queue.RetryPolicy) RelayOption {
	return RelayOption{func(c *relayConfig) {
		if err := p.Validate(); err != nil {
			c.err = err
		} else if p.NoBackoff {
			c.err = invalid("WithRetry: NoBackoff would retry a failing batch in a busy loop")
		}
		c.retry = p
	}}
}

// deleteChunk is the most rows one DELETE of a batch names: each is a
// statement parameter, and SQLite takes 32,766 at most (999 before 3.32),
// Postgres 65,535.
const deleteChunk = 900

// Relay publishes the outbox's committed rows, oldest first, and deletes
// each one published, in batches: each batch is one transaction that
// reads its rows, publishes them in order, and deletes those published.
// A crash anywhere in it leaves the rows to the next batch, which
// publishes them again with the same dedup IDs. A row whose publish is
// refused for good (backend.Permanent), or which does not decode, is
// moved to the dead-row table (DeadRows) in the same transaction, and the
// rows after it go on; any other failure ends the batch at that row, which
// the next batch tries again first, so a key's rows keep their order. Run one relay per outbox
// (more are safe: on Postgres their batches take turns; on SQLite the
// database does).
type Relay[T any] struct {
	o   *Outbox[T]
	pub backend.Publisher[T]
	cfg relayConfig

	pk  *backend.Parking // marked while Run waits with nothing due (AwaitQuiet)
	qmu sync.Mutex       // guards qch
	qch chan struct{}    // closed and replaced at every change of pk

	mu        sync.Mutex // guards the stats below
	published uint64
	deadRows  uint64
	batches   uint64
	failures  uint64
	lastErr   error
}

// RelayStats is what a Relay did.
type RelayStats struct {
	Published uint64 // rows published and deleted
	DeadRows  uint64 // rows moved aside: their publish was refused for good, or they did not decode
	Batches   uint64 // batches that committed
	Failures  uint64 // batches that failed (and were retried)
	LastError error  // the latest failure, or nil
}

// NewRelay returns a relay of o's rows to pub, any backend's publisher (a
// *broker.Broker, or the JetStream, SQS or PostgreSQL backend's). It
// publishes each row with the options it was enqueued with, under its
// dedup ID, with the HeaderDedupID header: the backend's dedup drops a
// row published again (the relay crashed before it deleted it), which
// makes the relay's at-least-once exactly once in the queue within the
// backend's dedup window, and the header makes Handler's effects once past
// it too. pub is also what the Enqueues after this call check their rows
// with, unless New was given WithCheck.
func (o *Outbox[T]) NewRelay(pub backend.Publisher[T], opts ...RelayOption) (*Relay[T], error) {
	if pub == nil {
		return nil, invalid("NewRelay: nil Publisher")
	}
	cfg := relayConfig{batch: 100, poll: time.Second}
	for _, opt := range opts {
		if opt.apply == nil {
			return nil, invalid("NewRelay: the zero RelayOption")
		}
		opt.apply(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	o.mu.Lock()
	if o.check == nil {
		o.check = pub
	}
	o.mu.Unlock()
	r := &Relay[T]{o: o, pub: pub, cfg: cfg, qch: make(chan struct{})}
	r.pk = backend.NewParking(r.changed)
	return r, nil
}

// changed is the Parking's notify: it wakes every AwaitQuiet.
func (r *Relay[T]) changed() {
	r.qmu.Lock()
	close(r.qch)
	r.qch = make(chan struct{})
	r.qmu.Unlock()
}

// AwaitQuiet blocks until Run is at rest: waiting for a Wake, its poll
// interval or its retry backoff, none of them due at the outbox's clock's
// time, after every Wake made before the call (InTx's, Listen's) was
// looked at. It returns nil then, or ctx's error if ctx ends first (also
// while Run is not running). A test commits with InTx, or moves a mock
// clock, and calls AwaitQuiet: then every row it committed in this
// process has been relayed (or its failure counted):
//
//	err := o.InTx(ctx, enqueue) // wakes the relay
//	err = relay.AwaitQuiet(ctx)  // and the relay has published it
func (r *Relay[T]) AwaitQuiet(ctx context.Context) error {
	for {
		r.qmu.Lock()
		ch := r.qch
		r.qmu.Unlock()
		if r.pk.Parked(r.o.clk.Now()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Stats returns what the relay did so far.
func (r *Relay[T]) Stats() RelayStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RelayStats{Published: r.published, DeadRows: r.deadRows, Batches: r.batches, Failures: r.failures, LastError: r.lastErr}
}

// RunOnce publishes every row committed when it is called (and any that
// commit meanwhile), batch after batch, and returns how many it published.
// It stops at the first batch that fails, returning its error (the rows
// it published before are deleted).
func (r *Relay[T]) RunOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		n, more, err := r.batch(ctx)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// Run relays until ctx ends, then returns nil: it runs batches while rows
// are there, then waits for a Wake (an InTx commit, or a Postgres NOTIFY
// when Listen runs), or for the poll interval, on the outbox's clock. A
// failed batch is counted and tried again after the retry policy's
// backoff. A test waits for it to be at rest with AwaitQuiet.
func (r *Relay[T]) Run(ctx context.Context) error {
	o := r.o
	o.mu.Lock()
	if o.parkings == nil {
		o.parkings = make(map[*backend.Parking]struct{})
	}
	o.parkings[r.pk] = struct{}{}
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.parkings, r.pk)
		o.mu.Unlock()
		r.pk.Unpark()
	}()
	failures := 0
	for ctx.Err() == nil {
		o.mu.Lock()
		seen := o.wakes
		o.mu.Unlock()
		_, err := r.RunOnce(ctx)
		wait := r.cfg.poll
		if err != nil && ctx.Err() == nil {
			failures++
			wait = r.cfg.retry.Delay(failures)
		} else {
			failures = 0
		}
		at := o.clk.Now().Add(wait)
		t := backend.At(o.clk, at)
		o.mu.Lock()
		if o.wakes != seen { // a Wake since RunOnce read: look again
			o.mu.Unlock()
			t.Stop()
			continue
		}
		r.pk.Park(at)
		o.mu.Unlock()
		select {
		case <-t.C:
		case <-o.wake:
		case <-ctx.Done():
		}
		r.pk.Unpark()
		t.Stop()
	}
	return nil
}

// batch relays one batch: it reads up to the batch size of rows in one
// transaction, publishes them in order, and deletes those published
// before it commits. more reports a full batch (there may be more).
func (r *Relay[T]) batch(ctx context.Context) (n int, more bool, err error) {
	var dead int
	defer func() {
		r.mu.Lock()
		r.published += uint64(n)
		r.deadRows += uint64(dead)
		if err != nil {
			r.failures++
			r.lastErr = err
		} else if n > 0 {
			r.batches++
		}
		r.mu.Unlock()
	}()
	tx, err := r.o.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, fmt.Errorf("outbox: relay: begin: %w", err)
	}
	defer rollbackOnPanic(tx)
	defer func() {
		if err != nil {
			err = errors.Join(err, rollback(tx))
		}
	}()
	if r.o.sql.relayLock != "" {
		if _, err := tx.ExecContext(ctx, r.o.sql.relayLock, r.o.sql.channel+":relay"); err != nil {
			return 0, false, fmt.Errorf("outbox: relay: %w", err)
		}
	}
	rows, err := r.read(ctx, tx)
	if err != nil {
		return 0, false, err
	}
	if len(rows) == 0 {
		return 0, false, rollback(tx)
	}
	done := make([]any, 0, len(rows)) // published or moved aside: deleted
	var perr error
	for _, row := range rows {
		if row.err == nil {
			_, row.err = r.pub.Publish(ctx, row.topic, row.payload, relayed(row.opts).Options()...)
			if row.err == nil {
				n++
				done = append(done, row.id)
				continue
			}
			if !backend.Permanent(row.err) {
				perr = fmt.Errorf("outbox: relay: publish row %d to %q: %w", row.id, row.topic, row.err)
				break
			}
		}
		if _, err := tx.ExecContext(ctx, r.o.sql.deadMove, row.err.Error(), r.o.clk.Now().UnixNano(), row.id); err != nil {
			return 0, false, errors.Join(perr, fmt.Errorf("outbox: relay: move row %d aside: %w", row.id, err))
		}
		dead++
		done = append(done, row.id)
	}
	if len(done) > 0 {
		for rest := done; len(rest) > 0; {
			chunk := rest[:min(len(rest), deleteChunk)]
			if _, err := tx.ExecContext(ctx, r.o.sql.deleteRows(len(chunk)), chunk...); err != nil {
				return 0, false, errors.Join(perr, fmt.Errorf("outbox: relay: delete: %w", err))
			}
			rest = rest[len(chunk):]
		}
		if err := tx.Commit(); err != nil {
			return 0, false, errors.Join(perr, fmt.Errorf("outbox: relay: commit: %w", err))
		}
	} else if err := rollback(tx); err != nil {
		return 0, false, errors.Join(perr, err)
	}
	return n, perr == nil && len(rows) == r.cfg.batch, perr
}

// row is one row of the outbox, as a batch read it: its message, or why
// it cannot be one (its payload or headers do not decode).
type row[T any] struct {
	id      int64 // commit order within a key
	topic   string
	payload T
	opts    queue.PublishOptions // as enqueued: its dedup ID the caller's, or "outbox:" and a UUID
	err     error
}

// read reads the batch's rows, oldest first.
func (r *Relay[T]) read(ctx context.Context, tx *sql.Tx) ([]row[T], error) {
	rs, err := tx.QueryContext(ctx, r.o.sql.selectRows, r.cfg.batch)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: read: %w", err)
	}
	defer rs.Close()
	var rows []row[T]
	for rs.Next() {
		var (
			rw                           row[T]
			headers                      string
			body                         []byte
			prio, delay, enqueuedAt, ttl int64
		)
		o := &rw.opts
		if err := rs.Scan(&rw.id, &rw.topic, &body, &o.Key, &prio, &headers, &delay, &o.DedupID, &enqueuedAt, &ttl); err != nil {
			return nil, fmt.Errorf("outbox: relay: read: %w", err)
		}
		o.Priority, o.Delay, o.TTL = queue.Priority(prio), time.Duration(delay), time.Duration(ttl)
		if rw.payload, err = r.o.codec.Decode(body); err != nil {
			rw.err = fmt.Errorf("outbox: decode the payload: %w", err)
		} else if headers != "" {
			if err := json.Unmarshal([]byte(headers), &o.Headers); err != nil {
				rw.err = fmt.Errorf("outbox: decode the headers: %w", err)
			}
		}
		rows = append(rows, rw)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: relay: read: %w", err)
	}
	return rows, nil
}
