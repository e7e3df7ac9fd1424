package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Listen wakes the relays of this Outbox at every commit of an Enqueue
// on a Postgres database, from any process: each Enqueue sends a NOTIFY
// on the outbox's channel (its table prefix), which Postgres delivers at
// commit, and Listen holds one connection of the outbox's *sql.DB
// LISTENing for it. It returns when ctx ends (nil), or at once with an
// error matching errors.ErrUnsupported on SQLite or with a driver other
// than pgx's stdlib ("pgx"). A lost connection is taken again after the
// retry policy's backoff (1s doubling to 1m), waking the relays each
// time, since a commit may have come meanwhile; the relays' polling
// covers the outage.
func (o *Outbox[T]) Listen(ctx context.Context) error {
	if o.dialect != Postgres {
		return fmt.Errorf("outbox: Listen on %v: %w (LISTEN/NOTIFY is Postgres's)", o.dialect, errors.ErrUnsupported)
	}
	failures := 0
	for ctx.Err() == nil {
		err := o.listenOnce(ctx)
		if errors.Is(err, errors.ErrUnsupported) {
			return err
		}
		if ctx.Err() != nil {
			break
		}
		failures++
		o.Wake()
		t := backend.After(o.clk, queue.RetryPolicy{}.Delay(failures)) // 1s doubling to 1m
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return nil
}

// listenOnce listens on one connection until it fails or ctx ends.
func (o *Outbox[T]) listenOnce(ctx context.Context) error {
	conn, err := o.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("outbox: Listen: driver connection %T: %w (want pgx's stdlib driver)", dc, errors.ErrUnsupported)
		}
		pc := sc.Conn()
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{o.sql.channel}.Sanitize()); err != nil {
			return err
		}
		defer func() { _, _ = pc.Exec(context.WithoutCancel(ctx), "UNLISTEN *") }()
		o.Wake() // what committed before the LISTEN
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				return err
			}
			o.Wake()
		}
	})
}
