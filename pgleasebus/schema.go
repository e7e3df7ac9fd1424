package pgleasebus

import (
	"strings"
)

// schemaVersion is the version of the tables this package writes and
// reads. Open migrates an older schema to it, and refuses a newer one.
const schemaVersion = 1

// The tables, all in the bus's Postgres schema (WithSchema):
//
//   - meta: the schema's version.
//   - topics: the topics.
//   - subscriptions: each subscription's ID, topic, name and settings.
//   - messages: one row a message a subscription holds, waiting or leased,
//     with its own copy of the envelope (a fan-out writes one row each):
//     state 0 waits until wake_at (a delay, a backoff), state 1 is leased
//     until deadline (past it, the lease has expired and the message is
//     visible again). seq, drawn from one sequence, is the publish order
//     every copy of a message shares; delivery counts the leases, so that
//     a receipt names one. No index holds a column a lease changes
//     (state, deadline, delivery, attempts, history), so that a lease is a
//     HOT update: the row's new version goes in its page, with no index
//     entry, and the old one is pruned from the page without a vacuum.
//   - dead: the dead letters, with their reason, last error and history.
//   - dedup: the dedup IDs inside their window, by topic.
//
// Every time is Unix nanoseconds on the bus's clock, passed in by the
// caller: no statement reads now().
func ddl(schema string) []string {
	s := func(q string) string { return strings.ReplaceAll(q, "{s}", schema) }
	return []string{
		s(`CREATE TABLE IF NOT EXISTS {s}.meta (
	key   text PRIMARY KEY,
	value text NOT NULL
)`),
		s(`CREATE TABLE IF NOT EXISTS {s}.topics (
	name       text PRIMARY KEY,
	created_at bigint NOT NULL
)`),
		s(`CREATE TABLE IF NOT EXISTS {s}.subscriptions (
	id               bigserial PRIMARY KEY,
	topic            text NOT NULL REFERENCES {s}.topics (name) ON DELETE CASCADE,
	name             text NOT NULL,
	visibility_ns    bigint NOT NULL,
	max_attempts     integer NOT NULL,
	retry_initial_ns bigint NOT NULL,
	retry_max_ns     bigint NOT NULL,
	retry_multiplier double precision NOT NULL,
	retry_jitter     double precision NOT NULL,
	retry_no_backoff boolean NOT NULL,
	key_concurrency  integer NOT NULL,
	default_ttl_ns   bigint NOT NULL,
	paused           boolean NOT NULL DEFAULT false,
	created_at       bigint NOT NULL,
	UNIQUE (topic, name)
)`),
		s(`CREATE SEQUENCE IF NOT EXISTS {s}.seq`),
		// fillfactor leaves room on each page, so that a lease's update
		// can stay on its page; the vacuum thresholds are the table's own,
		// low, since a queue's rows come and go.
		s(`CREATE TABLE IF NOT EXISTS {s}.messages (
	sub_id       bigint NOT NULL,
	seq          bigint NOT NULL,
	id           uuid NOT NULL,
	topic        text NOT NULL,
	key          text NOT NULL DEFAULT '',
	priority     smallint NOT NULL DEFAULT 0,
	state        smallint NOT NULL DEFAULT 0,
	wake_at      bigint NOT NULL,
	deadline     bigint NOT NULL DEFAULT 0,
	leased_at    bigint NOT NULL DEFAULT 0,
	attempts     integer NOT NULL DEFAULT 0,
	delivery     integer NOT NULL DEFAULT 0,
	published_at bigint NOT NULL,
	expires_at   bigint NOT NULL DEFAULT 0,
	ttl_ns       bigint NOT NULL DEFAULT 0,
	last_error   text NOT NULL DEFAULT '',
	history      jsonb,
	headers      jsonb,
	payload      bytea NOT NULL,
	PRIMARY KEY (seq, sub_id)
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
	autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02)`),
		s(`CREATE INDEX IF NOT EXISTS messages_order ON {s}.messages (sub_id, priority DESC, seq)`),
		s(`CREATE INDEX IF NOT EXISTS messages_key ON {s}.messages (sub_id, key, seq) WHERE key <> ''`),
		// By wake time: the next delayed row to turn visible (a Poll's
		// wake-up), and the rows woken already, among which are the leases.
		s(`CREATE INDEX IF NOT EXISTS messages_wake ON {s}.messages (sub_id, wake_at)`),
		s(`CREATE INDEX IF NOT EXISTS messages_expiring ON {s}.messages (sub_id, expires_at) WHERE expires_at > 0`),
		s(`CREATE INDEX IF NOT EXISTS messages_id ON {s}.messages (id)`),
		s(`CREATE TABLE IF NOT EXISTS {s}.dead (
	sub_id       bigint NOT NULL,
	seq          bigint NOT NULL,
	subscription text NOT NULL,
	sub_topic    text NOT NULL,
	id           uuid NOT NULL,
	topic        text NOT NULL,
	key          text NOT NULL,
	priority     smallint NOT NULL,
	published_at bigint NOT NULL,
	ttl_ns       bigint NOT NULL,
	reason       smallint NOT NULL,
	attempts     integer NOT NULL,
	last_error   text NOT NULL,
	dead_at      bigint NOT NULL,
	history      jsonb,
	headers      jsonb,
	payload      bytea NOT NULL,
	PRIMARY KEY (sub_id, seq)
)`),
		s(`CREATE INDEX IF NOT EXISTS dead_at ON {s}.dead (dead_at, sub_id, seq)`),
		s(`CREATE TABLE IF NOT EXISTS {s}.dedup (
	topic      text NOT NULL,
	dedup_id   text NOT NULL,
	message_id uuid NOT NULL,
	first_at   bigint NOT NULL,
	PRIMARY KEY (topic, dedup_id)
)`),
		s(`CREATE INDEX IF NOT EXISTS dedup_first_at ON {s}.dedup (first_at)`),
	}
}
