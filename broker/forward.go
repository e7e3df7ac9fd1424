package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// ErrNotForwarded: a Forward's publish was taken by no subscription of its
// topic (it has none, or each filter or subscription refused it), so the
// message stayed where it was, its lease untouched.
var ErrNotForwarded = errors.New("broker: forward: no subscription took the message")

// Forward settles the lease id by publishing payload to topic in its
// message's place: the message leaves this subscription as Ack would
// remove it, and the new one is published as Publish(ctx, topic, payload,
// opts...) would publish it. On a durable broker the two are one journal
// commit, so after a crash the message is in one place or the other, never
// both and never neither. It is how one stage of a pipeline hands its
// work to the next, and how a message moves to another queue. It returns
// the message published.
//
// Forward changes nothing when the lease is not current (Ack's errors:
// queue.ErrLeaseExpired, queue.ErrLeaseNotFound), when opts are invalid,
// or when no subscription of topic takes the message (ErrNotForwarded,
// joined with the subscriptions' refusals; a topic with none, or one whose
// filters all refuse it, would otherwise drop it): the lease stays, to be
// settled otherwise. With WithDedupID, an ID that names a message already
// published (an earlier Forward of this one, say) acks the lease and
// returns that message. The lease is checked before the publish and acked
// after it, in one commit; should the message be delivered again in
// between (its deadline passed and another consumer polled it), the new
// message stays published and the error says so (matching
// queue.ErrLeaseExpired): hold a lease with time to spare to forward it.
func (s *Subscription[T]) Forward(ctx context.Context, id lease.ID, topic string, payload T, opts ...PublishOption) (queue.Message[T], error) {
	if ctx == nil {
		return queue.Message[T]{}, backend.Invalid("Forward: nil context")
	}
	var pc publishConfig
	if err := pc.Apply(opts...); err != nil {
		return queue.Message[T]{}, err
	}
	if pc.DedupIDs != nil {
		return queue.Message[T]{}, backend.Invalid("Forward: WithDedupIDs is for PublishBatch (WithDedupID names one message)")
	}
	if err := s.q.Current(id); err != nil {
		return queue.Message[T]{}, fmt.Errorf("forward: %w", err)
	}
	pc.settle = func(note any) error { return s.q.AckNoted(id, note) }
	m, accepted, err := s.b.publish(ctx, topic, payload, &pc)
	switch {
	case pc.duplicate:
		if aerr := s.Ack(id); aerr != nil {
			return *m, fmt.Errorf("forward: published already as %v; ack: %w", m.ID, aerr)
		}
		return *m, nil
	case accepted == 0:
		return queue.Message[T]{}, errors.Join(fmt.Errorf("forward to %q: %w", topic, ErrNotForwarded), err)
	case pc.settled != nil:
		return *m, fmt.Errorf("forward: published to %q as %v, and the message stays here too: %w", topic, m.ID, pc.settled)
	}
	return *m, err
}
