package console

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// Overview is the JSON of api/overview: every subscription and the
// dead-letter store.
type Overview struct {
	Time          time.Time         `json:"time"` // the broker clock's now
	Subscriptions []SubscriptionRow `json:"subscriptions"`
	DeadLetters   StoreCounts       `json:"deadLetters"`
}

// SubscriptionRow is one subscription in the overview. The counters
// (published, acked, deadLettered) only grow: a reader's rates are their
// differences between two readings over the difference of time.
type SubscriptionRow struct {
	Topic            string            `json:"topic"` // or wildcard pattern
	Name             string            `json:"name"`
	Pattern          bool              `json:"pattern"`
	Paused           bool              `json:"paused"`
	Depth            int               `json:"depth"` // visible + delayed + inFlight + heldBack
	Visible          int               `json:"visible"`
	Delayed          int               `json:"delayed"`
	InFlight         int               `json:"inFlight"`
	HeldBack         int               `json:"heldBack"`
	OldestVisibleAge float64           `json:"oldestVisibleAgeSeconds"`
	Published        uint64            `json:"published"`
	Acked            uint64            `json:"acked"`
	Delivered        uint64            `json:"delivered"`
	DeadLettered     uint64            `json:"deadLettered"`
	DeadLetteredBy   map[string]uint64 `json:"deadLetteredBy"` // by reason, since the broker started
	DeadLettersHeld  int               `json:"deadLettersHeld"`
	Note             string            `json:"note,omitempty"` // what the backend does not know of it (SubscriptionInfo.Note)
}

// StoreCounts describes the broker's dead-letter store.
type StoreCounts struct {
	Held      int            `json:"held"`
	ByReason  map[string]int `json:"byReason"` // held, by reason
	Dropped   uint64         `json:"dropped"`  // dropped because the store was full
	Discarded uint64         `json:"discarded"`
}

// SubscriptionView is the JSON of api/subscription: a subscription's
// options and stats, and one page of the messages it holds.
type SubscriptionView struct {
	Row      SubscriptionRow `json:"subscription"`
	Options  []Setting       `json:"options"`
	State    string          `json:"state"` // the page's filter: "any" or a queue.State's word
	Messages []HeldView      `json:"messages"`
	Next     uint64          `json:"next,omitempty"` // the after= of the next page; 0 on the last
}

// Setting is one option of a subscription, named as its With function.
type Setting struct {
	Option string `json:"option"`
	Value  string `json:"value"`
}

// HeldView is one held message (queue.Held) as the console shows it.
type HeldView struct {
	Seq       uint64            `json:"seq"`
	ID        uuid.UUID         `json:"id"`
	Topic     string            `json:"topic"`
	Key       string            `json:"key,omitempty"`
	Priority  string            `json:"priority"`
	Headers   map[string]string `json:"headers,omitempty"`
	Published time.Time         `json:"publishedAt"`
	State     string            `json:"state"`
	Attempts  int               `json:"attempts"`
	At        *time.Time        `json:"at,omitempty"` // delayed: visible at; in flight: the lease's deadline
	LastError string            `json:"lastError,omitempty"`
	Payload   Payload           `json:"payload"`
}

// DeadLetterView is one dead letter as the console shows it. Its ID
// (the message's ID and the subscription's name) is what the actions take.
type DeadLetterView struct {
	Ref          string            `json:"ref"` // "<message id>/<subscription>": names the letter in actions
	ID           uuid.UUID         `json:"id"`
	Subscription string            `json:"subscription"`
	Topic        string            `json:"topic"`
	Key          string            `json:"key,omitempty"`
	Priority     string            `json:"priority"`
	Headers      map[string]string `json:"headers,omitempty"`
	Published    time.Time         `json:"publishedAt"`
	Reason       string            `json:"reason"`
	Attempts     int               `json:"attempts"`
	LastError    string            `json:"lastError"`
	At           time.Time         `json:"at"`
	Payload      Payload           `json:"payload"`
}

// DeadLetterList is the JSON of api/dead-letters: one page of the dead
// letters that match the filter, oldest first.
type DeadLetterList struct {
	Filter  Filter           `json:"filter"`
	Total   int              `json:"total"` // how many match
	Letters []DeadLetterView `json:"letters"`
	Next    int              `json:"next,omitempty"` // the offset= of the next page; 0 on the last
}

// Filter selects dead letters; an empty field matches every letter.
type Filter struct {
	Subscription string    `json:"subscription,omitempty"`
	Reason       string    `json:"reason,omitempty"` // a queue.Reason's word
	Error        string    `json:"error,omitempty"`  // a substring of the last error
	Key          string    `json:"key,omitempty"`
	Since        time.Time `json:"since,omitzero"` // dead-lettered at or after
	Until        time.Time `json:"until,omitzero"` // dead-lettered before
}

// Empty reports whether f matches every letter.
func (f Filter) Empty() bool { return f == Filter{} }

func (f Filter) match(reason queue.Reason, sub, lastErr, key string, at time.Time) bool {
	return (f.Subscription == "" || f.Subscription == sub) &&
		(f.Reason == "" || f.Reason == reason.String()) &&
		(f.Error == "" || strings.Contains(lastErr, f.Error)) &&
		(f.Key == "" || f.Key == key) &&
		(f.Since.IsZero() || !at.Before(f.Since)) &&
		(f.Until.IsZero() || at.Before(f.Until))
}

func matches[T any](f Filter, dl queue.DeadLetter[T]) bool {
	return f.match(dl.Reason, dl.Subscription, dl.LastError, dl.Message.Key, dl.At)
}

// ref names a dead letter in a form or a URL.
func ref(id uuid.UUID, sub string) string { return id.String() + "/" + sub }

// parseRef reverses ref.
func parseRef(s string) (uuid.UUID, string, error) {
	idText, sub, ok := strings.Cut(s, "/")
	id, err := uuid.Parse(idText)
	if !ok || err != nil || sub == "" {
		return uuid.UUID{}, "", badRequest("dead letter %q is not <message id>/<subscription>", s)
	}
	return id, sub, nil
}

func (c *Console[T]) overview(ctx context.Context) (Overview, error) {
	now := c.be.Now()
	letters, err := c.be.DeadLetters(ctx)
	if err != nil {
		return Overview{}, err
	}
	held := map[string]int{}
	store := StoreCounts{Held: len(letters), ByReason: map[string]int{}}
	for _, dl := range letters {
		held[dl.Subscription]++
		store.ByReason[dl.Reason.String()]++
	}
	if sc, ok := c.be.(storeCounter); ok {
		store.Dropped, store.Discarded = sc.storeCounts()
	}
	subs, err := c.be.Subscriptions(ctx)
	if err != nil {
		return Overview{}, err
	}
	o := Overview{Time: now, DeadLetters: store, Subscriptions: []SubscriptionRow{}}
	for _, s := range subs {
		o.Subscriptions = append(o.Subscriptions, row(s, held[s.Name]))
	}
	return o, nil
}

func row(s SubscriptionInfo, held int) SubscriptionRow {
	st := s.Stats
	by := map[string]uint64{}
	for _, c := range []struct {
		r queue.Reason
		n uint64
	}{{queue.ReasonMaxAttempts, st.DeadLetteredBy.MaxAttempts}, {queue.ReasonOverflow, st.DeadLetteredBy.Overflow},
		{queue.ReasonExpired, st.DeadLetteredBy.Expired}, {queue.ReasonRejected, st.DeadLetteredBy.Rejected}} {
		if c.n > 0 {
			by[c.r.String()] = c.n
		}
	}
	return SubscriptionRow{
		Topic: s.Topic, Name: s.Name, Pattern: strings.ContainsAny(s.Topic, "*>#"), Paused: st.Paused,
		Depth: st.Visible + st.Delayed + st.InFlight + st.HeldBack, Visible: st.Visible, Delayed: st.Delayed,
		InFlight: st.InFlight, HeldBack: st.HeldBack, OldestVisibleAge: st.OldestVisibleAge.Seconds(),
		Published: st.Published, Acked: st.Acked, Delivered: st.Delivered, DeadLettered: st.DeadLettered,
		DeadLetteredBy: by, DeadLettersHeld: held, Note: s.Note,
	}
}

func settings(cfg queue.Config) []Setting {
	s := []Setting{
		{"WithVisibilityTimeout", cfg.VisibilityTimeout.String()},
		{"WithMaxAttempts", attemptsText(cfg.MaxAttempts)},
		{"WithRetry", retryText(cfg.Retry)},
		{"WithMaxQueue", itoa(cfg.MaxQueue)},
		{"WithOverflow", cfg.Overflow.String()},
	}
	if cfg.MaxInFlight > 0 {
		s = append(s, Setting{"WithMaxInFlight", itoa(cfg.MaxInFlight)})
	}
	if cfg.TTL > 0 {
		s = append(s, Setting{"WithDefaultTTL", cfg.TTL.String()})
	}
	return s
}

func (c *Console[T]) deadLetterList(ctx context.Context, f Filter, offset, limit int) (DeadLetterList, error) {
	letters, err := c.be.DeadLetters(ctx)
	if err != nil {
		return DeadLetterList{}, err
	}
	var all []DeadLetterView
	for _, dl := range letters {
		if matches(f, dl) {
			all = append(all, NewDeadLetterView(dl))
		}
	}
	slices.SortStableFunc(all, func(a, b DeadLetterView) int { return cmp.Compare(a.At.UnixNano(), b.At.UnixNano()) })
	l := DeadLetterList{Filter: f, Total: len(all), Letters: []DeadLetterView{}}
	if offset < len(all) {
		end := min(len(all), offset+limit)
		l.Letters = all[offset:end]
		if end < len(all) {
			l.Next = end
		}
	}
	return l, nil
}

// NewDeadLetterView returns a dead letter as the console shows it (and
// as its JSON says it).
func NewDeadLetterView[T any](dl queue.DeadLetter[T]) DeadLetterView {
	m := dl.Message
	return DeadLetterView{
		Ref: ref(m.ID, dl.Subscription), ID: m.ID, Subscription: dl.Subscription, Topic: m.Topic, Key: m.Key,
		Priority: m.Priority.String(), Headers: headerMap(m.Headers), Published: m.PublishedAt,
		Reason: dl.Reason.String(), Attempts: dl.Attempts, LastError: dl.LastError, At: dl.At,
		Payload: ShowPayload(m.Payload),
	}
}

// NewHeldView returns a held message as the console shows it (and as its
// JSON says it).
func NewHeldView[T any](h queue.Held[T]) HeldView {
	v := HeldView{
		Seq: h.Seq, ID: h.ID, Topic: h.Topic, Key: h.Key, Priority: h.Priority.String(),
		Headers: headerMap(h.Headers), Published: h.PublishedAt, State: h.State.String(),
		Attempts: h.Attempts, LastError: h.LastError, Payload: ShowPayload(h.Payload),
	}
	if !h.At.IsZero() {
		at := h.At
		v.At = &at
	}
	return v
}

func headerMap(h queue.Headers) map[string]string {
	if h.Len() == 0 {
		return nil
	}
	m := make(map[string]string, h.Len())
	for k, v := range h.All() {
		m[k] = v
	}
	return m
}
