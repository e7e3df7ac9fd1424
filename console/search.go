package console

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// searchLimit is the most held messages a search shows per subscription,
// and the most dead letters it shows.
const searchLimit = 100

// SearchView is the JSON of api/search: what a query found. A query is
// tried as a message ID (when it is a UUID), as a dedup ID and as an
// ordering key, across every subscription's held messages and the dead
// letters.
type SearchView struct {
	Query   string         `json:"query"`
	Dedup   []DedupRow     `json:"dedup"`   // topics that remember the query as a dedup ID
	Held    []SearchHeld   `json:"held"`    // held messages found, by subscription
	Letters []SearchLetter `json:"letters"` // dead letters found, oldest first
	// Notes say what the search could not look at, or where it stopped.
	Notes []string `json:"notes,omitempty"`
}

// DedupRow is a dedup ID a topic remembers (broker.DedupRecord).
type DedupRow struct {
	Topic          string    `json:"topic"`
	MessageID      uuid.UUID `json:"messageId"`
	FirstPublished time.Time `json:"firstPublished"`
}

// SearchHeld is a held message a search found.
type SearchHeld struct {
	Match             string `json:"match"` // "id", "dedup id" or "key"
	SubscriptionTopic string `json:"subscriptionTopic"`
	Subscription      string `json:"subscription"`
	HeldView
}

// SearchLetter is a dead letter a search found.
type SearchLetter struct {
	Match string `json:"match"` // "id", "dedup id" or "key"
	DeadLetterView
}

// dedupLooker is a backend that remembers dedup IDs (the broker does).
type dedupLooker interface {
	LookupDedupID(id string) []broker.DedupRecord
}

func (bb brokerBackend[T]) LookupDedupID(id string) []broker.DedupRecord {
	return bb.b.LookupDedupID(id)
}

// search answers q. A message ID's and a dedup ID's messages are found
// with one Peek per subscription, and a key's with one per subscription
// too (each a pass over what it holds: no index by ID or key is kept
// beside the queue); the dedup ID is looked up in each topic's index; the
// dead letters are read once.
func (c *Console[T]) search(ctx context.Context, q string) (SearchView, error) {
	q = strings.TrimSpace(q)
	v := SearchView{Query: q, Dedup: []DedupRow{}, Held: []SearchHeld{}, Letters: []SearchLetter{}}
	if q == "" {
		return v, nil
	}
	ids := map[uuid.UUID]string{} // the message IDs to find, and how they matched
	if id, err := uuid.Parse(q); err == nil {
		ids[id] = "id"
	}
	if dl, ok := c.be.(dedupLooker); ok {
		for _, d := range dl.LookupDedupID(q) {
			v.Dedup = append(v.Dedup, DedupRow{Topic: d.Topic, MessageID: d.MessageID, FirstPublished: d.FirstPublished.UTC()})
			if _, seen := ids[d.MessageID]; !seen {
				ids[d.MessageID] = "dedup id"
			}
		}
	} else {
		v.Notes = append(v.Notes, "This backend keeps no dedup IDs the console can read: the query was not looked up as one.")
	}
	if pk, ok := c.be.(Peeker[T]); ok {
		subs, err := c.be.Subscriptions(ctx)
		if err != nil {
			return v, err
		}
		for _, s := range subs {
			found := func(match string, pq queue.PeekQuery) error {
				pq.Limit = searchLimit
				hs, err := pk.Peek(ctx, s.Topic, s.Name, pq)
				for _, h := range hs {
					v.Held = append(v.Held, SearchHeld{Match: match, SubscriptionTopic: s.Topic, Subscription: s.Name, HeldView: NewHeldView(h)})
				}
				if len(hs) == searchLimit {
					v.Notes = append(v.Notes, "Only the first "+itoa(searchLimit)+" messages of key "+q+" in "+s.Topic+" / "+s.Name+" are shown.")
				}
				return err
			}
			for id, match := range ids {
				if err := found(match, queue.PeekQuery{ID: id}); err != nil {
					return v, err
				}
			}
			if err := found("key", queue.PeekQuery{Key: q}); err != nil {
				return v, err
			}
		}
	} else {
		v.Notes = append(v.Notes, "This backend cannot show held messages: only the dead letters were searched.")
	}
	slices.SortFunc(v.Held, func(a, b SearchHeld) int {
		return cmp.Or(cmp.Compare(a.SubscriptionTopic, b.SubscriptionTopic), cmp.Compare(a.Subscription, b.Subscription), cmp.Compare(a.Seq, b.Seq))
	})
	v.Held = slices.CompactFunc(v.Held, func(a, b SearchHeld) bool { // a key that is also the ID
		return a.SubscriptionTopic == b.SubscriptionTopic && a.Subscription == b.Subscription && a.Seq == b.Seq
	})
	letters, err := c.letters(ctx)
	if err != nil {
		return v, err
	}
	for dl := range letters {
		match, ok := ids[dl.Message.ID]
		if !ok && dl.Message.Key == q {
			match, ok = "key", true
		}
		if !ok {
			continue
		}
		if len(v.Letters) == searchLimit {
			v.Notes = append(v.Notes, "Only the first "+itoa(searchLimit)+" dead letters found are shown.")
			break
		}
		v.Letters = append(v.Letters, SearchLetter{Match: match, DeadLetterView: NewDeadLetterView(dl)})
	}
	return v, nil
}

func (c *Console[T]) searchPage(w http.ResponseWriter, r *http.Request) {
	v, err := c.search(r.Context(), r.URL.Query().Get("q"))
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "search", v)
}

func (c *Console[T]) searchJSON(w http.ResponseWriter, r *http.Request) {
	v, err := c.search(r.Context(), r.URL.Query().Get("q"))
	if err != nil {
		writeJSON(w, statusOf(err), Result{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// MessageView is the JSON of api/message: one message a subscription
// holds, found by its ID.
type MessageView struct {
	SubscriptionTopic string   `json:"subscriptionTopic"`
	Subscription      string   `json:"subscription"`
	Message           HeldView `json:"message"`
	// Running is the handler of the message that a pool of WithWorkers's
	// registry runs now, if any (a copy of a message fanned out to
	// several subscriptions has the same ID: any of them).
	Running *RunningJob `json:"running,omitempty"`
}

func (c *Console[T]) message(r *http.Request) (MessageView, error) {
	q := r.URL.Query()
	topic, name, err := subscriptionOf(q)
	if err != nil {
		return MessageView{}, err
	}
	id, err := uuid.Parse(q.Get("id"))
	if err != nil {
		return MessageView{}, badRequest("id %q is not a message ID", q.Get("id"))
	}
	pk, ok := c.be.(Peeker[T])
	if !ok {
		return MessageView{}, unsupported("show a held message")
	}
	hs, err := pk.Peek(r.Context(), topic, name, queue.PeekQuery{ID: id, Limit: 1})
	if err != nil {
		return MessageView{}, err
	}
	if len(hs) == 0 {
		return MessageView{}, notFound("%s / %s holds no message %s: it was settled, dead-lettered or dropped since, or the ID names none (search for it)", topic, name, id)
	}
	v := MessageView{SubscriptionTopic: topic, Subscription: name, Message: NewHeldView(hs[0])}
	if v.Message.State == queue.StateInFlight.String() {
		v.Running = c.runningJob(id)
	}
	return v, nil
}

func (c *Console[T]) messagePage(w http.ResponseWriter, r *http.Request) {
	v, err := c.message(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "message", v)
}

func (c *Console[T]) messageJSON(w http.ResponseWriter, r *http.Request) {
	v, err := c.message(r)
	if err != nil {
		writeJSON(w, statusOf(err), Result{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}
