package natsleasebus

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// headerAttemptsSpent is set on a message Release put back: the attempts
// it had spent, which its next delivery's Attempt counts from.
const headerAttemptsSpent = "Leasebus-Attempts-Spent"

// lease records a fetched message as held and returns its delivery. A
// delivery past the attempt limit is dead-lettered instead (false), and so
// is one whose payload does not decode.
func (s *Subscription[T]) lease(m js.Msg, vis time.Duration) (queue.Delivery[T], bool) {
	now := time.Now()
	md, err := m.Metadata()
	if err != nil {
		m.Term() // not a JetStream message: nothing to redeliver
		return queue.Delivery[T]{}, false
	}
	h := m.Headers()
	seq, dc := md.Sequence.Stream, uint32(md.NumDelivered)
	var spent int
	if v := h.Get(headerAttemptsSpent); v != "" {
		spent, _ = strconv.Atoi(v)
	}
	published := md.Timestamp
	if v := h.Get(headerPublishedAt); v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			published = t // a released or delayed message keeps its publish time
		}
	}
	topic, ok := s.bus.topicOf(m.Subject())
	if !ok { // released or redriven: on the subscription's own subject
		if topic = h.Get(backend.HeaderTopic); topic == "" {
			topic = s.topic
		}
	}
	hm := &heldMsg{
		msg: m, topic: topic, seq: seq, attempt: max(spent, 0) + int(dc), published: published,
		deadline: now.Add(vis), serverDeadline: now.Add(s.cfg.vis),
	}
	if s.maxAttempts > 0 && hm.attempt > s.maxAttempts {
		// The last attempt's lease expired (or its settling did not reach
		// the server): this delivery is the one past the limit.
		hm.attempt = s.maxAttempts
		s.forgetSeq(seq)
		s.deadLetter(hm, queue.ReasonMaxAttempts, errExpiredText) // on failure it comes back, and is tried again
		return queue.Delivery[T]{}, false
	}
	if ttl, ok := ttlOf(h); ok && !now.Before(published.Add(ttl)) {
		hm.attempt-- // this delivery spent nothing
		s.forgetSeq(seq)
		s.deadLetter(hm, queue.ReasonExpired, "") // on failure it comes back, and is tried again
		return queue.Delivery[T]{}, false
	}
	payload, err := s.codec.Decode(m.Data())
	if err != nil {
		s.deadLetter(hm, queue.ReasonRejected, "decode: "+err.Error())
		return queue.Delivery[T]{}, false
	}
	mid, _ := uuid.Parse(h.Get(headerID))
	msg := queue.Message[T]{ID: mid, Topic: topic, Payload: payload, Headers: userHeaders(h), PublishedAt: published}
	if s.filter != nil && !s.filter(msg) {
		_ = m.Ack() // not for this subscription; if the ack is lost, it is filtered again
		return queue.Delivery[T]{}, false
	}
	s.mu.Lock()
	id := s.mintLocked(seq)
	if prev, _, _ := s.leases.Hold(id, hm); !prev.IsZero() {
		delete(s.watch, prev) // superseded
	}
	s.watchIfLocked(id, hm)
	s.sweepLocked(now)
	s.mu.Unlock()
	if s.isLast(hm) || vis != s.cfg.vis {
		s.wake()
	}
	return queue.Delivery[T]{
		Message:     msg,
		LeaseID:     id,
		Attempt:     hm.attempt,
		Deadline:    hm.deadline,
		MaxAttempts: s.maxAttempts,
	}, true
}

func (s *Subscription[T]) isLast(h *heldMsg) bool {
	return s.maxAttempts > 0 && h.attempt >= s.maxAttempts
}

// mintLocked returns a lease ID for a new delivery of seq that this handle
// has never issued.
func (s *Subscription[T]) mintLocked(seq uint64) lease.ID {
	if s.minted == math.MaxUint32 {
		s.scope, s.minted = rand.Uint64()|1, 0
		s.scopes = append(s.scopes, s.scope)
	}
	s.minted++
	return lease.NewID(s.scope, seq, s.minted)
}

// oursLocked reports whether this handle minted id.
func (s *Subscription[T]) oursLocked(id lease.ID) bool {
	return slices.Contains(s.scopes, id.Scope())
}

// wake wakes the reaper: there is a lease to watch.
func (s *Subscription[T]) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// watchIfLocked has the reaper watch a held lease that needs it: a last
// attempt, or one whose deadline is not the server's.
func (s *Subscription[T]) watchIfLocked(id lease.ID, h *heldMsg) {
	if s.isLast(h) || !h.deadline.Equal(h.serverDeadline) {
		s.watch[id] = struct{}{}
	}
}

// action is what the reaper does with a watched lease that is due.
type action int

const (
	keepAlive  action = iota // InProgress: the lease runs past the server's AckWait
	expire                   // Nak: the lease ended before the server's AckWait
	deadLetter               // the last attempt's lease expired
)

type dueLease struct {
	h   *heldMsg
	act action
}

// reaper acts on the watched leases this handle holds, each when due:
// it dead-letters a message whose last lease expires unsettled (at once,
// as the in-memory broker does, rather than when the server delivers it
// again; a message whose holder is gone is dead-lettered by the handle
// that receives its next delivery, in Poll), keeps a lease extended past
// the server's AckWait alive, and hands back at its deadline a message
// whose lease was cut shorter than AckWait. It runs until Close, on one
// timer set for the earliest event.
func (s *Subscription[T]) reaper() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := s.dueLeases(time.Now())
		for _, d := range due {
			// Each is best effort: a failure leaves the server to
			// redeliver, and the next delivery (past the limit, for a
			// last attempt) to be dealt with in Poll.
			switch d.act {
			case keepAlive:
				_ = d.h.msg.InProgress()
			case expire:
				_ = d.h.msg.Nak()
			case deadLetter:
				_ = s.deadLetter(d.h, queue.ReasonMaxAttempts, errExpiredText)
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		timer.Reset(wait)
		select {
		case <-s.closed:
			return
		case <-s.kick:
		case <-timer.C:
		}
	}
}

// dueLeases returns what is due among the watched leases at now, and the
// time of the next event (zero: none).
func (s *Subscription[T]) dueLeases(now time.Time) (due []dueLease, next time.Time) {
	margin := s.cfg.vis / 3 // how long before the server's timer runs out a keep-alive goes
	s.mu.Lock()
	defer s.mu.Unlock()
	at := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for id := range s.watch {
		h, _ := s.leases.Held(id)
		if !now.Before(h.deadline) {
			delete(s.watch, id)
			switch {
			case s.isLast(h):
				due = append(due, dueLease{h, deadLetter})
				s.leases.Take(id)
				s.leases.ForgetIf(id, h.seq)
			case h.deadline.Before(h.serverDeadline):
				// Still held: an Ack before the server delivers it
				// again is a late ack that stands, as in memory.
				due = append(due, dueLease{h, expire})
			}
			continue
		}
		if alive := h.serverDeadline.Add(-margin); !h.deadline.Before(alive) {
			if !now.Before(alive) {
				due = append(due, dueLease{h, keepAlive})
				h.serverDeadline = now.Add(s.cfg.vis)
				alive = h.serverDeadline.Add(-margin)
			}
			if !h.deadline.Before(alive) {
				at(alive)
			}
		}
		at(h.deadline)
	}
	return due, next
}

// sweepLocked forgets leases whose deadline passed more than a visibility
// timeout ago: their messages went back to the server long since. A
// lease runs it at most every quarter visibility timeout.
func (s *Subscription[T]) sweepLocked(now time.Time) {
	s.leases.Sweep(now, s.cfg.vis/4, func(h *heldMsg) bool { return now.Sub(h.deadline) > s.cfg.vis },
		func(id lease.ID, _ *heldMsg) { delete(s.watch, id) })
}

// unknownLocked is the error for a lease this handle does not hold.
func (s *Subscription[T]) unknownLocked(op string, id lease.ID) error {
	if cur, ok := s.leases.Latest(id.Seq()); ok && cur != id && s.oursLocked(id) {
		return fmt.Errorf("%s %v: %w", op, id, queue.ErrLeaseExpired) // delivered again since
	}
	return fmt.Errorf("%s %v: %w", op, id, queue.ErrLeaseNotFound)
}

// take removes a held lease for settling. live requires now < deadline
// (else ErrLeaseExpired, and the lease stays held).
func (s *Subscription[T]) take(op string, id lease.ID, live bool) (*heldMsg, error) {
	if s.isClosed() {
		return nil, s.errClosed(op)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.leases.Held(id)
	if !ok {
		return nil, s.unknownLocked(op, id)
	}
	if live && !time.Now().Before(h.deadline) {
		return nil, fmt.Errorf("%s %v: %w", op, id, queue.ErrLeaseExpired)
	}
	s.leases.Take(id)
	delete(s.watch, id)
	return h, nil
}

// forgetSeq drops every record of seq: its message is settled for good,
// whatever lease this handle held.
func (s *Subscription[T]) forgetSeq(seq uint64) {
	s.mu.Lock()
	if id, _, _ := s.leases.Forget(seq); !id.IsZero() {
		delete(s.watch, id)
	}
	s.mu.Unlock()
}

// forget drops the record of id's message once it is settled for good,
// if id is its latest lease.
func (s *Subscription[T]) forget(id lease.ID) {
	s.mu.Lock()
	s.leases.ForgetIf(id, id.Seq())
	s.mu.Unlock()
}

// putBack holds a lease again after a settling call failed, unless the
// message was delivered again meanwhile.
func (s *Subscription[T]) putBack(id lease.ID, h *heldMsg) {
	s.mu.Lock()
	if s.leases.PutBack(id, h) {
		s.watchIfLocked(id, h)
	}
	s.mu.Unlock()
}

// ttlOf reads a message's time to live (headerTTL); false if it has none.
func ttlOf(h nats.Header) (time.Duration, bool) {
	v := h.Get(headerTTL)
	if v == "" {
		return 0, false
	}
	ttl, err := time.ParseDuration(v)
	return ttl, err == nil
}
