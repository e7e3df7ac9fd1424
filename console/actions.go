package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// maxForm bounds an action's form: an edited payload and a selection of
// letters fit well inside it.
const maxForm = 8 << 20

// actionDef is one POST action: run reads the form and says what it did.
type actionDef[T any] struct {
	name string
	run  func(c *Console[T], r *http.Request) (Result, error)
}

// Result is the JSON an action answers with, and what the page it
// returns to says.
type Result struct {
	Action    string `json:"action"`
	Count     int    `json:"count"`               // messages or letters it acted on (schedule-trigger: the fires)
	Schedule  string `json:"schedule,omitempty"`  // the schedule a schedule-* action was for
	Cancelled string `json:"cancelled,omitempty"` // job-cancel: what becomes of the message (retry, dead-letter, delete)
	Error     string `json:"error,omitempty"`     // what it could not do (some letters may still have been acted on)
}

func (r Result) message() string {
	var b strings.Builder
	switch r.Action {
	case "pause", "resume":
		b.WriteString(map[string]string{"pause": "Paused.", "resume": "Resumed."}[r.Action])
	case "purge":
		fmt.Fprintf(&b, "Purged %d message%s.", r.Count, plural(r.Count))
	case "redrive", "redrive-edited":
		fmt.Fprintf(&b, "Redrove %d dead letter%s.", r.Count, plural(r.Count))
	case "discard":
		fmt.Fprintf(&b, "Discarded %d dead letter%s.", r.Count, plural(r.Count))
	case "message-delete":
		fmt.Fprintf(&b, "Deleted %d message%s.", r.Count, plural(r.Count))
	case "message-visible":
		fmt.Fprintf(&b, "Made %d message%s visible.", r.Count, plural(r.Count))
	case "message-edit":
		b.WriteString("Edited the payload: the next delivery carries it.")
	case "schedule-pause":
		fmt.Fprintf(&b, "Paused schedule %s.", r.Schedule)
	case "schedule-resume":
		fmt.Fprintf(&b, "Resumed schedule %s: the slots it was paused for are skipped.", r.Schedule)
	case "schedule-trigger":
		fmt.Fprintf(&b, "Fired schedule %s now.", r.Schedule)
	case "job-cancel":
		fmt.Fprintf(&b, "Cancelled the job: its handler's context is done, and its message will be settled as %s when the handler returns (a handler that ignores its context keeps running until it does).", r.Cancelled)
	case "outbox-requeue":
		fmt.Fprintf(&b, "Requeued %d dead row%s: the relay publishes them next.", r.Count, plural(r.Count))
	case "outbox-discard":
		fmt.Fprintf(&b, "Discarded %d dead row%s.", r.Count, plural(r.Count))
	}
	if r.Error != "" {
		fmt.Fprintf(&b, " Not done: %s", r.Error)
	}
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func actions[T any]() []actionDef[T] {
	return []actionDef[T]{
		{"pause", func(c *Console[T], r *http.Request) (Result, error) {
			pa, ok := c.be.(Pauser)
			if !ok {
				return Result{}, unsupported("pause a subscription")
			}
			topic, name, err := subscriptionOf(r.PostForm)
			if err != nil {
				return Result{}, err
			}
			return Result{}, pa.Pause(r.Context(), topic, name)
		}},
		{"resume", func(c *Console[T], r *http.Request) (Result, error) {
			pa, ok := c.be.(Pauser)
			if !ok {
				return Result{}, unsupported("resume a subscription")
			}
			topic, name, err := subscriptionOf(r.PostForm)
			if err != nil {
				return Result{}, err
			}
			return Result{}, pa.Resume(r.Context(), topic, name)
		}},
		{"purge", func(c *Console[T], r *http.Request) (Result, error) {
			pu, ok := c.be.(Purger)
			if !ok {
				return Result{}, unsupported("purge a subscription")
			}
			if r.PostForm.Get("confirm") != "yes" {
				return Result{}, badRequest("purge drops every message the subscription holds: confirm=yes is required")
			}
			topic, name, err := subscriptionOf(r.PostForm)
			if err != nil {
				return Result{}, err
			}
			n, err := pu.Purge(r.Context(), topic, name)
			return Result{Count: n}, err
		}},
		{"redrive", func(c *Console[T], r *http.Request) (Result, error) {
			match, err := letterMatch[T](r.PostForm)
			if err != nil {
				return Result{}, err
			}
			n, err := c.be.Redrive(r.Context(), match)
			return Result{Count: n}, err
		}},
		{"discard", func(c *Console[T], r *http.Request) (Result, error) {
			d, ok := c.be.(Discarder[T])
			if !ok {
				return Result{}, unsupported("discard dead letters")
			}
			match, err := letterMatch[T](r.PostForm)
			if err != nil {
				return Result{}, err
			}
			n, err := d.DiscardDeadLetters(r.Context(), match)
			return Result{Count: n}, err
		}},
		{"redrive-edited", func(c *Console[T], r *http.Request) (Result, error) {
			ed, ok := c.be.(Editor[T])
			if !ok {
				return Result{}, unsupported("redrive with an edited payload")
			}
			ref, err := parseRef(r.PostForm.Get("ref"))
			if err != nil {
				return Result{}, err
			}
			text, kind := r.PostForm.Get("payload"), r.PostForm.Get("kind")
			var bad error
			n, err := ed.RedriveWith(r.Context(), func(dl queue.DeadLetter[T]) (T, bool) {
				if bad != nil || !names(ref, dl) {
					return dl.Message.Payload, false
				}
				payload, err := edited(dl.Message.Payload, text, kind)
				bad = err
				return payload, err == nil
			})
			if bad != nil {
				return Result{}, bad
			}
			if err == nil && n == 0 {
				err = notFound("dead letter %s is no longer in the store", ref)
			}
			return Result{Count: n}, err
		}},
	}
}

// letterMatch reads which dead letters an action is for: the letters
// named by ref fields, or with all=yes every letter that the form's
// filter matches. Neither is an error: an action never means "all" by
// omission.
func letterMatch[T any](form url.Values) (func(queue.DeadLetter[T]) bool, error) {
	if form.Get("all") == "yes" {
		f, err := filterOf(form)
		if err != nil {
			return nil, err
		}
		return func(dl queue.DeadLetter[T]) bool { return matches(f, dl) }, nil
	}
	refs := form["ref"]
	if len(refs) == 0 {
		return nil, badRequest("select at least one dead letter (ref), or all=yes with a filter")
	}
	want := make(map[uuid.UUID][]letterRef, len(refs))
	for _, r := range refs {
		ref, err := parseRef(r)
		if err != nil {
			return nil, err
		}
		want[ref.id] = append(want[ref.id], ref)
	}
	return func(dl queue.DeadLetter[T]) bool {
		return slices.ContainsFunc(want[dl.Message.ID], func(r letterRef) bool { return names(r, dl) })
	}, nil
}

// filterOf reads a Filter from a query or a form.
func filterOf(v url.Values) (Filter, error) {
	f := Filter{Subscription: v.Get("subscription"), Topic: v.Get("topic"), Reason: v.Get("reason"), Error: v.Get("error"), Key: v.Get("key")}
	if f.Reason != "" {
		if _, ok := queue.ParseReason(f.Reason); !ok {
			return f, badRequest("reason %q is not one of max-attempts, overflow, expired, rejected, cancelled", f.Reason)
		}
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		s := v.Get(t.name)
		if s == "" {
			continue
		}
		at, err := parseTime(s)
		if err != nil {
			return f, badRequest("%s %q is not a time (RFC 3339, or 2006-01-02T15:04 as a browser sends it)", t.name, s)
		}
		*t.dst = at
	}
	return f, nil
}

func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("bad time")
}

// action serves one action, as JSON (api) or, for a page's form, as a
// redirect back to the page it came from with what it did.
func (c *Console[T]) action(a actionDef[T], api bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var res Result
		err := c.csrf.Check(r)
		switch {
		case c.cfg.readOnly:
			err = &errStatus{http.StatusForbidden, errors.New("the console is read-only")}
		case err != nil:
			err = &errStatus{http.StatusForbidden, fmt.Errorf("refused a cross-origin request: %v", err)}
		default:
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if perr := r.ParseForm(); perr != nil {
				err = badRequest("form: %v", perr)
			} else {
				res, err = a.run(c, r)
			}
		}
		res.Action = a.name
		if err != nil {
			res.Error = err.Error()
		}
		status := http.StatusOK
		if err != nil && res.Count == 0 {
			status = statusOf(err)
		}
		if api {
			writeJSON(w, status, res)
			return
		}
		if err != nil && res.Count == 0 {
			c.errorPage(w, r, err)
			return
		}
		http.Redirect(w, r, c.back(r.PostForm.Get("back"), res.message()), http.StatusSeeOther)
	}
}

// back returns where a form's action returns to: the page it names, if it
// is one of the console's, with the action's message.
func (c *Console[T]) back(to, msg string) string {
	u, err := url.Parse(to)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		u = &url.URL{Path: "/"}
	}
	q := u.Query()
	q.Set("done", msg)
	u.RawQuery = q.Encode()
	return c.cfg.prefix + u.Path + "?" + u.RawQuery
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // served as JSON, never sniffed as HTML (nosniff)
	_ = enc.Encode(v)        // the client hung up
}
