package console

import (
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/poller"
)

// WithWorkers shows the pools that report to g (poller.WithRegistry) on a
// Workers page (and as JSON at api/workers): each pool's workers, how many
// are busy, its counters, and every handler running, with its message,
// attempt, how long it has run, its lease's deadline and extensions; the
// longest-running handler of all is marked, as a stuck one is what an
// operator looks for first. A pool over JetStream or SQS reports as one
// over the broker does. A nil g is refused by New.
func WithWorkers(g *poller.Registry) Option {
	return Option{func(c *config) {
		if g == nil {
			c.err = backend.Invalid("console: WithWorkers(nil)")
		}
		c.workers = g
	}}
}

// WorkersView is the JSON of api/workers.
type WorkersView struct {
	Pools []PoolRow `json:"pools"`
}

// PoolRow is one running pool (see poller.PoolStatus).
type PoolRow struct {
	Name          string       `json:"name"`
	Workers       int          `json:"workers"`
	Busy          int          `json:"busy"` // handlers running
	Held          int          `json:"held"` // leases the pool holds: running, or waiting for a worker
	Outstanding   int          `json:"maxOutstanding"`
	Started       time.Time    `json:"started"`
	Now           time.Time    `json:"time"`     // the pool's clock
	Draining      bool         `json:"draining"` // stopping: no handler starts
	Stats         poller.Stats `json:"stats"`
	Handlers      []HandlerRow `json:"handlers"` // the longest-running first
	OldestSeconds float64      `json:"oldestSeconds"`
}

// HandlerRow is one running handler.
type HandlerRow struct {
	MessageID   string     `json:"messageId"`
	Topic       string     `json:"topic"`
	Key         string     `json:"key,omitempty"`
	Attempt     int        `json:"attempt"`
	MaxAttempts int        `json:"maxAttempts"` // 0: unlimited or not said
	Started     time.Time  `json:"started"`
	Seconds     float64    `json:"runningSeconds"`
	Deadline    *time.Time `json:"deadline"`          // null: the source gives none
	LeftSeconds float64    `json:"deadlineInSeconds"` // negative once past
	Extensions  int        `json:"extensions"`
	Batch       int        `json:"batch"`            // the messages of its handler call: 1, or a batch handler's call size
	Oldest      bool       `json:"oldest,omitempty"` // the longest-running handler of every pool
}

func (c *Console[T]) workers() (WorkersView, error) {
	if c.cfg.workers == nil {
		return WorkersView{}, notFound("no workers: the console was made without WithWorkers")
	}
	v := WorkersView{Pools: []PoolRow{}}
	var oldest *HandlerRow
	for _, ps := range c.cfg.workers.Pools() {
		row := PoolRow{
			Name: ps.Name, Workers: ps.Workers, Busy: len(ps.Handlers), Held: ps.Stats.InFlight, Outstanding: ps.MaxOutstanding,
			Started: ps.Started.UTC(), Now: ps.Now.UTC(), Draining: ps.Draining, Stats: ps.Stats, Handlers: []HandlerRow{},
		}
		for _, h := range ps.Handlers {
			hr := HandlerRow{
				MessageID: h.MessageID.String(), Topic: h.Topic, Key: h.Key, Attempt: h.Attempt, MaxAttempts: h.MaxAttempts,
				Started: h.Started.UTC(), Seconds: ps.Now.Sub(h.Started).Seconds(), Deadline: timePtr(h.Deadline), Extensions: h.Extensions,
				Batch: h.Batch,
			}
			if !h.Deadline.IsZero() {
				hr.LeftSeconds = h.Deadline.Sub(ps.Now).Seconds()
			}
			row.Handlers = append(row.Handlers, hr)
		}
		if len(row.Handlers) > 0 {
			row.OldestSeconds = row.Handlers[0].Seconds
		}
		v.Pools = append(v.Pools, row)
	}
	for i := range v.Pools {
		if hs := v.Pools[i].Handlers; len(hs) > 0 && (oldest == nil || hs[0].Seconds > oldest.Seconds) {
			oldest = &hs[0]
		}
	}
	if oldest != nil {
		oldest.Oldest = true
	}
	return v, nil
}

func (c *Console[T]) workersPage(w http.ResponseWriter, r *http.Request) {
	v, err := c.workers()
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "workers", v)
}

func (c *Console[T]) workersJSON(w http.ResponseWriter, r *http.Request) {
	v, err := c.workers()
	if err != nil {
		writeJSON(w, statusOf(err), Result{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// workerActions are the actions on a running job: job-cancel stops the
// handler of the message id (the form's id field, a UUID), its message
// settled as the form's as field says: retry (its attempt spent),
// dead-letter or delete (poller.Registry.Cancel). A handler that ignores
// its context keeps running, and its lease, until it returns.
func workerActions[T any]() []actionDef[T] {
	return []actionDef[T]{
		{"job-cancel", func(c *Console[T], r *http.Request) (Result, error) {
			if c.cfg.workers == nil {
				return Result{}, notFound("no workers: the console was made without WithWorkers")
			}
			id, err := uuid.Parse(r.PostForm.Get("id"))
			if err != nil {
				return Result{}, badRequest("id: %v", err)
			}
			as, ok := map[string]poller.CancelAs{"retry": poller.CancelRetry, "dead-letter": poller.CancelDeadLetter, "delete": poller.CancelDelete}[r.PostForm.Get("as")]
			if !ok {
				return Result{}, badRequest("as must be retry, dead-letter or delete, not %q", r.PostForm.Get("as"))
			}
			err = c.cfg.workers.Cancel(id, as)
			if errors.Is(err, poller.ErrNotRunning) {
				return Result{}, notFound("no handler of message %s is running (it may have just returned)", id)
			}
			if err != nil {
				return Result{}, err
			}
			return Result{Count: 1, Cancelled: as.String()}, nil
		}},
	}
}

// RunningJob is a message's running handler, as its message page shows
// it: the pool's name and the handler's row.
type RunningJob struct {
	Pool string `json:"pool"`
	HandlerRow
}

// runningJob finds a handler of message id in the pools of WithWorkers's
// registry; nil if none runs, or the console has no registry.
func (c *Console[T]) runningJob(id uuid.UUID) *RunningJob {
	if c.cfg.workers == nil {
		return nil
	}
	v, err := c.workers()
	if err != nil {
		return nil
	}
	want := id.String()
	for _, p := range v.Pools {
		for _, h := range p.Handlers {
			if h.MessageID == want {
				return &RunningJob{Pool: p.Name, HandlerRow: h}
			}
		}
	}
	return nil
}
