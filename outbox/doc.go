// Package outbox enqueues leasebus messages in the caller's database
// transaction and relays them to any backend once that transaction
// commits, exactly once; and runs a handler's effects and the record that
// it ran in one transaction, so that a redelivered message is not handled
// twice. It works over database/sql with SQLite or PostgreSQL.
//
//	o, err := outbox.New[Order](db, outbox.Postgres, nil)
//	err = o.Migrate(ctx)
//	err = o.InTx(ctx, func(tx *sql.Tx) error {
//		if _, err := tx.ExecContext(ctx, "INSERT INTO orders ...", ...); err != nil {
//			return err
//		}
//		_, err := o.Enqueue(ctx, tx, "orders", order, queue.WithKey(order.Customer))
//		return err
//	})
//	relay, err := o.NewRelay(b) // any backend's publisher (backend.Publisher)
//	go relay.Run(ctx)
//	go o.Listen(ctx) // Postgres: wake the relay at every commit, from any process
//
// # Enqueue and relay
//
// Enqueue writes the message as a row of the outbox table in the
// caller's transaction: if it rolls back, the message never existed; if
// it commits, the relay publishes it. The relay reads rows in ID order,
// publishes each with its dedup ID (the caller's, or one made at
// Enqueue), and deletes those it published, a batch per transaction. A
// crash anywhere (before a publish, between a publish and the delete,
// during the delete) leaves the rows, and the next batch publishes them
// again under the same dedup IDs, which the backend drops: each committed
// message is in the queue once, as long as the backend's dedup window
// (broker.WithDedupWindow, five minutes by default; JetStream's duplicate
// window; SQS FIFO's five minutes) covers the longest a published row can
// wait for its delete: a relay's restart, a database outage.
//
// Order: on Postgres the enqueues of one key take turns (an advisory
// lock held to the commit), so a key's rows have IDs in commit order, and
// one relay batch runs at a time; SQLite runs one write transaction at a
// time. So the relay publishes each key's messages in the order their
// transactions committed, and a backend with ordering keys delivers them
// so. Messages of different keys, or without one, are published in ID
// order, which on Postgres is the order the rows were inserted, not
// always the order their transactions committed.
//
// A row its backend refuses for good (backend.Permanent), or whose payload
// does not decode, is moved aside to the dead-row table, and the rows
// after it go on (DeadRows, RequeueDeadRows, DiscardDeadRows); Enqueue
// refuses such a row at once where it knows the publisher (WithCheck, or
// a relay made before it). Any other failure stops the batch at its row,
// to be retried in order.
//
// # Waking the relay
//
// InTx wakes the relays of its Outbox after its commit; Wake does the
// same after a commit of the caller's own. Listen (Postgres, pgx's stdlib
// driver) wakes them at every commit of any process by LISTEN/NOTIFY. A
// relay also looks every poll interval (WithPollInterval, on the
// injected clock), which covers a lost notification.
//
// # Handlers whose effects commit with their record
//
// Handler wraps a handler that writes with a *sql.Tx: its effects and
// the message's record (in the inbox table: the outbox row's dedup ID,
// which every publish of the row carries, or the message's ID) commit
// together, and a delivery of a message whose record is there is acked
// without running the handler. This is poller.Idempotent kept in the
// database.
package outbox
