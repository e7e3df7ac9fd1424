// Package pgleasebus runs leasebus on PostgreSQL: topics, subscriptions
// and their messages are rows in the database a Go service already has,
// backs up and fails over, shared by every replica that opens the bus.
// The same worker code runs on it (package poller, or a hand-written
// Poll/Ack loop): a Subscription[T] is a poller.Source[T], and passes the
// backend conformance suite (package poller/sourcetest) and the publishing
// seam's (backend/publishtest) on a real PostgreSQL, on a mock clock.
//
//	bus, err := pgleasebus.Open(ctx, pool, pgleasebus.WithClock(clk))
//	err = bus.CreateTopic(ctx, "orders")
//	sub, err := pgleasebus.Subscribe(ctx, bus, "orders", "billing", queue.JSONCodec[Order]())
//	pub, err := pgleasebus.NewPublisher(bus, queue.JSONCodec[Order]())
//	msg, err := pub.Publish(ctx, "orders", order, queue.WithKey(order.Customer))
//	msg, err = pub.PublishTx(ctx, tx, "orders", order) // there when tx commits, never if it rolls back
//
// # Mapping
//
//   - Bus: one Postgres schema (WithSchema, default "leasebus") holding
//     the tables meta, topics, subscriptions, messages, dead and dedup.
//     Open creates them, or migrates an older version under an advisory
//     lock, and refuses a newer one (ErrSchemaNewer).
//   - Publish: one statement inserts a row per subscription of the topic
//     (fan-out in the publisher's transaction), each its own copy of the
//     envelope, with one seq drawn from a sequence: the publish order every
//     copy shares. A dedup ID (queue.WithDedupID) takes a row of dedup in
//     the same statement, or finds it taken within the window
//     (WithDedupWindow) and stores nothing. A topic without subscriptions
//     takes the publish and keeps nothing.
//   - Poll: one round trip that dead-letters what is due (a last lease
//     expired, a TTL passed) and leases up to n rows by priority then seq
//     with FOR UPDATE SKIP LOCKED, so any number of handles in any number
//     of processes share a subscription and never lease one row twice. A
//     lease is the row's state and deadline; its receipt
//     (lease.ID: subscription, seq, delivery count) names one delivery, so
//     an Ack of a superseded delivery is refused (queue.ErrLeaseExpired)
//     and changes nothing.
//   - Waiting: a Poll with nothing to lease parks until the next row turns
//     visible (a timer on the bus's clock), a publish or settle in this
//     process (at once), or another process's commit, which a NOTIFY on
//     the schema's channel, sent by the committing statement, brings to
//     the bus's one LISTEN connection.
//   - Ack: a DELETE of the row under its delivery. Acks made while another
//     is out go together in the next DELETE (group commit), each with its
//     own result. An acked row leaves with its DELETE: no UPDATE of a
//     "done" flag, no table rewrite; the table's autovacuum thresholds are
//     set low so that its dead tuples are reclaimed as it churns.
//   - Nack, Fail (the retry policy's backoff), Release (no attempt spent),
//     Extend, Reject: one UPDATE or one DELETE-and-INSERT into dead each,
//     with the attempt's outcome appended to the row's history.
//   - Ordering keys: a row of a key is leased only while fewer than the key
//     concurrency (WithKeyConcurrency, default 1) of its key's rows come
//     before it: the head of a key holds its place through retries and
//     backoff, and the next goes when it is acked or dead-lettered.
//   - Dead letters: rows of dead with reason, attempts, last error and
//     history; Redrive and RedriveWith move one back in one statement,
//     into its old place; DiscardDeadLetters deletes.
//   - Stats: the gauges counted over the subscription's rows by its
//     indexes (no scan of other subscriptions' rows, and nothing on the
//     hot path: no counter row is updated per message); counters of what
//     went through are the handle's own.
//
// # Time
//
// Every deadline, delay, backoff, TTL and dedup window is decided from the
// bus's clock (WithClock) and passed to the database as a parameter: no
// statement reads now(). A test drives a real PostgreSQL with a
// clock.Mock and gets exact outcomes (a redelivery at the visibility
// timeout to the nanosecond, a backoff, a dead letter) with no sleep; the
// processes that share a bus must share a clock, as replicas on real time
// do. A delay or TTL past the largest instant is held there: never.
//
// # Faults
//
// A settle whose connection is lost (the server restarting, the backend
// terminated) is sent again once on another connection; an Ack whose first
// DELETE took, and whose second finds nothing, is done. A Poll whose
// connection is lost returns the error and has leased nothing, or leased
// rows that come back at their deadline with their attempt counted. A
// pool leases for the visibility timeout and extends its leases while it
// holds them, so a process that dies lets its messages go after one
// visibility timeout. The tests stop the server with pg_ctl stop -m
// immediate under a running pool, SIGKILL a worker mid-lease and terminate
// connections mid-poll and mid-ack: nothing is lost, and nothing acked
// comes back.
//
// # What it does not carry
//
// A subscription's filter (a Go function: the publisher, in another
// process, cannot run it), a wildcard topic, a bounded queue with an
// overflow policy, an in-flight cap, the broker's per-subscription rate
// limits and fair keys: Subscribe has no option for them. A pool's own
// limits (poller.WithRate, poller.SlowDown) work over any source, this one
// included. The module's README lists every feature of the broker and
// what it is here.
package pgleasebus
