package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// MessageActor is a Backend that acts on the messages a subscription
// holds, by ID: drops them, makes delayed ones visible now, replaces one's
// payload (see broker.Subscription.DeleteMessages, MakeVisible and
// EditPayload). Each returns how many it acted on, and an error for the
// IDs it could not act on.
type MessageActor[T any] interface {
	DeleteMessages(ctx context.Context, topic, name string, ids []uuid.UUID) (int, error)
	MakeVisible(ctx context.Context, topic, name string, ids []uuid.UUID) (int, error)
	EditPayload(ctx context.Context, topic, name string, id uuid.UUID, payload T) error
}

func (bb brokerBackend[T]) DeleteMessages(_ context.Context, topic, name string, ids []uuid.UUID) (int, error) {
	s, err := bb.b.Subscription(topic, name)
	if err != nil {
		return 0, err
	}
	return s.DeleteMessages(ids...)
}

func (bb brokerBackend[T]) MakeVisible(_ context.Context, topic, name string, ids []uuid.UUID) (int, error) {
	s, err := bb.b.Subscription(topic, name)
	if err != nil {
		return 0, err
	}
	return s.MakeVisible(ids...)
}

func (bb brokerBackend[T]) EditPayload(_ context.Context, topic, name string, id uuid.UUID, payload T) error {
	s, err := bb.b.Subscription(topic, name)
	if err != nil {
		return err
	}
	return s.EditPayload(id, payload)
}

// messageActions are the actions on held messages. Each names the
// subscription (topic, name) and its messages: id fields, or all=yes with
// the state and key fields as a filter, which acts on the first
// queue.MaxPeek messages that match (an action costs at most a page; run
// it again for more).
func messageActions[T any]() []actionDef[T] {
	actor := func(c *Console[T], what string) (MessageActor[T], error) {
		ma, ok := c.be.(MessageActor[T])
		if !ok {
			return nil, unsupported(what)
		}
		return ma, nil
	}
	return []actionDef[T]{
		{"message-delete", func(c *Console[T], r *http.Request) (Result, error) {
			ma, err := actor(c, "delete a held message")
			if err != nil {
				return Result{}, err
			}
			if r.PostForm.Get("confirm") != "yes" {
				return Result{}, badRequest("a delete drops messages for good: confirm=yes is required")
			}
			topic, name, ids, err := c.messagesOf(r.Context(), r.PostForm)
			if err != nil {
				return Result{}, err
			}
			n, err := ma.DeleteMessages(r.Context(), topic, name, ids)
			return Result{Count: n}, err
		}},
		{"message-visible", func(c *Console[T], r *http.Request) (Result, error) {
			ma, err := actor(c, "make a held message visible")
			if err != nil {
				return Result{}, err
			}
			topic, name, ids, err := c.messagesOf(r.Context(), r.PostForm)
			if err != nil {
				return Result{}, err
			}
			n, err := ma.MakeVisible(r.Context(), topic, name, ids)
			return Result{Count: n}, err
		}},
		{"message-edit", func(c *Console[T], r *http.Request) (Result, error) {
			ma, err := actor(c, "edit a held message")
			if err != nil {
				return Result{}, err
			}
			pk, ok := c.be.(Peeker[T])
			if !ok {
				return Result{}, unsupported("show a held message")
			}
			topic, name, err := subscriptionOf(r.PostForm)
			if err != nil {
				return Result{}, err
			}
			id, err := uuid.Parse(r.PostForm.Get("id"))
			if err != nil {
				return Result{}, badRequest("id %q is not a message ID", r.PostForm.Get("id"))
			}
			hs, err := pk.Peek(r.Context(), topic, name, queue.PeekQuery{ID: id, Limit: 1})
			if err != nil {
				return Result{}, err
			}
			if len(hs) == 0 {
				return Result{}, fmt.Errorf("%s / %s: %w: %v", topic, name, queue.ErrMessageNotFound, id)
			}
			payload, err := edited(hs[0].Payload, r.PostForm.Get("payload"), r.PostForm.Get("kind"))
			if err != nil {
				return Result{}, err
			}
			if err := ma.EditPayload(r.Context(), topic, name, id, payload); err != nil {
				return Result{}, err
			}
			return Result{Count: 1}, nil
		}},
	}
}

// messagesOf reads the subscription and the messages an action is for:
// the id fields, or with all=yes the first queue.MaxPeek that the state
// and key fields select. Neither is an error: an action never means "all"
// by omission.
func (c *Console[T]) messagesOf(ctx context.Context, form url.Values) (topic, name string, ids []uuid.UUID, err error) {
	if topic, name, err = subscriptionOf(form); err != nil {
		return "", "", nil, err
	}
	if form.Get("all") == "yes" {
		pk, ok := c.be.(Peeker[T])
		if !ok {
			return "", "", nil, unsupported("show the messages a subscription holds")
		}
		st, ok := queue.ParseState(form.Get("state"))
		if !ok {
			return "", "", nil, badRequest("state %q is not one of any, visible, delayed, in-flight, held-back", form.Get("state"))
		}
		hs, err := pk.Peek(ctx, topic, name, queue.PeekQuery{State: st, Key: form.Get("key"), Limit: queue.MaxPeek})
		if err != nil {
			return "", "", nil, err
		}
		for _, h := range hs {
			ids = append(ids, h.ID)
		}
		if len(ids) == 0 {
			return "", "", nil, notFound("%s / %s holds no message that matches", topic, name)
		}
		return topic, name, ids, nil
	}
	for _, s := range form["id"] {
		id, err := uuid.Parse(s)
		if err != nil {
			return "", "", nil, badRequest("id %q is not a message ID", s)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return "", "", nil, badRequest("select at least one message (id), or all=yes with a filter")
	}
	return topic, name, ids, nil
}
