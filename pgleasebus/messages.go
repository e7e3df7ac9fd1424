package pgleasebus

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// DeleteMessages deletes the messages with the IDs given that the
// subscription holds, wherever each waits (visible, delayed, held back
// behind its key, in flight: its consumer's Ack then returns
// queue.ErrLeaseNotFound), and returns how many; the next message of an
// ordering key gets its turn. Only this subscription's copies go. An ID
// it does not hold is an error matching queue.ErrMessageNotFound (the
// others are deleted all the same).
func (s *Subscription[T]) DeleteMessages(ctx context.Context, ids ...uuid.UUID) (int, error) {
	if s.isClosed() {
		return 0, s.errClosed("delete messages")
	}
	return s.bus.deleteMessages(ctx, s.id, s.topic, ids)
}

func (b *Bus) deleteMessages(ctx context.Context, id int64, topic string, ids []uuid.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	rows, err := b.pool.Query(ctx, b.q.deleteMessages, id, ids, b.cfg.schema, topic)
	if err != nil {
		return 0, fmt.Errorf("pgleasebus: delete messages: %w", err)
	}
	gone := map[uuid.UUID]bool{}
	for rows.Next() {
		var mid uuid.UUID
		var notified any
		if err := rows.Scan(&mid, &notified); err != nil {
			rows.Close()
			return 0, fmt.Errorf("pgleasebus: delete messages: %w", err)
		}
		gone[mid] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("pgleasebus: delete messages: %w", err)
	}
	if len(gone) > 0 {
		b.wake(topic)
	}
	return len(gone), notFound(ids, gone)
}

// notFound returns the error naming the IDs of ids that found is false
// of, or nil.
func notFound(ids []uuid.UUID, found map[uuid.UUID]bool) error {
	var errs []error
	for _, id := range ids {
		if !found[id] {
			errs = append(errs, fmt.Errorf("pgleasebus: message %v: %w", id, queue.ErrMessageNotFound))
			found[id] = true // named once
		}
	}
	return errors.Join(errs...)
}

// MakeVisible makes the delayed messages with the IDs given (waiting out
// a publish delay or a retry's backoff) visible now, each in its place,
// as SQS's ChangeMessageVisibility to 0, and returns how many. One
// visible already is left as it is; one in flight or held back behind its
// key is an error matching queue.ErrInvalidArgument, and an ID the
// subscription does not hold one matching queue.ErrMessageNotFound (the
// others are made visible all the same).
func (s *Subscription[T]) MakeVisible(ctx context.Context, ids ...uuid.UUID) (int, error) {
	if s.isClosed() {
		return 0, s.errClosed("make visible")
	}
	return s.bus.makeVisible(ctx, s.id, s.cfg, s.topic, ids)
}

func (b *Bus) makeVisible(ctx context.Context, id int64, c subConfig, topic string, ids []uuid.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	rows, err := b.pool.Query(ctx, b.q.makeVisible, id, ids, b.now(), c.keyConcurrency, b.cfg.schema, topic)
	if err != nil {
		return 0, fmt.Errorf("pgleasebus: make visible: %w", err)
	}
	found := map[uuid.UUID]bool{}
	var errs []error
	n := 0
	for rows.Next() {
		var (
			mid      uuid.UUID
			st       int32
			changed  bool
			notified any
		)
		if err := rows.Scan(&mid, &st, &changed, &notified); err != nil {
			rows.Close()
			return 0, fmt.Errorf("pgleasebus: make visible: %w", err)
		}
		found[mid] = true
		switch {
		case changed:
			n++
		case queue.State(st) == queue.StateInFlight || queue.State(st) == queue.StateHeldBack:
			errs = append(errs, fmt.Errorf("pgleasebus: make visible %v: it is %v: %w", mid, queue.State(st), queue.ErrInvalidArgument))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("pgleasebus: make visible: %w", err)
	}
	if n > 0 {
		b.wake(topic)
	}
	errs = append(errs, notFound(slices.Clone(ids), found))
	return n, errors.Join(errs...)
}

// EditPayload replaces the payload of the message with ID id that the
// subscription holds: it keeps its ID, place, attempts, key, headers and
// state, and its next delivery carries the new payload (a consumer that
// holds it in flight keeps the old one). Only this subscription's copy
// changes. A message the subscription does not hold is an error matching
// queue.ErrMessageNotFound; one over the bus's size limit, ErrTooLarge.
func (s *Subscription[T]) EditPayload(ctx context.Context, id uuid.UUID, payload T) error {
	if s.isClosed() {
		return s.errClosed("edit payload")
	}
	return editPayload(ctx, s.bus, s.id, s.codec, id, payload)
}

func editPayload[T any](ctx context.Context, b *Bus, sub int64, codec queue.Codec[T], id uuid.UUID, payload T) error {
	body, err := codec.Encode(nil, payload)
	if err != nil {
		return fmt.Errorf("pgleasebus: edit %v: encode: %w", id, err)
	}
	body = notNil(body)
	if len(body) > b.cfg.maxSize {
		return fmt.Errorf("pgleasebus: edit %v: %w: %d bytes, the limit is %d", id, ErrTooLarge, len(body), b.cfg.maxSize)
	}
	tag, err := b.pool.Exec(ctx, b.q.editPayload, sub, id, body)
	if err != nil {
		return fmt.Errorf("pgleasebus: edit %v: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgleasebus: edit %v: %w", id, queue.ErrMessageNotFound)
	}
	return nil
}
