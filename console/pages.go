package console

import (
	"bytes"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/leasebus/leasebus/queue"
)

// pageSize is how many messages or letters a page shows by default.
const pageSize = 50

func parsePages(prefix string) (map[string]*template.Template, error) {
	// here is a path and query under the console's root: a form's back
	// field (the prefix is added when the action redirects).
	here := func(path string, kv ...string) string {
		q := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				q.Set(kv[i], kv[i+1])
			}
		}
		if len(q) == 0 {
			return path
		}
		return path + "?" + q.Encode()
	}
	funcs := template.FuncMap{
		"url":    func(path string, kv ...string) string { return prefix + here(path, kv...) },
		"here":   here,
		"prefix": func() string { return prefix },
		"ago":    func(secs float64) string { return ago(time.Duration(secs * float64(time.Second))) },
		"took":   func(secs float64) string { return took(time.Duration(secs * float64(time.Second))) },
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000")
		},
		"whenp": func(t *time.Time) string {
			if t == nil {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000")
		},
		"u64":   func(n uint64) string { return strconv.FormatUint(n, 10) },
		"list":  func(s ...string) []string { return s },
		"deref": func(n *int64) int64 { return *n },
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "subscription", "deadletters", "deadletter", "schedules", "workers", "search", "message", "outbox", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// page is what every page's template gets.
type page struct {
	Title    string
	ReadOnly bool
	Can      can    // what the backend does beyond the Backend interface
	Sched    bool   // the console shows schedules (WithSchedules)
	Workers  bool   // the console shows pools (WithWorkers)
	Outbox   bool   // the console shows an outbox's dead rows (WithOutbox)
	Done     string // what the last action did
	Back     string // this page's path and query, for the forms' back field
	Data     any
}

func (c *Console[T]) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	p := page{Title: c.cfg.title, ReadOnly: c.cfg.readOnly, Can: c.can, Sched: c.cfg.sched != nil, Workers: c.cfg.workers != nil, Outbox: c.cfg.outbox != nil, Done: r.URL.Query().Get("done"), Back: backOf(r), Data: data}
	if err := c.pages[name].Execute(&buf, p); err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w) // the client hung up
}

// backOf is the request's path and query, without the done message.
func backOf(r *http.Request) string {
	q := r.URL.Query()
	q.Del("done")
	if len(q) == 0 {
		return r.URL.Path
	}
	return r.URL.Path + "?" + q.Encode()
}

func (c *Console[T]) errorPage(w http.ResponseWriter, r *http.Request, err error) {
	c.render(w, r, statusOf(err), "error", err.Error())
}

func (c *Console[T]) overviewPage(w http.ResponseWriter, r *http.Request) {
	o, err := c.overview(r.Context())
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", o)
}

func (c *Console[T]) overviewJSON(w http.ResponseWriter, r *http.Request) {
	o, err := c.overview(r.Context())
	if err != nil {
		writeJSON(w, statusOf(err), Result{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// subscriptionOf reads the topic and name a request names.
func subscriptionOf(v url.Values) (topic, name string, err error) {
	topic, name = v.Get("topic"), v.Get("name")
	if topic == "" || name == "" {
		return "", "", badRequest("topic and name are required")
	}
	return topic, name, nil
}

func (c *Console[T]) subscriptionView(r *http.Request) (SubscriptionView, error) {
	ctx, q := r.Context(), r.URL.Query()
	topic, name, err := subscriptionOf(q)
	if err != nil {
		return SubscriptionView{}, err
	}
	state, ok := queue.ParseState(q.Get("state"))
	if !ok {
		return SubscriptionView{}, badRequest("state %q is not one of any, visible, delayed, in-flight, held-back", q.Get("state"))
	}
	pq := queue.PeekQuery{State: state, Limit: pageSize}
	if pq.After, err = uintParam(q, "after"); err != nil {
		return SubscriptionView{}, err
	}
	if l, err := uintParam(q, "limit"); err != nil {
		return SubscriptionView{}, err
	} else if l > 0 {
		pq.Limit = int(min(l, queue.MaxPeek))
	}
	s, err := c.be.Subscription(ctx, topic, name)
	if err != nil {
		return SubscriptionView{}, err
	}
	letters, err := c.letters(ctx)
	if err != nil {
		return SubscriptionView{}, err
	}
	v := SubscriptionView{Row: row(s, countHeld(letters).of(s)), Options: s.Options, State: state.String(), Messages: []HeldView{}}
	if hs := c.series(s.Topic, s.Name); hs != nil {
		v.Flow = chart(560, 110, hs.lines("published", "acked", "retried", "dead")...)
		v.Depth = chart(560, 110, hs.lines("depth")...)
		v.Span = ago(time.Duration(len(hs.Points)) * c.cfg.step)
	}
	pk, ok := c.be.(Peeker[T])
	if !ok {
		return v, nil // the page says the backend cannot peek; the JSON's messages are empty
	}
	want := pq.Limit
	if want < queue.MaxPeek {
		pq.Limit++ // one more says whether there is a next page
	}
	msgs, err := pk.Peek(ctx, s.Topic, s.Name, pq)
	if err != nil {
		return SubscriptionView{}, err
	}
	more := len(msgs) > want || len(msgs) == queue.MaxPeek
	msgs = msgs[:min(len(msgs), want)]
	for _, h := range msgs {
		v.Messages = append(v.Messages, NewHeldView(h))
	}
	if more && len(msgs) > 0 {
		v.Next = msgs[len(msgs)-1].Seq
	}
	return v, nil
}

func uintParam(q url.Values, name string) (uint64, error) {
	s := q.Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, badRequest("%s %q is not a whole number", name, s)
	}
	return n, nil
}

func (c *Console[T]) subscriptionPage(w http.ResponseWriter, r *http.Request) {
	v, err := c.subscriptionView(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "subscription", v)
}

func (c *Console[T]) subscriptionJSON(w http.ResponseWriter, r *http.Request) {
	v, err := c.subscriptionView(r)
	if err != nil {
		writeJSON(w, statusOf(err), Result{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// letterPage is the dead-letter list's page data.
type letterPage struct {
	DeadLetterList
	Subscriptions []string // names, for the filter's choice
	Reasons       []string
	Query         url.Values
}

func (c *Console[T]) deadLetterListOf(r *http.Request) (DeadLetterList, error) {
	q := r.URL.Query()
	f, err := filterOf(q)
	if err != nil {
		return DeadLetterList{}, err
	}
	offset, err := uintParam(q, "offset")
	if err != nil {
		return DeadLetterList{}, err
	}
	limit, err := uintParam(q, "limit")
	if err != nil {
		return DeadLetterList{}, err
	}
	if limit == 0 {
		limit = pageSize
	}
	return c.deadLetterList(r.Context(), f, int(min(offset, 1<<31)), int(min(limit, queue.MaxPeek)))
}

func (c *Console[T]) deadLettersPage(w http.ResponseWriter, r *http.Request) {
	l, err := c.deadLetterListOf(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	all, err := c.be.Subscriptions(r.Context())
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	seen := map[string]bool{}
	var subs []string
	for _, s := range all {
		if !seen[s.Name] {
			seen[s.Name] = true
			subs = append(subs, s.Name)
		}
	}
	c.render(w, r, http.StatusOK, "deadletters", letterPage{DeadLetterList: l, Subscriptions: subs,
		Reasons: []string{"max-attempts", "overflow", "expired", "rejected", "cancelled"}, Query: r.URL.Query()})
}

func (c *Console[T]) deadLettersJSON(w http.ResponseWriter, r *http.Request) {
	l, err := c.deadLetterListOf(r)
	if err != nil {
		writeJSON(w, statusOf(err), Result{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (c *Console[T]) deadLetter(r *http.Request) (DeadLetterView, error) {
	ref, err := parseRef(r.URL.Query().Get("ref"))
	if err != nil {
		return DeadLetterView{}, err
	}
	letters, err := c.letters(r.Context())
	if err != nil {
		return DeadLetterView{}, err
	}
	for dl := range letters {
		if names(ref, dl) {
			return NewDeadLetterView(dl), nil
		}
	}
	return DeadLetterView{}, notFound("no dead letter %s in the store: it was redriven, discarded or dropped since, or the reference names no letter (check the message ID and the subscription)", ref)
}

func (c *Console[T]) deadLetterPage(w http.ResponseWriter, r *http.Request) {
	v, err := c.deadLetter(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "deadletter", v)
}

func (c *Console[T]) deadLetterJSON(w http.ResponseWriter, r *http.Request) {
	v, err := c.deadLetter(r)
	if err != nil {
		writeJSON(w, statusOf(err), Result{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}
