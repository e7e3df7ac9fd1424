package console

import (
	"fmt"
	"net/http"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/schedule"
)

// WithSchedules shows s's schedules on a Schedules page (and as JSON at
// api/schedules): each one's spec and missed-slot policy, its next and last
// slot, what it fired and skipped, and its last error; with buttons to
// pause, resume and fire one now (the actions schedule-pause,
// schedule-resume and schedule-trigger, each with the field schedule =
// its name). A nil s is refused by New.
func WithSchedules(s *schedule.Scheduler) Option {
	return Option{func(c *config) {
		if s == nil {
			c.err = backend.Invalid("console: WithSchedules(nil)")
		}
		c.sched = s
	}}
}

// ScheduleRow is one schedule as api/schedules shows it (see
// schedule.Status). A time the schedule does not have yet is null.
type ScheduleRow struct {
	Name          string     `json:"name"`
	Spec          string     `json:"spec"`
	Missed        string     `json:"missed"` // the missed-slot policy
	Paused        bool       `json:"paused"`
	NextSlot      *time.Time `json:"nextSlot"`
	NextFire      *time.Time `json:"nextFire"` // the next slot plus its jitter, or its retry
	LastSlot      *time.Time `json:"lastSlot"`
	LastFired     *time.Time `json:"lastFired"`
	Fired         uint64     `json:"fired"`
	Triggered     uint64     `json:"triggered"`
	SkippedMissed uint64     `json:"skippedMissed"`
	SkippedBusy   uint64     `json:"skippedBusy"`
	SkippedPaused uint64     `json:"skippedPaused"`
	LastSkipped   *time.Time `json:"lastSkipped"`
	Failures      uint64     `json:"failures"`
	LastError     string     `json:"lastError,omitempty"`
	LastErrorAt   *time.Time `json:"lastErrorAt"`
}

// SchedulesView is the JSON of api/schedules.
type SchedulesView struct {
	Schedules []ScheduleRow `json:"schedules"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func (c *Console[T]) schedules() (SchedulesView, error) {
	if c.cfg.sched == nil {
		return SchedulesView{}, notFound("no schedules: the console was made without WithSchedules")
	}
	v := SchedulesView{Schedules: []ScheduleRow{}}
	for _, st := range c.cfg.sched.Status() {
		v.Schedules = append(v.Schedules, ScheduleRow{
			Name: st.Name, Spec: st.Spec, Missed: st.Missed, Paused: st.Paused,
			NextSlot: timePtr(st.NextSlot), NextFire: timePtr(st.NextFire),
			LastSlot: timePtr(st.LastSlot), LastFired: timePtr(st.LastFired),
			Fired: st.Fired, Triggered: st.Triggered,
			SkippedMissed: st.SkippedMissed, SkippedBusy: st.SkippedBusy, SkippedPaused: st.SkippedPaused,
			LastSkipped: timePtr(st.LastSkipped),
			Failures:    st.Failures, LastError: st.LastError, LastErrorAt: timePtr(st.LastErrorAt),
		})
	}
	return v, nil
}

func (c *Console[T]) schedulesPage(w http.ResponseWriter, r *http.Request) {
	v, err := c.schedules()
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "schedules", v)
}

func (c *Console[T]) schedulesJSON(w http.ResponseWriter, r *http.Request) {
	v, err := c.schedules()
	if err != nil {
		writeJSON(w, statusOf(err), Result{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// scheduleActions are the actions on one schedule, named by the form's
// schedule field.
func scheduleActions[T any]() []actionDef[T] {
	named := func(c *Console[T], r *http.Request) (string, error) {
		if c.cfg.sched == nil {
			return "", notFound("no schedules: the console was made without WithSchedules")
		}
		name := r.PostForm.Get("schedule")
		if name == "" {
			return "", badRequest("schedule (its name) is required")
		}
		return name, nil
	}
	return []actionDef[T]{
		{"schedule-pause", func(c *Console[T], r *http.Request) (Result, error) {
			name, err := named(c, r)
			if err == nil {
				err = c.cfg.sched.Pause(name)
			}
			return Result{Schedule: name}, err
		}},
		{"schedule-resume", func(c *Console[T], r *http.Request) (Result, error) {
			name, err := named(c, r)
			if err == nil {
				err = c.cfg.sched.Resume(name)
			}
			return Result{Schedule: name}, err
		}},
		{"schedule-trigger", func(c *Console[T], r *http.Request) (Result, error) {
			name, err := named(c, r)
			if err != nil {
				return Result{}, err
			}
			if _, err := c.cfg.sched.Trigger(r.Context(), name); err != nil {
				return Result{Schedule: name}, fmt.Errorf("the fire failed: %w", err)
			}
			return Result{Schedule: name, Count: 1}, nil
		}},
	}
}
