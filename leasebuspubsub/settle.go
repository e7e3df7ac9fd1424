package leasebuspubsub

import (
	"container/heap"
	"context"
	"errors"

	"gocloud.dev/pubsub/driver"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// settle stops holding the receipts of ids and groups their leases by the
// subscription that issued them.
func (s *subscription) settle(ids []driver.AckID) []leaseGroup {
	var groups []leaseGroup
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		r, ok := id.(*receipt)
		if !ok {
			continue // not ours: gocloud passes back only what ReceiveBatch returned
		}
		r.settled = true
		delete(s.held, r)
		if r.index >= 0 {
			heap.Remove(&s.due, r.index)
		}
		i := 0
		for i < len(groups) && groups[i].sub != r.sub {
			i++
		}
		if i == len(groups) {
			groups = append(groups, leaseGroup{sub: r.sub})
		}
		groups[i].ids = append(groups[i].ids, r.id)
	}
	return groups
}

// leaseGroup is leases of one subscription.
type leaseGroup struct {
	sub *broker.Subscription[[]byte]
	ids []lease.ID
}

// SendAcks acks each lease. An ack that changes nothing is not an error
// (see changedNothing); a second ack of a message is one.
func (s *subscription) SendAcks(ctx context.Context, ids []driver.AckID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var errs []error
	for _, g := range s.settle(ids) {
		err := g.sub.AckBatch(g.ids)
		if j, ok := err.(interface{ Unwrap() []error }); ok { // one error per lease
			for _, e := range j.Unwrap() {
				if !s.changedNothing(e) {
					errs = append(errs, e)
				}
			}
		} else if err != nil && !s.changedNothing(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CanNack reports true.
func (*subscription) CanNack() bool { return true }

// SendNacks reports each lease as a failed attempt: Fail(id, ErrNacked),
// so the message is delivered again after the subscription's retry
// policy's delay, or dead-lettered if that was its last attempt. A nack
// that changes nothing is not an error.
func (s *subscription) SendNacks(ctx context.Context, ids []driver.AckID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var errs []error
	for _, g := range s.settle(ids) {
		for _, id := range g.ids {
			if err := g.sub.Fail(id, ErrNacked); err != nil && !s.changedNothing(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// changedNothing reports whether err, from settling a lease, only says
// that the settlement was moot: the lease is not current (its message was
// delivered again: ErrLeaseExpired), or its message is settled already
// (ErrLeaseNotFound), or its subscription was removed with its messages
// (ErrClosed while the broker is open). gocloud asks drivers to drop such
// errors: it would make every later Receive fail with them. An ack that
// fails because the broker closed is reported.
func (s *subscription) changedNothing(err error) bool {
	switch {
	case errors.Is(err, queue.ErrLeaseExpired), errors.Is(err, queue.ErrLeaseNotFound):
		return true
	case errors.Is(err, queue.ErrClosed):
		_, lerr := s.b.Subscription(s.topic, s.name)
		return !errors.Is(lerr, queue.ErrClosed)
	}
	return false
}
