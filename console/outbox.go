package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/leasebus/leasebus/backend"
)

// Outbox is a transactional outbox's dead rows as the console shows them
// and acts on them: the rows its relay moved aside because their backend
// refused them for good, or they did not decode. An *outbox.Outbox (the
// outbox module's) is one.
type Outbox interface {
	DeadRowCount(ctx context.Context) (int64, error)
	DeadRows(ctx context.Context, after int64, limit int) ([]backend.DeadRow, error)
	RequeueDeadRows(ctx context.Context, ids ...int64) (int64, error)
	DiscardDeadRows(ctx context.Context, ids ...int64) (int64, error)
}

// WithOutbox shows o's dead rows on an Outbox page (and as JSON at
// api/outbox): each one's topic, key, dedup ID, payload and why it was
// moved aside, with buttons to requeue it (once what refused it is fixed)
// or discard it (the actions outbox-requeue and outbox-discard, with the
// field id, repeated, or all = yes for every dead row). A nil o is
// refused by New.
func WithOutbox(o Outbox) Option {
	return Option{func(c *config) {
		if o == nil {
			c.err = backend.Invalid("console: WithOutbox(nil)")
		}
		c.outbox = o
	}}
}

// outboxPage is how many dead rows one page shows.
const outboxPage = 100

// OutboxRow is one dead row as api/outbox shows it (see backend.DeadRow).
type OutboxRow struct {
	ID         int64             `json:"id"`
	Topic      string            `json:"topic"`
	Key        string            `json:"key,omitempty"`
	Priority   string            `json:"priority"`
	Headers    map[string]string `json:"headers,omitempty"`
	DelaySecs  float64           `json:"delaySeconds,omitempty"`
	TTLSecs    float64           `json:"ttlSeconds,omitempty"`
	DedupID    string            `json:"dedupID"`
	EnqueuedAt time.Time         `json:"enqueuedAt"`
	Error      string            `json:"error"`
	DeadAt     time.Time         `json:"deadAt"`
	Payload    Payload           `json:"payload"`
}

// OutboxView is the JSON of api/outbox: the count of dead rows, a page of
// them (from after the ID given as after), and the after of the next page
// (0: none).
type OutboxView struct {
	Count int64       `json:"count"`
	Rows  []OutboxRow `json:"rows"`
	Next  int64       `json:"next,omitempty"`
}

var errNoOutbox = notFound("no outbox: the console was made without WithOutbox")

func (c *Console[T]) outboxView(r *http.Request) (OutboxView, error) {
	o := c.cfg.outbox
	if o == nil {
		return OutboxView{}, errNoOutbox
	}
	var after int64
	if s := r.URL.Query().Get("after"); s != "" {
		var err error
		if after, err = strconv.ParseInt(s, 10, 64); err != nil {
			return OutboxView{}, badRequest("after %q is not a row ID", s)
		}
	}
	n, err := o.DeadRowCount(r.Context())
	if err != nil {
		return OutboxView{}, err
	}
	rows, err := o.DeadRows(r.Context(), after, outboxPage+1)
	if err != nil {
		return OutboxView{}, err
	}
	v := OutboxView{Count: n, Rows: make([]OutboxRow, 0, min(len(rows), outboxPage))}
	if len(rows) > outboxPage {
		rows = rows[:outboxPage]
		v.Next = rows[len(rows)-1].ID
	}
	for _, d := range rows {
		v.Rows = append(v.Rows, OutboxRow{
			ID: d.ID, Topic: d.Topic, Key: d.Key, Priority: d.Priority.String(), Headers: d.Headers,
			DelaySecs: d.Delay.Seconds(), TTLSecs: d.TTL.Seconds(), DedupID: d.DedupID,
			EnqueuedAt: d.EnqueuedAt.UTC(), Error: d.Error, DeadAt: d.DeadAt.UTC(), Payload: ShowPayload(d.Payload),
		})
	}
	return v, nil
}

func (c *Console[T]) outboxPage(w http.ResponseWriter, r *http.Request) {
	v, err := c.outboxView(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "outbox", v)
}

func (c *Console[T]) outboxJSON(w http.ResponseWriter, r *http.Request) {
	v, err := c.outboxView(r)
	if err != nil {
		writeJSON(w, statusOf(err), Result{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// outboxActions requeue or discard dead rows: those whose IDs the form's
// id fields name, or, with all = yes, every one.
func outboxActions[T any]() []actionDef[T] {
	run := func(act func(o Outbox, ctx context.Context, ids ...int64) (int64, error)) func(c *Console[T], r *http.Request) (Result, error) {
		return func(c *Console[T], r *http.Request) (Result, error) {
			o := c.cfg.outbox
			if o == nil {
				return Result{}, errNoOutbox
			}
			ids, err := outboxIDs(r.Context(), o, r)
			if err != nil {
				return Result{}, err
			}
			n, err := act(o, r.Context(), ids...)
			return Result{Count: int(n)}, err
		}
	}
	return []actionDef[T]{
		{"outbox-requeue", run(Outbox.RequeueDeadRows)},
		{"outbox-discard", run(Outbox.DiscardDeadRows)},
	}
}

// outboxIDs returns the dead rows an outbox action names.
func outboxIDs(ctx context.Context, o Outbox, r *http.Request) ([]int64, error) {
	if r.PostForm.Get("all") == "yes" {
		var ids []int64
		for after := int64(0); ; {
			rows, err := o.DeadRows(ctx, after, 1000)
			if err != nil {
				return nil, err
			}
			for _, d := range rows {
				ids = append(ids, d.ID)
			}
			if len(rows) < 1000 {
				return ids, nil
			}
			after = rows[len(rows)-1].ID
		}
	}
	var ids []int64
	for _, s := range r.PostForm["id"] {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, badRequest("id %q is not a row ID", s)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, badRequest("say which dead rows: id (repeated), or all = yes")
	}
	return ids, nil
}

// outboxCount is the overview's count of dead rows: -1 without an
// outbox, and the error's text when it cannot be read.
func (c *Console[T]) outboxCount(ctx context.Context) (int64, string) {
	if c.cfg.outbox == nil {
		return -1, ""
	}
	n, err := c.cfg.outbox.DeadRowCount(ctx)
	if err != nil {
		return -1, fmt.Sprintf("the outbox's dead rows could not be counted: %v", err)
	}
	return n, ""
}
