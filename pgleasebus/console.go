package pgleasebus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// consoleNote is what the console says of every subscription on
// PostgreSQL.
const consoleNote = "The database keeps what each subscription holds, not what went through it: " +
	"the published, delivered and acked counters stay 0 here (each process's handle counts its own: Subscription.Stats)."

// ConsoleBackend returns b as a console backend, to serve with
// console.NewFor: every subscription of the bus with its gauges and
// settings, as every process sees them; what each holds (peek, search by
// message ID or key), deleted, made visible or edited; the dead letters,
// redriven as they were or edited, or discarded; purge; pause and resume.
// codec decodes payloads (nil: queue.DefaultCodec). Every page reads the
// database afresh. A nil b is an error matching queue.ErrInvalidArgument.
func ConsoleBackend[T any](b *Bus, codec queue.Codec[T]) (backend.Inspector[T], error) {
	if b == nil {
		return nil, backend.Invalid("ConsoleBackend: nil *Bus")
	}
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	return &consoleBackend[T]{b: b, codec: codec}, nil
}

type consoleBackend[T any] struct {
	b     *Bus
	codec queue.Codec[T]
}

// subRow is a subscription as the table holds it.
type subRow struct {
	topic, name string
	id          int64
	cfg         subConfig
}

// lookup returns the subscription name of topic, or an error matching
// queue.ErrSubscriptionNotFound.
func (b *Bus) lookup(ctx context.Context, topic, name string) (subRow, error) {
	r := subRow{topic: topic, name: name}
	var paused bool
	err := b.pool.QueryRow(ctx, b.q.subscription, topic, name).Scan(scanConfig(&r.id, &r.cfg, &paused)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("pgleasebus: subscription %s/%s: %w", topic, name, queue.ErrSubscriptionNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("pgleasebus: subscription %s/%s: %w", topic, name, err)
	}
	return r, nil
}

// subscriptions returns every subscription, by topic then name.
func (b *Bus) subscriptions(ctx context.Context) ([]subRow, error) {
	rows, err := b.pool.Query(ctx, b.q.subscriptions)
	if err != nil {
		return nil, fmt.Errorf("pgleasebus: subscriptions: %w", err)
	}
	defer rows.Close()
	var out []subRow
	for rows.Next() {
		var r subRow
		var paused bool
		if err := rows.Scan(append([]any{&r.topic, &r.name}, scanConfig(&r.id, &r.cfg, &paused)...)...); err != nil {
			return nil, fmt.Errorf("pgleasebus: subscriptions: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (c *consoleBackend[T]) Now() time.Time { return c.b.cfg.clk.Now() }

func (c *consoleBackend[T]) info(ctx context.Context, r subRow) (backend.SubscriptionInfo, error) {
	st, err := c.b.gauges(ctx, r.id, r.cfg)
	if err != nil {
		return backend.SubscriptionInfo{}, err
	}
	return backend.SubscriptionInfo{Topic: r.topic, Name: r.name, Stats: st, Options: r.cfg.settings(), Note: consoleNote}, nil
}

// settings names c's settings as their options.
func (c subConfig) settings() []backend.Setting {
	attempts := fmt.Sprint(c.maxAttempts)
	if c.maxAttempts == queue.UnlimitedAttempts {
		attempts = "unlimited"
	}
	r := c.retry
	retry := "1s doubling to 1m (the default)"
	if r.Initial != 0 || r.Max != 0 || r.Multiplier != 0 || r.Jitter != 0 || r.NoBackoff {
		retry = fmt.Sprintf("initial %v, max %v, multiplier %v, jitter %v", r.Initial, r.Max, r.Multiplier, r.Jitter)
		if r.NoBackoff {
			retry += ", no backoff"
		}
	}
	s := []backend.Setting{
		{Option: "WithVisibilityTimeout", Value: c.vis.String()},
		{Option: "WithMaxAttempts", Value: attempts},
		{Option: "WithRetry", Value: retry},
		{Option: "WithKeyConcurrency", Value: fmt.Sprintf("%d of a key at once", c.keyConcurrency)},
	}
	if c.ttl > 0 {
		s = append(s, backend.Setting{Option: "WithDefaultTTL", Value: c.ttl.String()})
	}
	return s
}

func (c *consoleBackend[T]) Subscriptions(ctx context.Context) ([]backend.SubscriptionInfo, error) {
	rows, err := c.b.subscriptions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]backend.SubscriptionInfo, 0, len(rows))
	for _, r := range rows {
		si, err := c.info(ctx, r)
		if errors.Is(err, queue.ErrSubscriptionNotFound) {
			continue // unsubscribed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, si)
	}
	return out, nil
}

func (c *consoleBackend[T]) Subscription(ctx context.Context, topic, name string) (backend.SubscriptionInfo, error) {
	r, err := c.b.lookup(ctx, topic, name)
	if err != nil {
		return backend.SubscriptionInfo{}, err
	}
	return c.info(ctx, r)
}

func (c *consoleBackend[T]) DeadLetters(ctx context.Context) ([]queue.DeadLetter[T], error) {
	return DeadLetters(ctx, c.b, c.codec)
}

func (c *consoleBackend[T]) Redrive(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	return Redrive(ctx, c.b, c.codec, match)
}

// RedriveWith puts back the dead letters fix picks, each with the payload
// fix gives it (console.Editor).
func (c *consoleBackend[T]) RedriveWith(ctx context.Context, fix func(queue.DeadLetter[T]) (T, bool)) (int, error) {
	return RedriveWith(ctx, c.b, c.codec, fix)
}

// DiscardDeadLetters deletes the matching dead letters (console.Discarder).
func (c *consoleBackend[T]) DiscardDeadLetters(ctx context.Context, match func(queue.DeadLetter[T]) bool) (int, error) {
	return DiscardDeadLetters(ctx, c.b, c.codec, match)
}

// Purge deletes what the subscription holds (console.Purger).
func (c *consoleBackend[T]) Purge(ctx context.Context, topic, name string) (int, error) {
	r, err := c.b.lookup(ctx, topic, name)
	if err != nil {
		return 0, err
	}
	return c.b.purge(ctx, r.id, topic)
}

// Pause pauses the subscription's delivery in every process
// (console.Pauser).
func (c *consoleBackend[T]) Pause(ctx context.Context, topic, name string) error {
	return c.pause(ctx, topic, name, true)
}

// Resume ends a Pause.
func (c *consoleBackend[T]) Resume(ctx context.Context, topic, name string) error {
	return c.pause(ctx, topic, name, false)
}

func (c *consoleBackend[T]) pause(ctx context.Context, topic, name string, paused bool) error {
	r, err := c.b.lookup(ctx, topic, name)
	if err != nil {
		return err
	}
	return c.b.setPaused(ctx, r.id, topic, paused)
}

// Peek shows what the subscription holds (console.Peeker).
func (c *consoleBackend[T]) Peek(ctx context.Context, topic, name string, q queue.PeekQuery) ([]queue.Held[T], error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	r, err := c.b.lookup(ctx, topic, name)
	if err != nil {
		return nil, err
	}
	return peek(ctx, c.b, r.id, r.cfg, c.codec, q)
}

// DeleteMessages deletes held messages (console.MessageActor).
func (c *consoleBackend[T]) DeleteMessages(ctx context.Context, topic, name string, ids []uuid.UUID) (int, error) {
	r, err := c.b.lookup(ctx, topic, name)
	if err != nil {
		return 0, err
	}
	return c.b.deleteMessages(ctx, r.id, topic, ids)
}

// MakeVisible makes delayed messages visible now (console.MessageActor).
func (c *consoleBackend[T]) MakeVisible(ctx context.Context, topic, name string, ids []uuid.UUID) (int, error) {
	r, err := c.b.lookup(ctx, topic, name)
	if err != nil {
		return 0, err
	}
	return c.b.makeVisible(ctx, r.id, r.cfg, topic, ids)
}

// EditPayload replaces a held message's payload (console.MessageActor).
func (c *consoleBackend[T]) EditPayload(ctx context.Context, topic, name string, id uuid.UUID, payload T) error {
	r, err := c.b.lookup(ctx, topic, name)
	if err != nil {
		return err
	}
	return editPayload(ctx, c.b, r.id, c.codec, id, payload)
}
