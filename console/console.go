// Package console is an operator's view of a broker, served as an
// http.Handler: an overview of every subscription (wildcard ones included)
// with its depth, leases in flight, delayed and held-back messages, the age
// of its oldest visible message, its dead letters by reason and live
// rates; a subscription's page with its options and a peek at what it
// holds; and the dead letters, filtered, seen whole, redriven (as they were
// or with an edited payload) or discarded, one, a selection or all that
// match. A subscription can be paused, resumed and purged; a message it
// holds can be found (Search, by message ID, dedup ID or key), seen whole,
// deleted, made visible now or edited. With Record running, the overview
// and each subscription's page chart their history; with WithWorkers, a
// Workers page shows the pools and what each handler works on.
//
// Pages are rendered on the server from templates and assets embedded in
// the binary: there is no build step and nothing to fetch. The same data is
// served as JSON under api/ for scripts (see the README's console section).
//
// # Mounting and authentication
//
// The handler serves the paths under its prefix (WithPrefix; "" serves
// them from the root), so it mounts on any mux beside the host's own
// routes. It stores no users and checks no passwords: wrap it in the
// host's own authentication middleware, as the package example shows.
//
// # Safety
//
// Nothing changes on a GET. Every action is a POST refused unless it comes
// from the console's own origin (http.CrossOriginProtection: a browser's
// Sec-Fetch-Site or Origin header must say same-origin; a script that
// sends neither, such as curl, is let through, being no browser a page
// could trick). WithReadOnly serves the pages and the JSON with no action
// reachable. Payloads, keys, headers and error texts are shown as text,
// escaped, never as markup.
//
// Looking costs the broker nothing while no one looks: every figure is
// read when a page or the JSON is requested, but for the history, which
// Record reads once a step (a Stats per subscription).
package console

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

//go:embed assets
var assets embed.FS

// Option configures a Console. The zero Option is refused by New.
type Option struct {
	apply func(*config)
}

type config struct {
	prefix   string
	readOnly bool
	title    string
	sched    *schedule.Scheduler // WithSchedules
	outbox   Outbox              // WithOutbox
	workers  *poller.Registry    // WithWorkers
	step     time.Duration       // WithHistory
	points   int
	err      error // an option's refusal
}

// WithPrefix serves the console under prefix (such as "/admin/queues"):
// every path it serves, and every link it writes, starts with it. It must
// start with "/" and not end with one. Without it, the console serves from
// "/".
func WithPrefix(prefix string) Option {
	return Option{func(c *config) { c.prefix = prefix }}
}

// WithReadOnly serves the pages and the JSON with no action: the buttons
// are not shown, and every POST is refused with 403 Forbidden.
func WithReadOnly() Option {
	return Option{func(c *config) { c.readOnly = true }}
}

// WithTitle sets the name the pages show in their header and title (by
// default "leasebus").
func WithTitle(title string) Option {
	return Option{func(c *config) { c.title = title }}
}

// Console is the console's http.Handler over one broker (New) or another
// backend (NewFor). It is safe for concurrent use and holds nothing but
// its backend, its options, its parsed templates and the history Record
// keeps.
type Console[T any] struct {
	be    Backend[T]
	can   can // what be does beyond Backend
	cfg   config
	pages map[string]*template.Template
	mux   *http.ServeMux
	csrf  *http.CrossOriginProtection
	hist  history // what Record keeps
}

// New returns a console over b. A nil broker, a zero Option or a prefix
// that does not start with "/" (or ends with one) is an error matching
// queue.ErrInvalidArgument.
func New[T any](b *broker.Broker[T], opts ...Option) (*Console[T], error) {
	if b == nil {
		return nil, backend.Invalid("console: nil broker")
	}
	return NewFor[T](brokerBackend[T]{b}, opts...)
}

// NewFor returns a console over another backend, such as JetStream's
// (see the natsleasebus module): it shows what be tells and offers the
// actions be implements (see Backend). A nil backend, a zero Option or a
// bad prefix is an error matching queue.ErrInvalidArgument.
func NewFor[T any](be Backend[T], opts ...Option) (*Console[T], error) {
	if be == nil {
		return nil, backend.Invalid("console: nil backend")
	}
	cfg := config{title: "leasebus", step: defaultHistoryStep, points: defaultHistoryPoints}
	for i, o := range opts {
		if o.apply == nil {
			return nil, backend.Invalid("console: option %d is the zero Option", i)
		}
		o.apply(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if cfg.prefix != "" && (!strings.HasPrefix(cfg.prefix, "/") || strings.HasSuffix(cfg.prefix, "/")) {
		return nil, backend.Invalid("console: prefix %q must start with / and not end with one", cfg.prefix)
	}
	c := &Console[T]{be: be, can: capabilities(be), cfg: cfg, csrf: http.NewCrossOriginProtection()}
	pages, err := parsePages(cfg.prefix)
	if err != nil {
		return nil, err
	}
	c.pages = pages
	c.routes()
	return c, nil
}

func (c *Console[T]) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets/static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", c.overviewPage)
	m.HandleFunc("GET /subscription", c.subscriptionPage)
	m.HandleFunc("GET /dead-letters", c.deadLettersPage)
	m.HandleFunc("GET /dead-letter", c.deadLetterPage)
	m.HandleFunc("GET /api/overview", c.overviewJSON)
	m.HandleFunc("GET /api/subscription", c.subscriptionJSON)
	m.HandleFunc("GET /api/dead-letters", c.deadLettersJSON)
	m.HandleFunc("GET /api/dead-letter", c.deadLetterJSON)
	m.HandleFunc("GET /schedules", c.schedulesPage)
	m.HandleFunc("GET /api/schedules", c.schedulesJSON)
	m.HandleFunc("GET /workers", c.workersPage)
	m.HandleFunc("GET /api/history", c.historyJSON)
	m.HandleFunc("GET /search", c.searchPage)
	m.HandleFunc("GET /api/search", c.searchJSON)
	m.HandleFunc("GET /message", c.messagePage)
	m.HandleFunc("GET /api/message", c.messageJSON)
	m.HandleFunc("GET /api/workers", c.workersJSON)
	m.HandleFunc("GET /outbox", c.outboxPage)
	m.HandleFunc("GET /api/outbox", c.outboxJSON)
	for _, a := range slices.Concat(actions[T](), messageActions[T](), scheduleActions[T](), outboxActions[T](), workerActions[T]()) {
		m.HandleFunc("POST /actions/"+a.name, c.action(a, false))
		m.HandleFunc("POST /api/actions/"+a.name, c.action(a, true))
	}
	c.mux = m
}

// ServeHTTP serves the console's pages, assets, JSON and actions under
// its prefix; any other path is 404 Not Found.
func (c *Console[T]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, c.cfg.prefix)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		http.NotFound(w, r)
		return
	}
	if rest == "" {
		http.Redirect(w, r, c.cfg.prefix+"/", http.StatusFound)
		return
	}
	// An unclean path (//, ., .., however encoded) is redirected to its
	// clean form here, under the prefix: the mux inside would redirect it
	// to the clean path without the prefix, off the console.
	if clean := cleanPath(rest); clean != rest {
		u := *r.URL
		u.Path, u.RawPath = c.cfg.prefix+clean, ""
		http.Redirect(w, r, u.RequestURI(), http.StatusTemporaryRedirect) // as the mux does: the method and body kept
		return
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = rest, ""
	r2.URL = &u
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	c.mux.ServeHTTP(w, r2)
}

// cleanPath returns p (which starts with "/") with path.Clean's rules
// applied, keeping a trailing slash, as http.ServeMux cleans a path.
func cleanPath(p string) string {
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// errStatus is an error with the HTTP status it answers with.
type errStatus struct {
	status int
	err    error
}

func (e *errStatus) Error() string { return e.err.Error() }
func (e *errStatus) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &errStatus{http.StatusBadRequest, fmt.Errorf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &errStatus{http.StatusNotFound, fmt.Errorf(format, args...)}
}

// statusOf returns the status an error answers with: its own, or 500.
func statusOf(err error) int {
	if se := (*errStatus)(nil); errors.As(err, &se) {
		return se.status
	}
	switch {
	case errors.Is(err, queue.ErrSubscriptionNotFound), errors.Is(err, queue.ErrTopicNotFound), errors.Is(err, schedule.ErrNotFound),
		errors.Is(err, queue.ErrMessageNotFound):
		return http.StatusNotFound
	case errors.Is(err, queue.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, queue.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, errors.ErrUnsupported):
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}
