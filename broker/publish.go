package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// Publish publishes payload to topic and returns the message as stored
// (its ID and PublishedAt filled in). The envelope is stored once and
// offered to every subscription of the topic whose filter accepts it; a
// topic without subscriptions accepts and drops it.
//
// A subscription that is full applies its overflow policy. Under
// OverflowReject or OverflowBlock a full subscription can refuse the
// message while others accept it: Publish then returns the message and an
// error naming each refusing subscription, matching queue.ErrQueueFull;
// errors.As with a *queue.FullError gives a refusing subscription and its
// limit (errors.Join keeps each: use a loop over Unwrap() []error for all).
// With WithDedupID, such a partly refused message keeps its ID: a retry
// with the ID returns it and queues nothing (the subscriptions that
// refused it stay without it); only a message no subscription took leaves
// its ID free.
// A ctx already done returns its error and publishes nothing; one that
// ends while a full OverflowBlock subscription blocks the publish ends the
// wait (a *queue.FullError that wraps ctx's error).
// A missing topic is ErrTopicNotFound; after Close, queue.ErrClosed. A
// Publish racing Close returns queue.ErrClosed unless every subscription
// took the message first: a nil error means that every subscription that
// accepted the message holds it (on a durable broker, in the journal).
func (b *Broker[T]) Publish(ctx context.Context, topic string, payload T, opts ...PublishOption) (queue.Message[T], error) {
	if ctx == nil {
		return queue.Message[T]{}, backend.Invalid("Publish: nil context")
	}
	if err := ctx.Err(); err != nil {
		return queue.Message[T]{}, err
	}
	var pc publishConfig
	if err := pc.Apply(opts...); err != nil {
		return queue.Message[T]{}, err
	}
	if pc.DedupIDs != nil {
		return queue.Message[T]{}, backend.Invalid("Publish: WithDedupIDs is for PublishBatch (WithDedupID names one message)")
	}
	m, _, err := b.publish(ctx, topic, payload, &pc)
	if m == nil {
		return queue.Message[T]{}, err
	}
	return *m, err
}

// PublishBatch publishes each payload to topic, in order, as Publish would
// with the same options, and returns the messages as stored. The batch
// reads the clock once (every message has the same PublishedAt) and
// snapshots the topic's subscriptions once; on a durable broker it waits
// for the disk once, which under SyncAlways makes it many times faster
// than as many Publish calls. A payload some subscription refuses
// (OverflowReject, OverflowBlock) is still returned, and the error joins
// each refusal. WithDedupIDs gives each payload its dedup ID (a duplicate
// returns the original message in its place); WithDedupID is invalid here
// (one ID cannot name many messages). An empty batch returns nil.
func (b *Broker[T]) PublishBatch(ctx context.Context, topic string, payloads []T, opts ...PublishOption) ([]queue.Message[T], error) {
	if ctx == nil {
		return nil, backend.Invalid("PublishBatch: nil context")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var pc publishConfig
	if err := pc.Apply(opts...); err != nil {
		return nil, err
	}
	ids := pc.DedupIDs
	switch {
	case pc.DedupID != "":
		return nil, backend.Invalid("PublishBatch: WithDedupID cannot name a batch (WithDedupIDs names each message)")
	case ids != nil && len(ids) != len(payloads):
		return nil, backend.Invalid("PublishBatch: %d dedup IDs for %d payloads", len(ids), len(payloads))
	}
	t, subs, err := b.lookup(topic)
	if err != nil {
		return nil, err
	}
	defer b.leave()
	if len(payloads) == 0 {
		return nil, nil
	}
	now := b.now.Now()
	ms := make([]queue.Message[T], len(payloads))
	var errs []error
	var g *group[T] // with IDs or a fan-out: the batch is one commit (up to maxGroup bytes)
	if ids != nil || len(subs) > 1 {
		g = b.dur.newGroup()
	}
	var inBatch map[string]int // the message each dedup ID of the group names
	for i, p := range payloads {
		if ids != nil {
			pc.DedupID = ids[i]
			if j, ok := inBatch[ids[i]]; ok { // its ID's group is not flushed yet
				ms[i] = ms[j] // the original, stored a moment ago
				continue
			}
		}
		m, accepted, err := b.publishTo(ctx, t, subs, p, &pc, now, g)
		if m != nil {
			ms[i] = *m
			// Its ID is in the group, pending until the flush (see
			// publishTo), unless no subscription took it and one refused it.
			if ids != nil && g != nil && (err == nil || accepted > 0) {
				if inBatch == nil {
					inBatch = make(map[string]int, len(payloads)-i)
				}
				inBatch[ids[i]] = i
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("message %d: %w", i, err))
		}
		if g != nil && g.size() >= maxGroup {
			b.dur.flush(g)
			g, inBatch = b.dur.newGroup(), nil
		}
	}
	if g != nil {
		b.dur.flush(g)
	}
	if len(subs) > 0 {
		if err := b.commit(); err != nil {
			for i, id := range ids { // not stored after all
				t.dedup.forgetMessage(id, ms[i])
			}
			errs = append(errs, err)
		}
	}
	return ms, errors.Join(errs...)
}

// CheckPublish returns the error Publish returns for a publish to topic
// with o that is refused whatever the broker holds (a topic name it does
// not take, an option out of range, WithDedupIDs on one message), or nil:
// the backend.PublishChecker that the outbox checks a row with before it
// writes it. It does not look topic up (a missing topic is made by
// CreateTopic, so Publish's ErrTopicNotFound is not for good), and cannot
// know the size of a payload it is not given (a durable broker's limit).
func (b *Broker[T]) CheckPublish(topic string, o queue.PublishOptions) error {
	if err := validTopic(topic); err != nil {
		return fmt.Errorf("publish %q: %w", topic, err)
	}
	if o.DedupIDs != nil {
		return backend.Invalid("Publish: WithDedupIDs is for PublishBatch (WithDedupID names one message)")
	}
	return o.Validate()
}

// lookup returns a topic and its subscriptions as of now. A nil error
// means the call was entered (see enter): the caller calls b.leave when
// its records are appended and committed.
func (b *Broker[T]) lookup(topic string) (*topicEntry[T], []*Subscription[T], error) {
	if b.lockFree {
		if m := b.published.Load(); m != nil {
			if t := (*m)[topic]; t != nil { // a Close after this load: the offers say ErrClosed
				return t, *t.subs.Load(), nil
			}
		}
		// Not there, or closed: the locked path says which.
	}
	b.mu.RLock()
	t, err := b.topicLocked("publish", topic)
	if err != nil {
		b.mu.RUnlock()
		return nil, nil, err
	}
	b.dur.enter()
	subs := *t.subs.Load()
	b.mu.RUnlock()
	if b.lockFree {
		b.refreshTopics()
	}
	return t, subs, nil
}

// enter reports whether the broker is open and then tells its durability
// that a call is under way (a zero Broker has none).
func (b *Broker[T]) enter() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return false
	}
	if b.dur != nil {
		b.dur.enter()
	}
	return true
}

// leave ends a call that lookup or enter counted.
func (b *Broker[T]) leave() {
	if b.dur != nil {
		b.dur.leave()
	}
}

// publish is Publish after the options are checked; it also returns how
// many subscriptions accepted the message.
func (b *Broker[T]) publish(ctx context.Context, topic string, payload T, pc *publishConfig) (*queue.Message[T], int, error) {
	t, subs, err := b.lookup(topic)
	if err != nil {
		return nil, 0, err
	}
	defer b.leave()
	var g *group[T]
	if len(subs) > 1 || pc.DedupID != "" || pc.forget != nil || pc.settle != nil {
		g = b.dur.newGroup() // more than one record: one commit
	}
	m, accepted, err := b.publishTo(ctx, t, subs, payload, pc, b.now.Now(), g)
	if g != nil {
		b.dur.flush(g)
	}
	if len(subs) > 0 && (err == nil || accepted > 0) {
		if cerr := b.commit(); cerr != nil {
			if pc.DedupID != "" && m != nil {
				t.dedup.forgetMessage(pc.DedupID, *m) // not stored after all
			}
			err = errors.Join(err, cerr)
		}
	}
	return m, accepted, err
}

// publishTo offers one message to subs, without committing a durable
// broker's records (the caller does, once). With a group (a durable
// broker's), the message's records, its dedup ID and pc.forget go into g,
// which the caller flushes; without one, each put is appended as its offer
// makes it.
func (b *Broker[T]) publishTo(ctx context.Context, t *topicEntry[T], subs []*Subscription[T], payload T, pc *publishConfig, now time.Time, g *group[T]) (*queue.Message[T], int, error) {
	m := &queue.Message[T]{
		ID:          t.ids.newID(),
		Topic:       t.name,
		Key:         pc.Key,
		Payload:     payload,
		Priority:    pc.Priority,
		Headers:     queue.NewHeaders(pc.Headers),
		PublishedAt: now,
	}
	var opts [3]core.OfferOption
	offer := opts[:0]
	if pc.TTL > 0 {
		offer = append(offer, core.WithTTL(pc.TTL))
	}
	env, err := b.dur.prepare(m)
	if err != nil {
		return nil, 0, fmt.Errorf("publish to %q: %w", t.name, err)
	}
	if env != nil { // encoded once, logged by every subscription, committed once
		env.grp = g
		offer = append(offer, core.WithNote(env), core.WithDeferredCommit())
		defer b.dur.release(env)
	}
	var reserved *dedupEntry[T]
	if pc.DedupID != "" {
		e, orig, dup, err := t.dedup.reserve(ctx, pc.DedupID, m, b.dedupWindow, b.dedupLimit)
		switch {
		case err != nil:
			return nil, 0, fmt.Errorf("publish to %q: %w", t.name, err)
		case dup:
			pc.duplicate = true
			return &orig, 0, nil
		}
		reserved = e
	}
	accepted := 0
	var errs []error
	for _, s := range subs {
		if !s.accepts(m) {
			continue
		}
		switch err := s.q.Offer(ctx, m, pc.Delay, offer...); {
		case err == nil:
			accepted++
		case errors.Is(err, queue.ErrClosed) && !b.isClosed():
			// Unsubscribed meanwhile: simply gone. (Closed with the
			// broker, it is a refusal: Close won.)
		default:
			errs = append(errs, err)
		}
	}
	err = errors.Join(errs...)
	switch {
	case reserved == nil:
	case err != nil && accepted == 0:
		t.dedup.forget(reserved) // stored nowhere: a retry must queue it
	case g != nil: // recorded and confirmed with the message's puts
		g.addDedup(&t.dedup, reserved, t.name)
	default:
		// Stored (by every subscription, or by some while others refused
		// it): the ID names this message from now on, and a retry
		// returns it rather than queue a second copy where it was taken.
		t.dedup.confirm(reserved)
	}
	if pc.forget != nil && accepted > 0 && g != nil {
		g.addForget(*pc.forget)
	}
	if pc.settle != nil && accepted > 0 {
		var note any
		if g != nil {
			note = g
		}
		pc.settled = pc.settle(note)
	}
	return m, accepted, err
}
