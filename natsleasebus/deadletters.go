package natsleasebus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// FetchDeadLetters reads the dead letters of the subscription name of
// topic, oldest first, from the dead letters' stream: it waits until it
// has n or ctx ends (then it returns what it has and ctx's error). n < 1
// reads what is there now.
func FetchDeadLetters[T any](ctx context.Context, b *Bus, topic, name string, n int, opts ...SubscribeOption) ([]queue.DeadLetter[T], error) {
	cfg, codec, err := deadLetterConfig[T](opts)
	if err != nil {
		return nil, err
	}
	var out []queue.DeadLetter[T]
	err = b.readDeadLetters(ctx, topic, name, n, cfg.pollSlice, func(m js.Msg) error {
		dl, err := decodeDeadLetter(m, topic, codec)
		if err == nil {
			out = append(out, dl)
		}
		return err
	})
	return out, err
}

func deadLetterConfig[T any](opts []SubscribeOption) (subConfig, queue.Codec[T], error) {
	cfg, err := newSubConfig(opts)
	if err != nil {
		return cfg, nil, err
	}
	codec, ok := codecFor[T](cfg.codec)
	if !ok {
		return cfg, nil, backend.Invalid("WithCodec: %T does not decode the payload type", cfg.codec)
	}
	return cfg, codec, nil
}

// readDeadLetters calls fn with each dead letter of the subscription name
// of topic, oldest first, until it has read n (n < 1: those there now),
// fn fails or ctx ends.
func (b *Bus) readDeadLetters(ctx context.Context, topic, name string, n int, pollSlice time.Duration, fn func(js.Msg) error) error {
	oc, err := b.dlStream.OrderedConsumer(ctx, js.OrderedConsumerConfig{FilterSubjects: []string{b.DeadLetterSubject(topic, name)}})
	if err != nil {
		return fmt.Errorf("dead letters of %s/%s: %w", topic, name, err)
	}
	read := 0
	for {
		if n < 1 {
			info, err := oc.Info(ctx)
			if err != nil {
				return err
			}
			if info.NumPending == 0 {
				return nil
			}
		} else if read >= n {
			return nil
		}
		wait, err := slice(ctx, pollSlice)
		if err != nil {
			return err
		}
		batch, err := oc.Fetch(max(n-read, 100), js.FetchMaxWait(wait))
		if err != nil {
			return fmt.Errorf("dead letters of %s/%s: %w", topic, name, err)
		}
		for m := range batch.Messages() {
			read++
			if err := fn(m); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, js.ErrNoMessages) {
			return fmt.Errorf("dead letters of %s/%s: %w", topic, name, err)
		}
	}
}

// headerRedrivenFrom names, on a redriven message, the dead-letter
// stream's sequence it was redriven from.
const headerRedrivenFrom = "Leasebus-Redriven-From"

// Redrive puts the dead letters of the subscription name of topic for
// which match returns true back on that subscription (and no other), as
// fresh messages: attempts reset, ID, payload and headers kept. It returns
// how many it put back. Each is republished to the subscription's own
// subject, then deleted from the dead letters' stream. The republished
// copy carries a Nats-Msg-Id made of the dead letter's sequence, so a
// dead letter is redriven once even when Redrive runs twice at once, or
// runs again after a call that republished it but failed to delete it —
// within the topics' stream's duplicate window (2 minutes by default, see
// WithDedupWindow). A redriven message goes to the back of the queue:
// it does not keep its place. When the subscription does not exist,
// Redrive returns an error matching queue.ErrSubscriptionNotFound and
// changes nothing. match runs on Redrive's goroutine.
func Redrive[T any](ctx context.Context, b *Bus, topic, name string, match func(queue.DeadLetter[T]) bool, opts ...SubscribeOption) (int, error) {
	if match == nil {
		return 0, backend.Invalid("Redrive: nil func")
	}
	cfg, codec, err := deadLetterConfig[T](opts)
	if err != nil {
		return 0, err
	}
	if _, err := b.stream.Consumer(ctx, durableName(topic, name)); err != nil {
		if errors.Is(err, js.ErrConsumerNotFound) {
			err = queue.ErrSubscriptionNotFound
		}
		return 0, fmt.Errorf("redrive %s/%s: %w", topic, name, err)
	}
	n := 0
	err = b.readDeadLetters(ctx, topic, name, 0, cfg.pollSlice, func(m js.Msg) error {
		dl, err := decodeDeadLetter(m, topic, codec)
		if err != nil || !match(dl) {
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		fresh, err := b.redrive(ctx, topic, name, m, md.Sequence.Stream)
		if fresh {
			n++
		}
		return err
	})
	return n, err
}

// redrive republishes the dead letter m (sequence seq in the dead
// letters' stream) for the subscription alone, then deletes it. fresh is
// false when the topics' stream had the copy already (an earlier or
// concurrent Redrive of the same dead letter).
func (b *Bus) redrive(ctx context.Context, topic, name string, m js.Msg, seq uint64) (fresh bool, err error) {
	return b.redriveData(ctx, topic, name, m, seq, m.Data())
}

// redriveData is redrive with the payload data in place of the letter's.
func (b *Bus) redriveData(ctx context.Context, topic, name string, m js.Msg, seq uint64, data []byte) (fresh bool, err error) {
	out := nats.NewMsg(b.subscriptionSubject(topic, name))
	out.Data = data
	for k, vs := range m.Headers() {
		if !isReserved(k) {
			out.Header[k] = vs
		}
	}
	from := fmt.Sprintf("%s.%d", b.cfg.stream+"_DLQ", seq)
	out.Header.Set(headerRedrivenFrom, from)
	out.Header.Set(backend.HeaderTopic, dlHeader(m.Headers(), backend.HeaderTopic))
	if ttl := m.Headers().Get(headerTTL); ttl != "" {
		out.Header.Set(headerTTL, ttl) // counted from the redrive
	}
	out.Header.Set(nats.MsgIdHdr, "redrive."+from)
	ack, err := b.js.PublishMsg(ctx, out)
	if err != nil {
		return false, fmt.Errorf("redrive dead letter %d: %w", seq, err)
	}
	if err := b.dlStream.DeleteMsg(ctx, seq); err != nil && !b.deadLetterGone(ctx, seq) {
		return !ack.Duplicate, fmt.Errorf("redrive dead letter %d: republished, not deleted (a Redrive within the duplicate window will delete it): %w", seq, err)
	}
	return !ack.Duplicate, nil
}

// dlHeader reads a dead letter's header, under its legacy name if need be.
func dlHeader(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	return h.Get(legacyHeaders[name])
}

// decodeDeadLetter reads a dead letter of the subscription of topic.
func decodeDeadLetter[T any](m js.Msg, topic string, codec queue.Codec[T]) (queue.DeadLetter[T], error) {
	h := m.Headers()
	payload, err := codec.Decode(m.Data())
	if err != nil {
		return queue.DeadLetter[T]{}, fmt.Errorf("dead letter: decode: %w", err)
	}
	attempts, _ := strconv.Atoi(dlHeader(h, backend.HeaderAttempts))
	id, _ := uuid.Parse(h.Get(headerID))
	published, _ := time.Parse(time.RFC3339Nano, h.Get(headerPublishedAt))
	var at time.Time
	if md, err := m.Metadata(); err == nil {
		at = md.Timestamp
	}
	return queue.DeadLetter[T]{
		Subscription: dlHeader(h, backend.HeaderSubscription),
		Topic:        topic,
		Message: queue.Message[T]{
			ID: id, Topic: dlHeader(h, backend.HeaderTopic), Payload: payload,
			Headers: userHeaders(h), PublishedAt: published,
		},
		Reason:    reasonOf(dlHeader(h, backend.HeaderReason)),
		Attempts:  attempts,
		LastError: dlHeader(h, backend.HeaderLastError),
		At:        at,
	}, nil
}

// deadLetterGone reports whether the dead letters' stream no longer holds
// seq (a concurrent Redrive deleted it). The client reports a failed
// delete as text only, so this asks the stream.
func (b *Bus) deadLetterGone(ctx context.Context, seq uint64) bool {
	_, err := b.dlStream.GetMsg(ctx, seq)
	return errors.Is(err, js.ErrMsgNotFound)
}

// deadLetter copies the message to the dead-letter subject, with why in
// its headers, then terminates it. The copy carries a Nats-Msg-Id made of
// the consumer and stream sequence, so a second copy (a retry after a lost
// reply, or a redelivery after a lost Term) is dropped by the
// dead-letter stream's duplicate window.
func (s *Subscription[T]) deadLetter(h *heldMsg, reason queue.Reason, lastErr string) error {
	if err := s.retry(h.deadline, func(ctx context.Context) error {
		return s.publishDeadLetter(ctx, h.topic, h.seq, h.msg.Data(), h.msg.Headers(), h.published, reason, h.attempt, lastErr)
	}); err != nil {
		return err
	}
	if err := s.term(h, reason.String()); err != nil {
		return fmt.Errorf("term after dead-lettering: %w", err)
	}
	return nil
}

// term terminates the delivery h and waits for the server to confirm it
// (a lost Term would deliver the message again), retried like Ack.
func (s *Subscription[T]) term(h *heldMsg, reason string) error {
	body := []byte("+TERM " + reason)
	return s.retry(h.deadline, func(ctx context.Context) error {
		_, err := s.bus.js.Conn().RequestWithContext(ctx, h.msg.Reply(), body)
		return err
	})
}

func (s *Subscription[T]) publishDeadLetter(ctx context.Context, topic string, seq uint64, data []byte, hdr nats.Header, published time.Time, reason queue.Reason, attempts int, lastErr string) error {
	m := nats.NewMsg(s.bus.DeadLetterSubject(s.topic, s.name))
	m.Data = data
	for k, vs := range hdr {
		if !isReserved(k) {
			m.Header[k] = vs
		}
	}
	m.Header.Set(backend.HeaderReason, reason.String())
	m.Header.Set(backend.HeaderAttempts, strconv.Itoa(attempts))
	m.Header.Set(backend.HeaderLastError, lastErr)
	m.Header.Set(backend.HeaderSubscription, s.name)
	m.Header.Set(backend.HeaderTopic, topic)
	if ttl := hdr.Get(headerTTL); ttl != "" {
		m.Header.Set(headerTTL, ttl) // a redrive counts it again
	}
	m.Header.Set(headerStreamSeq, strconv.FormatUint(seq, 10))
	if !published.IsZero() {
		m.Header.Set(headerPublishedAt, published.Format(time.RFC3339Nano))
	}
	m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("dl.%s.%s.%d", s.bus.cfg.stream, s.durable, seq))
	if _, err := s.bus.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("dead-letter %s/%s seq %d: %w", s.topic, s.name, seq, err)
	}
	return nil
}
