package pgleasebus

import (
	"strconv"
	"strings"

	"github.com/leasebus/leasebus/queue"
)

// A message row's state.
const (
	stateWaiting = 0 // visible once wake_at has come
	stateLeased  = 1 // leased until its deadline; past it, visible again
)

// sqlText is the statements of one schema.
type sqlText struct {
	createTopic, deleteTopic, deleteTopicMessages, topics string

	subscription, insertSubscription, updateSubscription, subscriptionByID, subscriptions string
	deleteSubscription, deleteSubscriptionMessages, setPaused                             string

	publish, publishBatch, dedupOriginal, dedupPrune, messageByID string

	sweep, sweepAll, sweepOne, lease, nextVisible string

	ack, current, settled, nack, extend, release, reject string

	stats, deadCount, peek, purge            string
	deleteMessages, makeVisible, editPayload string
	deadLetters, redrive, deadPrune          string
}

func newSQL(schema string) *sqlText {
	r := strings.NewReplacer(
		"{s}", schema,
		"{waiting}", strconv.Itoa(stateWaiting),
		"{leased}", strconv.Itoa(stateLeased),
		"{maxAttempts}", strconv.Itoa(int(queue.ReasonMaxAttempts)),
		"{expiredReason}", strconv.Itoa(int(queue.ReasonExpired)),
		"{attemptExpired}", strconv.Itoa(int(queue.AttemptExpired)),
		"{attemptReleased}", strconv.Itoa(int(queue.AttemptReleased)),
		"{attemptRejected}", strconv.Itoa(int(queue.AttemptRejected)),
		"{maxHistory}", strconv.Itoa(queue.MaxHistory),
		"{leaseExpired}", "'lease expired'",
		"{stVisible}", strconv.Itoa(int(queue.StateVisible)),
		"{stDelayed}", strconv.Itoa(int(queue.StateDelayed)),
		"{stInFlight}", strconv.Itoa(int(queue.StateInFlight)),
		"{stHeldBack}", strconv.Itoa(int(queue.StateHeldBack)),
	)
	s := r.Replace
	// keyOK is true of a message m that its ordering key lets out: it has
	// none, or fewer than the key concurrency (the named parameter) of its
	// key's messages come before it.
	keyOK := func(kc string) string {
		return `(m.key = '' OR (SELECT count(*) FROM (SELECT 1 FROM {s}.messages k
		WHERE k.sub_id = m.sub_id AND k.key <> '' AND k.key = m.key AND k.seq < m.seq LIMIT ` + kc + `) ahead) < ` + kc + `)`
	}
	// state is the queue.State at now of a row m ($kc: the key
	// concurrency).
	state := func(now, kc string) string {
		return `(CASE WHEN m.state = {leased} AND m.deadline > ` + now + ` THEN {stInFlight}
			WHEN m.state = {waiting} AND m.wake_at > ` + now + ` THEN {stDelayed}
			WHEN NOT ` + keyOK(kc) + ` THEN {stHeldBack} ELSE {stVisible} END)`
	}
	// push appends attempt e to history h, keeping the last MaxHistory.
	push := func(h, e string) string {
		return `(CASE WHEN jsonb_array_length(coalesce(` + h + `, '[]'::jsonb) || ` + e + `) > {maxHistory}
		THEN (coalesce(` + h + `, '[]'::jsonb) || ` + e + `) - 0 ELSE coalesce(` + h + `, '[]'::jsonb) || ` + e + ` END)`
	}
	attempt := func(outcome, at, held, text string) string {
		return `jsonb_build_array(jsonb_build_object('attempt', m.attempts, 'outcome', ` + outcome + `, 'at', ` + at +
			`, 'held', ` + held + `, 'error', ` + text + `))`
	}
	// plus is a + b, nanoseconds, held at the largest bigint rather
	// than overflowing: a delay or TTL of centuries means never.
	plus := func(a, b string) string {
		return `(CASE WHEN ` + b + ` > 9223372036854775807 - ` + a + ` THEN 9223372036854775807 ELSE ` + a + ` + ` + b + ` END)`
	}
	deadCols := `sub_id, seq, subscription, sub_topic, id, topic, key, priority, published_at, ttl_ns, reason, attempts, last_error, dead_at, history, headers, payload`
	q := &sqlText{}
	q.createTopic = s(`INSERT INTO {s}.topics (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`)
	q.deleteTopic = s(`DELETE FROM {s}.topics WHERE name = $1`)
	q.deleteTopicMessages = s(`DELETE FROM {s}.messages WHERE sub_id IN (SELECT id FROM {s}.subscriptions WHERE topic = $1)`)
	q.topics = s(`SELECT name FROM {s}.topics ORDER BY name`)

	subCols := `id, visibility_ns, max_attempts, retry_initial_ns, retry_max_ns, retry_multiplier, retry_jitter, retry_no_backoff, key_concurrency, default_ttl_ns, paused`
	q.subscription = s(`SELECT ` + subCols + ` FROM {s}.subscriptions WHERE topic = $1 AND name = $2`)
	q.subscriptionByID = s(`SELECT ` + subCols + ` FROM {s}.subscriptions WHERE id = $1`)
	q.subscriptions = s(`SELECT topic, name, ` + subCols + ` FROM {s}.subscriptions ORDER BY topic, name`)
	q.insertSubscription = s(`INSERT INTO {s}.subscriptions (topic, name, visibility_ns, max_attempts, retry_initial_ns, retry_max_ns,
	retry_multiplier, retry_jitter, retry_no_backoff, key_concurrency, default_ttl_ns, created_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 WHERE EXISTS (SELECT 1 FROM {s}.topics WHERE name = $1)
ON CONFLICT (topic, name) DO NOTHING`)
	q.updateSubscription = s(`UPDATE {s}.subscriptions SET visibility_ns = $2, max_attempts = $3, retry_initial_ns = $4, retry_max_ns = $5,
	retry_multiplier = $6, retry_jitter = $7, retry_no_backoff = $8, key_concurrency = $9, default_ttl_ns = $10 WHERE id = $1`)
	q.deleteSubscriptionMessages = s(`DELETE FROM {s}.messages WHERE sub_id = $1`)
	q.deleteSubscription = s(`DELETE FROM {s}.subscriptions WHERE id = $1`)
	q.setPaused = s(`WITH u AS (UPDATE {s}.subscriptions SET paused = $2 WHERE id = $1 RETURNING 1) SELECT (SELECT count(*) FROM u), pg_notify($3, $4)`)

	// publish stores one message on every subscription of topic $1, in
	// one statement: its dedup ID ($11, '' for none) first, taking it for
	// this message unless another took it less than the window ($12)
	// before now ($7); the rows; and the NOTIFY Postgres sends at commit
	// on channel $10. $2 is the message ID, $3 its key, $4 its priority,
	// $5 when it is visible, $6 its TTL (0: the subscription's default),
	// $8 its headers, $9 its payload ($10: '' sends no NOTIFY). It returns whether the topic exists,
	// how many subscriptions took the message, and whether the dedup ID
	// was this message's.
	msgCols := `sub_id, seq, id, topic, key, priority, wake_at, published_at, ttl_ns, expires_at, headers, payload`
	q.publish = s(`WITH t AS (SELECT 1 FROM {s}.topics WHERE name = $1),
d AS (INSERT INTO {s}.dedup (topic, dedup_id, message_id, first_at) SELECT $1, $11, $2, $7 WHERE $11 <> ''
	ON CONFLICT (topic, dedup_id) DO UPDATE SET message_id = EXCLUDED.message_id, first_at = EXCLUDED.first_at
	WHERE {s}.dedup.first_at <= $7 - $12::bigint
	RETURNING 1),
n AS (SELECT nextval('{s}.seq') AS v),
ins AS (INSERT INTO {s}.messages (` + msgCols + `)
	SELECT sub.id, n.v, $2, $1, $3, $4, $5, $7, CASE WHEN $6::bigint > 0 THEN $6 ELSE sub.default_ttl_ns END,
		CASE WHEN $6::bigint > 0 THEN ` + plus("$7::bigint", "$6::bigint") + ` WHEN sub.default_ttl_ns > 0 THEN ` + plus("$7", "sub.default_ttl_ns") + ` ELSE 0 END, $8, $9
	FROM {s}.subscriptions sub, n WHERE sub.topic = $1 AND ($11 = '' OR EXISTS (SELECT 1 FROM d))
	RETURNING 1),
notified AS (SELECT pg_notify($10, $1) WHERE $10 <> '' AND EXISTS (SELECT 1 FROM ins))
SELECT EXISTS (SELECT 1 FROM t), (SELECT count(*) FROM ins), EXISTS (SELECT 1 FROM d), (SELECT count(*) FROM notified)`)
	// publishBatch stores the messages of arrays $2 to $9 in order, with
	// seqs drawn in that order (the ith message gets the ith smallest seq
	// drawn): $2 IDs, $3 keys, $4 priorities, $5 when visible, $7 TTLs, $8
	// headers, $9 payloads, $11 dedup IDs ('' none); $6 is now, $10 the
	// channel, $12 the dedup window. A message whose dedup ID another
	// took within the window is left out; the dedup IDs this batch took
	// are returned.
	q.publishBatch = s(`WITH t AS (SELECT 1 FROM {s}.topics WHERE name = $1),
batch AS (SELECT * FROM unnest($2::uuid[], $3::text[], $4::smallint[], $5::bigint[], $7::bigint[], $8::jsonb[], $9::bytea[], $11::text[])
	WITH ORDINALITY AS b(id, key, priority, wake_at, ttl_ns, headers, payload, dedup_id, i)),
d AS (INSERT INTO {s}.dedup (topic, dedup_id, message_id, first_at) SELECT $1, b.dedup_id, b.id, $6 FROM batch b WHERE b.dedup_id <> ''
	ON CONFLICT (topic, dedup_id) DO UPDATE SET message_id = EXCLUDED.message_id, first_at = EXCLUDED.first_at
	WHERE {s}.dedup.first_at <= $6 - $12::bigint
	RETURNING dedup_id),
kept AS (SELECT b.* FROM batch b WHERE b.dedup_id = '' OR b.dedup_id IN (SELECT dedup_id FROM d)),
seqs AS (SELECT v, row_number() OVER (ORDER BY v) AS i FROM (SELECT nextval('{s}.seq') AS v FROM kept) x),
numbered AS (SELECT k.*, row_number() OVER (ORDER BY k.i) AS j FROM kept k),
ins AS (INSERT INTO {s}.messages (` + msgCols + `)
	SELECT sub.id, seqs.v, b.id, $1, b.key, b.priority, b.wake_at, $6, CASE WHEN b.ttl_ns > 0 THEN b.ttl_ns ELSE sub.default_ttl_ns END,
		CASE WHEN b.ttl_ns > 0 THEN ` + plus("$6", "b.ttl_ns") + ` WHEN sub.default_ttl_ns > 0 THEN ` + plus("$6", "sub.default_ttl_ns") + ` ELSE 0 END, b.headers, b.payload
	FROM numbered b JOIN seqs ON seqs.i = b.j, {s}.subscriptions sub WHERE sub.topic = $1
	RETURNING id),
notified AS (SELECT pg_notify($10, $1) WHERE $10 <> '' AND EXISTS (SELECT 1 FROM ins))
SELECT EXISTS (SELECT 1 FROM t), (SELECT count(*) FROM ins), coalesce((SELECT array_agg(dedup_id) FROM d), '{}'::text[]), (SELECT count(*) FROM notified)`)
	q.dedupOriginal = s(`SELECT message_id FROM {s}.dedup WHERE topic = $1 AND dedup_id = $2`)
	q.messageByID = s(`SELECT id, topic, key, priority, headers, payload, published_at FROM {s}.messages WHERE id = $1 LIMIT 1`)
	q.dedupPrune = s(`DELETE FROM {s}.dedup WHERE ctid IN (SELECT ctid FROM {s}.dedup WHERE first_at <= $1 LIMIT 1000)`)

	// deadRow is the dead letter of a row m of messages that is due: a
	// lease expired on its last attempt (reason max-attempts, at its
	// deadline), or a TTL passed while it waited or after its lease
	// expired (reason expired, at its expiry or the deadline); m carries
	// sub_name, sub_topic and max_attempts too.
	deadRow := `m.sub_id, m.seq, m.sub_name, m.sub_topic, m.id, m.topic, m.key, m.priority, m.published_at, m.ttl_ns,
	CASE WHEN m.state = {leased} AND m.max_attempts > 0 AND m.attempts >= m.max_attempts THEN {maxAttempts} ELSE {expiredReason} END,
	m.attempts,
	CASE WHEN m.state = {leased} THEN {leaseExpired} ELSE m.last_error END,
	CASE WHEN m.state = {leased} AND m.max_attempts > 0 AND m.attempts >= m.max_attempts THEN m.deadline
		WHEN m.state = {leased} THEN greatest(m.deadline, m.expires_at) ELSE m.expires_at END,
	CASE WHEN m.state = {leased} THEN ` + push("m.history", attempt("{attemptExpired}", "m.deadline", "m.deadline - m.leased_at", "{leaseExpired}")) + ` ELSE m.history END,
	m.headers, m.payload`

	// sweep dead-letters what is due at $1 on subscription $2 (sweepAll:
	// on every one; sweepOne: of row $3 alone). A lease is found among
	// the rows woken by $1 (every leased row was when it was leased), a
	// TTL by the expiring index.
	sweep := func(which string) string {
		return s(`WITH due AS (
	SELECT sub.id AS sub_id, d.seq, sub.name AS sub_name, sub.topic AS sub_topic, sub.max_attempts
	FROM {s}.subscriptions sub, LATERAL (
		SELECT m.seq FROM {s}.messages m
		WHERE m.sub_id = sub.id AND m.wake_at <= $1 AND m.state = {leased} AND m.deadline <= $1 AND sub.max_attempts > 0 AND m.attempts >= sub.max_attempts
		UNION
		SELECT m.seq FROM {s}.messages m
		WHERE m.sub_id = sub.id AND m.expires_at > 0 AND m.expires_at <= $1 AND (m.state = {waiting} OR m.deadline <= $1)) d
	WHERE ` + which + `),
gone AS (DELETE FROM {s}.messages m USING due WHERE m.seq = due.seq AND m.sub_id = due.sub_id
	RETURNING m.*, due.sub_name, due.sub_topic, due.max_attempts)
INSERT INTO {s}.dead (` + deadCols + `)
SELECT ` + deadRow + ` FROM gone m`)
	}
	q.sweep = sweep("sub.id = $2")
	q.sweepAll = sweep("true")
	q.sweepOne = sweep("sub.id = $2 AND d.seq = $3")

	// lease leases up to $3 of subscription $1's messages visible at $2,
	// by priority then publish order, skipping rows another poll holds
	// locked, for $4 nanoseconds; $5 is the subscription's attempts limit
	// (0: none), $6 its key concurrency. A row whose lease expired is
	// delivered again, its expiry written in its history; one that is due
	// (its last lease expired, its TTL passed) is dead-lettered instead.
	// It returns the leased rows, then a row of seq -1 whose last column is
	// how many it dead-lettered. The lease changes no indexed column, so
	// Postgres updates the row in its page (a HOT update: no index entry,
	// and the old version is pruned from the page without a vacuum).
	q.lease = s(`WITH cand AS (
	SELECT m.sub_id, m.seq,
		((m.expires_at > 0 AND m.expires_at <= $2) OR (m.state = {leased} AND $5 > 0 AND m.attempts >= $5)) AS due
	FROM {s}.messages m
	WHERE m.sub_id = $1 AND m.wake_at <= $2 AND (m.state = {waiting} OR m.deadline <= $2)
		AND ` + keyOK("$6") + `
		AND NOT (SELECT paused FROM {s}.subscriptions WHERE id = $1)
	ORDER BY m.priority DESC, m.seq
	LIMIT $3
	FOR UPDATE OF m SKIP LOCKED),
gone AS (DELETE FROM {s}.messages m USING cand, {s}.subscriptions sub
	WHERE m.seq = cand.seq AND m.sub_id = cand.sub_id AND cand.due AND sub.id = $1
	RETURNING m.*, sub.name AS sub_name, sub.topic AS sub_topic, sub.max_attempts),
dead AS (INSERT INTO {s}.dead (` + deadCols + `) SELECT ` + deadRow + ` FROM gone m RETURNING 1),
leased AS (UPDATE {s}.messages m SET state = {leased}, delivery = m.delivery + 1, attempts = m.attempts + 1,
	leased_at = $2, deadline = ` + plus("$2", "$4") + `,
	last_error = CASE WHEN m.state = {leased} THEN {leaseExpired} ELSE m.last_error END,
	history = CASE WHEN m.state = {leased} THEN ` + push("m.history", attempt("{attemptExpired}", "m.deadline", "m.deadline - m.leased_at", "{leaseExpired}")) + ` ELSE m.history END
	FROM cand WHERE m.seq = cand.seq AND m.sub_id = cand.sub_id AND NOT cand.due
	RETURNING m.seq, m.delivery, m.attempts, m.id, m.topic, m.key, m.priority, m.headers, m.payload, m.published_at, m.deadline)
SELECT * FROM leased
UNION ALL
SELECT -1, 0, 0, '00000000-0000-0000-0000-000000000000'::uuid, '', '', 0, NULL, ''::bytea, 0, (SELECT count(*) FROM dead)`)
	// nextVisible is when the next of subscription $1's messages becomes
	// visible, or a lease or a TTL runs out, after $2 (null: none will by
	// itself). Leases are found among the rows woken by $2.
	q.nextVisible = s(`SELECT least(
	(SELECT min(wake_at) FROM {s}.messages WHERE sub_id = $1 AND wake_at > $2),
	(SELECT min(deadline) FROM {s}.messages WHERE sub_id = $1 AND wake_at <= $2 AND state = {leased} AND deadline > $2),
	(SELECT min(expires_at) FROM {s}.messages WHERE sub_id = $1 AND expires_at > $2))`)

	// ack deletes the leases of subscription $1 whose (seq, delivery) are
	// in $2, $3 and current: leased now by that delivery, and not a last
	// attempt whose lease expired (at $4; $5 is the attempts limit): that
	// one is the sweep's. It returns the seqs it deleted; if one had a key,
	// it notifies channel $6 of topic $7 (its key's next may go now).
	q.ack = s(`WITH del AS (DELETE FROM {s}.messages m USING unnest($2::bigint[], $3::integer[]) AS a(seq, delivery)
	WHERE m.seq = ANY($2::bigint[]) AND m.sub_id + 0 = $1 AND m.seq = a.seq AND m.delivery = a.delivery AND m.state + 0 = {leased}
		AND NOT (m.deadline <= $4 AND $5 > 0 AND m.attempts >= $5)
	RETURNING m.seq, m.key),
n AS (SELECT pg_notify($6, $7) WHERE EXISTS (SELECT 1 FROM del WHERE key <> ''))
SELECT seq, (SELECT count(*) FROM n) FROM del`)
	// A settle finds its row by the primary key (seq, sub_id) alone:
	// "sub_id + 0" and "state + 0" leave no other index a condition to
	// use, so that no plan walks the subscription's rows instead, whatever
	// the statistics say (see genericTx).
	// current tells a lease that changed nothing apart: its message's
	// delivery and state now, or no row.
	// settled is true of lease ($1, $2, $3) settled by a Nack, Fail or
	// Release (its message waits under that delivery) or dead-lettered.
	q.settled = s(`SELECT EXISTS (SELECT 1 FROM {s}.messages WHERE sub_id = $1 AND seq = $2 AND delivery = $3 AND state = {waiting})
	OR (NOT EXISTS (SELECT 1 FROM {s}.messages WHERE sub_id = $1 AND seq = $2) AND EXISTS (SELECT 1 FROM {s}.dead WHERE sub_id = $1 AND seq = $2))`)
	q.current = s(`SELECT delivery, state FROM {s}.messages WHERE sub_id = $1 AND seq = $2`)

	// nack hands back lease ($1, $2, $3) live at $4 (before its deadline),
	// visible at $5, with last error $6 and its attempt's outcome $7 in its
	// history; or, on its last attempt ($8, 0: no limit), dead-letters it
	// (reason max-attempts, at $4). It returns how many it dead-lettered
	// and how many it handed back, and notifies channel $9 of topic $10.
	q.nack = s(`WITH cur AS (
	SELECT m.*, sub.name AS sub_name, sub.topic AS sub_topic FROM {s}.messages m JOIN {s}.subscriptions sub ON sub.id = m.sub_id
	WHERE m.seq = $2 AND m.sub_id + 0 = $1 AND m.delivery = $3 AND m.state + 0 = {leased} AND m.deadline > $4
	FOR UPDATE OF m),
gone AS (DELETE FROM {s}.messages x USING cur WHERE x.sub_id = cur.sub_id AND x.seq = cur.seq AND $8 > 0 AND cur.attempts >= $8
	RETURNING x.seq),
dead AS (INSERT INTO {s}.dead (` + deadCols + `)
	SELECT m.sub_id, m.seq, m.sub_name, m.sub_topic, m.id, m.topic, m.key, m.priority, m.published_at, m.ttl_ns, {maxAttempts}, m.attempts, $6::text, $4,
		` + push("m.history", attempt("$7::integer", "$4::bigint", "$4::bigint - m.leased_at", "$6::text")) + `, m.headers, m.payload
	FROM cur m WHERE m.seq IN (SELECT seq FROM gone)
	RETURNING 1),
back AS (UPDATE {s}.messages x SET state = {waiting}, wake_at = $5, last_error = $6::text,
		history = ` + strings.ReplaceAll(push("m.history", attempt("$7::integer", "$4::bigint", "$4::bigint - m.leased_at", "$6::text")), "m.", "cur.") + `
	FROM cur WHERE x.sub_id = cur.sub_id AND x.seq = cur.seq AND NOT ($8 > 0 AND cur.attempts >= $8)
	RETURNING 1)
SELECT (SELECT count(*) FROM dead), (SELECT count(*) FROM back), pg_notify($9, $10)`)
	// extend sets live lease ($1, $2, $3)'s deadline to $5, at $4.
	q.extend = s(`UPDATE {s}.messages SET deadline = $5
WHERE seq = $2 AND sub_id + 0 = $1 AND delivery = $3 AND state + 0 = {leased} AND deadline > $4`)
	// release hands live lease ($1, $2, $3) back at $4, visible at $5,
	// its attempt given back; it returns how many, and notifies channel $6
	// of topic $7.
	q.release = s(`WITH r AS (UPDATE {s}.messages m SET state = {waiting}, wake_at = $5, attempts = m.attempts - 1,
	history = ` + push("m.history", attempt("{attemptReleased}", "$4::bigint", "$4::bigint - m.leased_at", "''")) + `
	WHERE m.seq = $2 AND m.sub_id + 0 = $1 AND m.delivery = $3 AND m.state + 0 = {leased} AND m.deadline > $4
	RETURNING 1)
SELECT (SELECT count(*) FROM r), pg_notify($6, $7)`)
	// reject dead-letters live lease ($1, $2, $3) at $4 with reason $8
	// and last error $5; it returns how many, and notifies channel $6 of
	// topic $7.
	q.reject = s(`WITH gone AS (
	DELETE FROM {s}.messages m USING {s}.subscriptions sub
	WHERE m.sub_id = sub.id AND sub.id = $1 AND m.seq = $2 AND m.sub_id + 0 = $1 AND m.delivery = $3 AND m.state + 0 = {leased} AND m.deadline > $4
	RETURNING m.*, sub.name AS sub_name, sub.topic AS sub_topic),
ins AS (INSERT INTO {s}.dead (` + deadCols + `)
	SELECT m.sub_id, m.seq, m.sub_name, m.sub_topic, m.id, m.topic, m.key, m.priority, m.published_at, m.ttl_ns, $8::int, m.attempts, $5::text, $4::bigint,
		` + push("m.history", attempt("{attemptRejected}", "$4::bigint", "$4::bigint - m.leased_at", "$5::text")) + `, m.headers, m.payload
	FROM gone m
	RETURNING 1)
SELECT (SELECT count(*) FROM ins), pg_notify($6, $7)`)

	// stats counts subscription $1's messages by state at $2 ($3: its key
	// concurrency, $4: its attempts limit).
	q.stats = s(`SELECT
	count(*) FILTER (WHERE wake_at <= $2 AND (state = {waiting} OR deadline <= $2) AND (state = {waiting} OR $4 = 0 OR attempts < $4) AND ` + keyOK("$3") + `),
	count(*) FILTER (WHERE state = {waiting} AND wake_at > $2),
	count(*) FILTER (WHERE state = {leased} AND deadline > $2),
	count(*) FILTER (WHERE wake_at <= $2 AND (state = {waiting} OR deadline <= $2) AND NOT ` + keyOK("$3") + `),
	coalesce(min(published_at) FILTER (WHERE wake_at <= $2 AND state = {waiting} AND ` + keyOK("$3") + `), 0)
FROM {s}.messages m WHERE m.sub_id = $1`)
	q.deadCount = s(`SELECT reason, count(*) FROM {s}.dead WHERE sub_id = $1 GROUP BY reason`)
	// peek lists subscription $1's messages in publish order after seq
	// $3, up to $5, with their state at $2 ($4: the key concurrency): only
	// the message $6 (null: any), of key $7 ('': any), in state $8 (0:
	// any).
	q.peek = s(`SELECT * FROM (
	SELECT m.seq, m.id, m.topic, m.key, m.priority, m.headers, m.payload, m.published_at,
		CASE WHEN m.state = {leased} THEN m.deadline ELSE m.wake_at END AS at, m.attempts, m.last_error, m.history,
		` + state("$2", "$4") + ` AS st
	FROM {s}.messages m
	WHERE m.sub_id = $1 AND m.seq > $3 AND ($6::uuid IS NULL OR m.id = $6) AND ($7::text = '' OR m.key = $7)
	ORDER BY m.seq) x
WHERE $8::integer = 0 OR x.st = $8
LIMIT $5`)
	q.purge = s(`DELETE FROM {s}.messages WHERE sub_id = $1`)
	// deleteMessages deletes subscription $1's messages of IDs $2,
	// wherever each waits, returning their IDs; it notifies channel $3 of
	// topic $4 (a key's next message may go).
	q.deleteMessages = s(`WITH del AS (DELETE FROM {s}.messages WHERE sub_id = $1 AND id = ANY($2::uuid[]) RETURNING id)
SELECT id, pg_notify($3, $4) FROM del`)
	// makeVisible makes subscription $1's delayed messages of IDs $2
	// visible at $3 and returns the state at $3 of each it holds ($4: the
	// key concurrency) before the change; it notifies channel $5 of topic
	// $6.
	q.makeVisible = s(`WITH cur AS (
	SELECT m.seq, m.id, ` + state("$3", "$4") + ` AS st
	FROM {s}.messages m WHERE m.sub_id = $1 AND m.id = ANY($2::uuid[])),
upd AS (UPDATE {s}.messages x SET wake_at = $3 FROM cur
	WHERE x.sub_id = $1 AND x.seq = cur.seq AND cur.st = {stDelayed} AND x.state = {waiting} AND x.wake_at > $3 RETURNING x.id)
SELECT cur.id, cur.st, EXISTS (SELECT 1 FROM upd WHERE upd.id = cur.id), pg_notify($5, $6) FROM cur`)
	// editPayload sets the payload of subscription $1's message $2 to $3.
	q.editPayload = s(`UPDATE {s}.messages SET payload = $3 WHERE sub_id = $1 AND id = $2`)

	q.deadLetters = s(`SELECT ` + deadCols + ` FROM {s}.dead ORDER BY dead_at, sub_id, seq`)
	// redrive puts dead letter ($1, $2) back on its subscription, visible
	// at $3, attempts reset, its TTL counted from $3, in its place.
	q.redrive = s(`WITH gone AS (DELETE FROM {s}.dead WHERE sub_id = $1 AND seq = $2 RETURNING *),
back AS (INSERT INTO {s}.messages (` + msgCols + `, history)
	SELECT g.sub_id, g.seq, g.id, g.topic, g.key, g.priority, $3, g.published_at, g.ttl_ns,
		CASE WHEN g.ttl_ns > 0 THEN ` + plus("$3", "g.ttl_ns") + ` ELSE 0 END, g.headers, coalesce($4, g.payload), g.history
	FROM gone g WHERE EXISTS (SELECT 1 FROM {s}.subscriptions WHERE id = g.sub_id)
	RETURNING topic)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM back), pg_notify($5, coalesce((SELECT topic FROM back LIMIT 1), ''))`)
	q.deadPrune = s(`DELETE FROM {s}.dead WHERE sub_id = $1 AND seq = $2`)
	return q
}
