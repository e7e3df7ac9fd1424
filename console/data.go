package console

import (
	"cmp"
	"context"
	"html/template"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// Overview is the JSON of api/overview: every subscription and the
// dead-letter store.
type Overview struct {
	Recording     bool              `json:"-"`    // Record runs: the rows have charts
	Span          string            `json:"-"`    // what the charts span
	Time          time.Time         `json:"time"` // the broker clock's now
	Subscriptions []SubscriptionRow `json:"subscriptions"`
	DeadLetters   StoreCounts       `json:"deadLetters"`
	// OutboxDeadRows counts an outbox's dead rows (WithOutbox); nil
	// without one, or when they could not be counted (OutboxError says why).
	OutboxDeadRows *int64 `json:"outboxDeadRows,omitempty"`
	OutboxError    string `json:"outboxError,omitempty"`
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
	Limited          int               `json:"limited"` // of Visible, those a rate limit holds back now
	OldestVisibleAge float64           `json:"oldestVisibleAgeSeconds"`
	Published        uint64            `json:"published"`
	Acked            uint64            `json:"acked"`
	Delivered        uint64            `json:"delivered"`
	DeadLettered     uint64            `json:"deadLettered"`
	DeadLetteredBy   map[string]uint64 `json:"deadLetteredBy"` // by reason, since the broker started
	DeadLettersHeld  int               `json:"deadLettersHeld"`
	Note             string            `json:"note,omitempty"` // what the backend does not know of it (SubscriptionInfo.Note)
	Flow             template.HTML     `json:"-"`              // the history's chart of published and acked per step (Record)
	DepthChart       template.HTML     `json:"-"`              // and of the depth
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
	// Flow and Depth are the history's charts (Record), empty without.
	Flow, Depth template.HTML `json:"-"`
	Span        string        `json:"-"` // what they span
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
	History   []AttemptView     `json:"history,omitempty"` // its attempts not acked, oldest first
}

// DeadLetterView is one dead letter as the console shows it. Its Ref
// (the message's ID and the subscription's name and topic) is what the
// actions take.
type DeadLetterView struct {
	// Ref names the letter in actions: "<message id>/<subscription>
	// <subscription topic>" (a space, which no name holds, before the
	// topic). "<message id>/<subscription>" is also taken, for a letter of
	// that name on any topic.
	Ref               string            `json:"ref"`
	ID                uuid.UUID         `json:"id"`
	Subscription      string            `json:"subscription"`
	SubscriptionTopic string            `json:"subscriptionTopic,omitempty"` // the subscription's topic or pattern, if the backend says
	Topic             string            `json:"topic"`                       // where the message was published
	Key               string            `json:"key,omitempty"`
	Priority          string            `json:"priority"`
	Headers           map[string]string `json:"headers,omitempty"`
	Published         time.Time         `json:"publishedAt"`
	Reason            string            `json:"reason"`
	Attempts          int               `json:"attempts"`
	LastError         string            `json:"lastError"`
	At                time.Time         `json:"at"`
	Payload           Payload           `json:"payload"`
	History           []AttemptView     `json:"history"` // its attempts not acked, oldest first (queue.DeadLetter.History)
}

// AttemptView is one attempt that did not end in an ack (queue.Attempt).
type AttemptView struct {
	Attempt     int       `json:"attempt"`
	Outcome     string    `json:"outcome"` // failed, nacked, rejected, expired or released
	At          time.Time `json:"at"`      // when it ended
	HeldSeconds float64   `json:"heldSeconds"`
	Error       string    `json:"error,omitempty"`
}

func attemptViews(h []queue.Attempt) []AttemptView {
	out := make([]AttemptView, len(h))
	for i, a := range h {
		out[i] = AttemptView{Attempt: a.Attempt, Outcome: a.Outcome.String(), At: a.At.UTC(), HeldSeconds: a.Held.Seconds(), Error: a.Error}
	}
	return out
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
	Topic        string    `json:"topic,omitempty"`  // the subscription's topic or pattern; a letter whose backend does not say its topic matches any
	Reason       string    `json:"reason,omitempty"` // a queue.Reason's word
	Error        string    `json:"error,omitempty"`  // a substring of the last error
	Key          string    `json:"key,omitempty"`
	Since        time.Time `json:"since,omitzero"` // dead-lettered at or after
	Until        time.Time `json:"until,omitzero"` // dead-lettered before
}

// Empty reports whether f matches every letter.
func (f Filter) Empty() bool { return f == Filter{} }

func (f Filter) match(reason queue.Reason, sub, topic, lastErr, key string, at time.Time) bool {
	return (f.Subscription == "" || f.Subscription == sub) &&
		(f.Topic == "" || topic == "" || f.Topic == topic) &&
		(f.Reason == "" || f.Reason == reason.String()) &&
		(f.Error == "" || strings.Contains(lastErr, f.Error)) &&
		(f.Key == "" || f.Key == key) &&
		(f.Since.IsZero() || !at.Before(f.Since)) &&
		(f.Until.IsZero() || at.Before(f.Until))
}

func matches[T any](f Filter, dl queue.DeadLetter[T]) bool {
	return f.match(dl.Reason, dl.Subscription, dl.Topic, dl.LastError, dl.Message.Key, dl.At)
}

// letterRef names a dead letter: its message and the subscription that
// dead-lettered it. A topic of "" (a ref without one, or a backend that
// does not say) matches any.
type letterRef struct {
	id         uuid.UUID
	sub, topic string
}

func refOf[T any](dl queue.DeadLetter[T]) letterRef {
	return letterRef{dl.Message.ID, dl.Subscription, dl.Topic}
}

// String is the ref as forms and URLs carry it.
func (r letterRef) String() string {
	if r.topic == "" {
		return r.id.String() + "/" + r.sub
	}
	return r.id.String() + "/" + r.sub + " " + r.topic
}

// names reports whether r names dl.
func names[T any](r letterRef, dl queue.DeadLetter[T]) bool {
	return r.id == dl.Message.ID && r.sub == dl.Subscription && (r.topic == "" || dl.Topic == "" || r.topic == dl.Topic)
}

// parseRef reverses letterRef.String.
func parseRef(s string) (letterRef, error) {
	idText, rest, ok := strings.Cut(s, "/")
	id, err := uuid.Parse(idText)
	sub, topic, _ := strings.Cut(rest, " ")
	if !ok || err != nil || sub == "" {
		return letterRef{}, badRequest("dead letter %q is not <message id>/<subscription> [topic]", s)
	}
	return letterRef{id, sub, topic}, nil
}

// letters returns the backend's dead letters, oldest first: a broker's
// read a chunk at a time (so a page costs what it shows, not what the
// store holds), another backend's as its DeadLetters returns them, sorted
// by when they were dead-lettered.
func (c *Console[T]) letters(ctx context.Context) (iter.Seq[queue.DeadLetter[T]], error) {
	if ls, ok := c.be.(letterScanner[T]); ok {
		return ls.letterSeq(), nil
	}
	all, err := c.be.DeadLetters(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(all, func(a, b queue.DeadLetter[T]) int { return cmp.Compare(a.At.UnixNano(), b.At.UnixNano()) })
	return slices.Values(all), nil
}

func (c *Console[T]) overview(ctx context.Context) (Overview, error) {
	now := c.be.Now()
	letters, err := c.letters(ctx)
	if err != nil {
		return Overview{}, err
	}
	store := StoreCounts{ByReason: map[string]int{}}
	held := heldBy{}
	for dl := range letters {
		store.Held++
		store.ByReason[dl.Reason.String()]++
		held[[2]string{dl.Subscription, dl.Topic}]++
	}
	if sc, ok := c.be.(storeCounter); ok {
		store.Dropped, store.Discarded = sc.storeCounts()
	}
	subs, err := c.be.Subscriptions(ctx)
	if err != nil {
		return Overview{}, err
	}
	o := Overview{Time: now, DeadLetters: store, Subscriptions: []SubscriptionRow{}}
	o.Recording, o.Span = c.recording(), ago(time.Duration(c.cfg.points)*c.cfg.step)
	if n, why := c.outboxCount(ctx); n >= 0 {
		o.OutboxDeadRows = &n
	} else {
		o.OutboxError = why
	}
	for _, s := range subs {
		r := row(s, held.of(s))
		if hs := c.series(s.Topic, s.Name); hs != nil {
			r.Flow = chart(120, 26, hs.lines("published", "acked", "dead")...)
			r.DepthChart = chart(120, 26, hs.lines("depth")...)
		}
		o.Subscriptions = append(o.Subscriptions, r)
	}
	return o, nil
}

// heldBy counts the letters of each subscription, by name and topic: a
// letter whose backend does not say the topic under "".
type heldBy map[[2]string]int

func countHeld[T any](letters iter.Seq[queue.DeadLetter[T]]) heldBy {
	h := heldBy{}
	for dl := range letters {
		h[[2]string{dl.Subscription, dl.Topic}]++
	}
	return h
}

// of returns how many letters s dead-lettered.
func (h heldBy) of(s SubscriptionInfo) int {
	n := h[[2]string{s.Name, s.Topic}]
	if s.Topic != "" {
		n += h[[2]string{s.Name, ""}]
	}
	return n
}

func row(s SubscriptionInfo, held int) SubscriptionRow {
	st := s.Stats
	by := map[string]uint64{}
	for r, n := range st.DeadLetteredBy.All() {
		if n > 0 {
			by[r.String()] = n
		}
	}
	return SubscriptionRow{
		Topic: s.Topic, Name: s.Name, Pattern: strings.ContainsAny(s.Topic, "*>#"), Paused: st.Paused,
		Depth: st.Visible + st.Delayed + st.InFlight + st.HeldBack, Visible: st.Visible, Delayed: st.Delayed,
		InFlight: st.InFlight, HeldBack: st.HeldBack, Limited: st.Limited, OldestVisibleAge: st.OldestVisibleAge.Seconds(),
		Published: st.Published, Acked: st.Acked, Delivered: st.Delivered, DeadLettered: st.DeadLettered,
		DeadLetteredBy: by, DeadLettersHeld: held, Note: s.Note,
	}
}

func settings(cfg queue.Config) []Setting {
	s := []Setting{
		{Option: "WithVisibilityTimeout", Value: cfg.VisibilityTimeout.String()},
		{Option: "WithMaxAttempts", Value: attemptsText(cfg.MaxAttempts)},
		{Option: "WithRetry", Value: retryText(cfg.Retry)},
		{Option: "WithMaxQueue", Value: itoa(cfg.MaxQueue)},
		{Option: "WithOverflow", Value: cfg.Overflow.String()},
	}
	if cfg.MaxInFlight > 0 {
		s = append(s, Setting{Option: "WithMaxInFlight", Value: itoa(cfg.MaxInFlight)})
	}
	if cfg.TTL > 0 {
		s = append(s, Setting{Option: "WithDefaultTTL", Value: cfg.TTL.String()})
	}
	if !cfg.RateLimit.IsZero() {
		s = append(s, Setting{Option: "WithRateLimit", Value: rateText(cfg.RateLimit)})
	}
	if !cfg.KeyRateLimit.IsZero() {
		s = append(s, Setting{Option: "WithKeyRateLimit", Value: rateText(cfg.KeyRateLimit) + " a key"})
	}
	if cfg.KeyConcurrency > 1 {
		s = append(s, Setting{Option: "WithKeyConcurrency", Value: itoa(cfg.KeyConcurrency) + " of a key at once"})
	}
	if cfg.FairKeys {
		s = append(s, Setting{Option: "WithFairKeys", Value: "keys take turns"})
	}
	return s
}

// rateText says a rate as "10 per 1s".
func rateText(r queue.Rate) string { return itoa(r.N) + " per " + r.Per.String() }

// deadLetterList returns the page of the letters f matches that starts at
// offset: it renders the page's letters alone, and counts the rest.
func (c *Console[T]) deadLetterList(ctx context.Context, f Filter, offset, limit int) (DeadLetterList, error) {
	letters, err := c.letters(ctx)
	if err != nil {
		return DeadLetterList{}, err
	}
	l := DeadLetterList{Filter: f, Letters: []DeadLetterView{}}
	for dl := range letters {
		if !matches(f, dl) {
			continue
		}
		if l.Total >= offset && l.Total < offset+limit {
			l.Letters = append(l.Letters, NewDeadLetterView(dl))
		}
		l.Total++
	}
	if end := offset + len(l.Letters); len(l.Letters) > 0 && end < l.Total {
		l.Next = end
	}
	return l, nil
}

// NewDeadLetterView returns a dead letter as the console shows it (and
// as its JSON says it).
func NewDeadLetterView[T any](dl queue.DeadLetter[T]) DeadLetterView {
	m := dl.Message
	return DeadLetterView{
		Ref: refOf(dl).String(), ID: m.ID, Subscription: dl.Subscription, SubscriptionTopic: dl.Topic, Topic: m.Topic, Key: m.Key,
		Priority: m.Priority.String(), Headers: headerMap(m.Headers), Published: m.PublishedAt,
		Reason: dl.Reason.String(), Attempts: dl.Attempts, LastError: dl.LastError, At: dl.At,
		Payload: ShowPayload(m.Payload), History: attemptViews(dl.History),
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
	if len(h.History) > 0 {
		v.History = attemptViews(h.History)
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
