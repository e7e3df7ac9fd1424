package pgleasebus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leasebus/leasebus/queue"
)

// deadLetter is one row of the dead table, its payload still encoded.
type deadLetter struct {
	subID, seq   int64
	subscription string
	subTopic     string
	id           uuid.UUID
	topic, key   string
	priority     int16
	published    int64
	ttl          int64
	reason       int16
	attempts     int32
	lastError    string
	deadAt       int64
	history      []byte
	headers      map[string]string
	payload      []byte
}

// deadLetters reads every dead letter, oldest first, after settling what
// is due at the clock's now (a lease expired on its last attempt, a TTL
// passed): every call that shows state does.
func (b *Bus) deadLetters(ctx context.Context) ([]deadLetter, error) {
	if _, err := b.pool.Exec(ctx, b.q.sweepAll, b.now()); err != nil {
		return nil, err
	}
	rows, err := b.pool.Query(ctx, b.q.deadLetters)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []deadLetter
	for rows.Next() {
		var d deadLetter
		if err := rows.Scan(&d.subID, &d.seq, &d.subscription, &d.subTopic, &d.id, &d.topic, &d.key, &d.priority, &d.published, &d.ttl,
			&d.reason, &d.attempts, &d.lastError, &d.deadAt, &d.history, &d.headers, &d.payload); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// letter decodes d into a dead letter of T's.
func letter[T any](d deadLetter, codec queue.Codec[T]) (queue.DeadLetter[T], error) {
	payload, err := codec.Decode(d.payload)
	if err != nil {
		return queue.DeadLetter[T]{}, fmt.Errorf("pgleasebus: dead letter %v of %s: decode: %w", d.id, d.subscription, err)
	}
	dl := queue.DeadLetter[T]{
		Subscription: d.subscription, Topic: d.subTopic,
		Message: queue.Message[T]{ID: d.id, Topic: d.topic, Key: d.key, Payload: payload, Priority: queue.Priority(d.priority), PublishedAt: time.Unix(0, d.published)},
		Reason:  queue.Reason(d.reason), Attempts: int(d.attempts), LastError: d.lastError, At: time.Unix(0, d.deadAt),
	}
	if len(d.headers) > 0 {
		dl.Message.Headers = queue.NewHeaders(d.headers)
	}
	dl.History = history(d.history)
	return dl, nil
}

// attemptJSON is one attempt of a history column.
type attemptJSON struct {
	Attempt int    `json:"attempt"`
	Outcome int    `json:"outcome"`
	At      int64  `json:"at"`
	Held    int64  `json:"held"`
	Error   string `json:"error"`
}

// history decodes a history column; one that does not decode is none.
func history(data []byte) []queue.Attempt {
	var as []attemptJSON
	if len(data) == 0 || json.Unmarshal(data, &as) != nil {
		return nil
	}
	out := make([]queue.Attempt, len(as))
	for i, a := range as {
		out[i] = queue.Attempt{Attempt: a.Attempt, Outcome: queue.AttemptOutcome(a.Outcome), At: time.Unix(0, a.At), Held: time.Duration(a.Held), Error: a.Error}
	}
	return out
}

// DeadLetters returns the bus's dead letters of T's, oldest first, after
// settling what is due: a lease expired on its last attempt, a TTL passed.
// A letter whose payload codec cannot decode is an error.
func DeadLetters[T any](ctx context.Context, b *Bus, codec queue.Codec[T]) ([]queue.DeadLetter[T], error) {
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	ds, err := b.deadLetters(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgleasebus: dead letters: %w", err)
	}
	out := make([]queue.DeadLetter[T], 0, len(ds))
	for _, d := range ds {
		dl, err := letter(d, codec)
		if err != nil {
			return nil, err
		}
		out = append(out, dl)
	}
	return out, nil
}

// Redrive puts every dead letter for which match returns true back on
// its subscription, as it was: attempts reset, its place (publish order)
// and key kept, its TTL counted from the redrive; and returns how many.
// A letter whose subscription is gone is left where it is. Each letter is
// moved in one statement: after a crash it is in one place, never two.
func Redrive[T any](ctx context.Context, b *Bus, codec queue.Codec[T], match func(queue.DeadLetter[T]) bool) (int, error) {
	return RedriveWith(ctx, b, codec, func(dl queue.DeadLetter[T]) (T, bool) { return dl.Message.Payload, match(dl) })
}

// RedriveWith is Redrive with the payload fix returns for each letter (an
// edited one: the console's "edit and redrive"), which codec encodes; a
// letter fix returns false for stays.
func RedriveWith[T any](ctx context.Context, b *Bus, codec queue.Codec[T], fix func(queue.DeadLetter[T]) (payload T, ok bool)) (int, error) {
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	ds, err := b.deadLetters(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgleasebus: redrive: %w", err)
	}
	n := 0
	for _, d := range ds {
		dl, err := letter(d, codec)
		if err != nil {
			return n, err
		}
		payload, ok := fix(dl)
		if !ok {
			continue
		}
		body, err := codec.Encode(nil, payload)
		if err != nil {
			return n, fmt.Errorf("pgleasebus: redrive %v: encode: %w", dl.Message.ID, err)
		}
		body = notNil(body)
		var gone, back int64
		var notified any
		if err := b.pool.QueryRow(ctx, b.q.redrive, d.subID, d.seq, b.now(), body, b.cfg.schema).Scan(&gone, &back, &notified); err != nil {
			return n, fmt.Errorf("pgleasebus: redrive %v: %w", dl.Message.ID, err)
		}
		if back > 0 {
			n++
			b.wake(d.topic)
		}
	}
	return n, nil
}

// DiscardDeadLetters deletes for good every dead letter for which match
// returns true, and returns how many.
func DiscardDeadLetters[T any](ctx context.Context, b *Bus, codec queue.Codec[T], match func(queue.DeadLetter[T]) bool) (int, error) {
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	ds, err := b.deadLetters(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgleasebus: discard: %w", err)
	}
	n := 0
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for _, d := range ds {
			dl, err := letter(d, codec)
			if err != nil {
				return err
			}
			if !match(dl) {
				continue
			}
			tag, err := tx.Exec(ctx, b.q.deadPrune, d.subID, d.seq)
			if err != nil {
				return err
			}
			n += int(tag.RowsAffected())
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pgleasebus: discard: %w", err)
	}
	return n, nil
}
