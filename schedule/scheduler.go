package schedule

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Errors returned by a Scheduler (wrapped with the schedule's name; match
// them with errors.Is).
var (
	// ErrNotFound: no schedule of that name was added.
	ErrNotFound = errors.New("schedule: not found")
	// ErrExists: Add named a schedule already added.
	ErrExists = errors.New("schedule: already exists")
	// ErrRunning: Run was called while another Run of the same Scheduler
	// is active.
	ErrRunning = errors.New("schedule: already running")
)

// MaxNameLen bounds a schedule's name, so that every dedup ID it makes
// fits the strictest backend's (SQS FIFO's 128 characters).
const MaxNameLen = 64

// Fire is one firing of a schedule, handed to its Job.
type Fire struct {
	// Schedule is the schedule's name.
	Schedule string
	// Slot is the slot fired, in the schedule's location (UTC for Every).
	// For a Trigger, the clock's time of the call.
	Slot time.Time
	// DedupID names the slot: "sched:" + name + ":" + the slot in UTC,
	// RFC 3339 with nanoseconds. Every scheduler, in any process, gives
	// a slot the same one; publish with it (broker.WithDedupID and its
	// like in every backend) and the slot is in the queue once, however
	// many schedulers fire it and however often a crash makes one fire
	// it again, as long as the backend's dedup window covers the time
	// between them. A Trigger's is "sched:" + name + ":trigger:" + a
	// fresh UUID.
	DedupID string
	// Triggered reports a fire by Trigger, not by the clock.
	Triggered bool
}

// Job does what a schedule's fire does: usually one publish with
// f.DedupID (Publish makes that Job for a broker). It runs on Run's
// goroutine (Trigger's caller for a trigger), with no lock of the
// scheduler held, one job at a time per Run; a Job shared by several
// schedules, or Triggered while Run fires it, must be safe for concurrent
// use. An error leaves the slot to be retried (WithRetry); so does a
// panic, which the scheduler recovers as a *poller.PanicError.
type Job func(ctx context.Context, f Fire) error

// Status is what a schedule has done and will do, as Scheduler.Status
// reports it.
type Status struct {
	Name   string
	Spec   string // Spec.String()
	Missed string // the missed-slot policy
	Paused bool
	// NextSlot is the next slot the schedule will fire (zero while
	// paused), and NextFire when: NextSlot plus its jitter, or later
	// while a failed fire waits out its retry.
	NextSlot, NextFire time.Time
	// LastSlot is the last slot fired (zero before the first), and
	// LastFired the clock's time when its job returned.
	LastSlot, LastFired time.Time
	Fired               uint64 // slots fired
	Triggered           uint64 // fires by Trigger that returned nil
	// Skipped counts the slots not fired, by cause, and LastSkipped is
	// the latest of them.
	SkippedMissed, SkippedBusy, SkippedPaused uint64
	LastSkipped                               time.Time
	// Failures counts jobs (and busy checks, and Store saves) that
	// returned an error; LastError is the latest one's text and
	// LastErrorAt when.
	Failures    uint64
	LastError   string
	LastErrorAt time.Time
}

// Scheduler fires schedules on a clock. Add schedules, then Run it (in a
// goroutine); Add, Remove, Pause, Resume and Trigger work before and
// while it runs. All methods are safe for concurrent use.
type Scheduler struct {
	clk   clock.Clock
	store Store             // nil: none
	retry queue.RetryPolicy // a failed fire's backoff

	kick chan struct{}    // wakes Run after a change; buffered 1
	pk   *backend.Parking // marked while Run waits with nothing due

	qmu sync.Mutex
	qch chan struct{} // closed and replaced at each change of pk

	mu      sync.Mutex // guards everything below
	entries map[string]*entry
	running bool
}

// entry is one schedule.
type entry struct {
	name string
	spec Spec
	job  Job
	cfg  entryConfig

	cursor   time.Time // the last slot handled (fired or skipped); the slots after it are pending
	since    time.Time // since when a Run has been running for e: the slots up to it were missed
	next     time.Time // spec.Next(cursor)
	retryAt  time.Time // while a fire failed: not before this
	failures int       // consecutive failures of the pending slot
	removed  bool
	st       Status
}

// New returns a Scheduler with no schedules; options that are out of
// range return an error matching queue.ErrInvalidArgument.
func New(opts ...Option) (*Scheduler, error) {
	cfg := config{clk: clock.New()}
	for _, o := range opts {
		if o.apply == nil {
			return nil, backend.Invalid("the zero Option")
		}
		o.apply(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	s := &Scheduler{
		clk:     cfg.clk,
		store:   cfg.store,
		retry:   cfg.retry,
		kick:    make(chan struct{}, 1),
		qch:     make(chan struct{}),
		entries: make(map[string]*entry),
	}
	s.pk = backend.NewParking(s.changed)
	return s, nil
}

// Add adds a schedule named name that runs job at each slot of spec.
// The name must be 1 to MaxNameLen characters of letters, digits, '.',
// '_' and '-', and not taken (ErrExists). With a Store, the schedule
// carries on after the last slot the store has for its name; without
// one, or the first time, its first slot is the first after now. An
// invalid spec, a nil job or an option out of range returns an error
// matching queue.ErrInvalidArgument; a Store that cannot be read returns
// its error. Nothing is added when Add returns an error.
func (s *Scheduler) Add(name string, spec Spec, job Job, opts ...AddOption) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := spec.Err(); err != nil {
		return fmt.Errorf("schedule %s: %w", name, err)
	}
	if job == nil {
		return backend.Invalid("schedule %s: nil job", name)
	}
	cfg := entryConfig{limit: DefaultCatchUpLimit, grace: DefaultGrace}
	for _, o := range opts {
		if o.apply == nil {
			return backend.Invalid("schedule %s: the zero AddOption", name)
		}
		o.apply(&cfg)
	}
	if cfg.err != nil {
		return fmt.Errorf("schedule %s: %w", name, cfg.err)
	}
	if spec.every > 0 && cfg.jitter >= spec.every {
		return backend.Invalid("schedule %s: WithJitter(%v) must be less than the interval %v", name, cfg.jitter, spec.every)
	}
	now := s.clk.Now()
	cursor := now
	if s.store != nil {
		last, ok, err := s.store.Load(name)
		if err != nil {
			return fmt.Errorf("schedule %s: store: %w", name, err)
		}
		if ok {
			cursor = last
		}
	}
	e := &entry{name: name, spec: spec, job: job, cfg: cfg, cursor: cursor, next: spec.Next(cursor), since: now}
	e.st = Status{Name: name, Spec: spec.String(), Missed: cfg.missed.String(), Paused: cfg.paused}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.entries[name]; ok {
		return fmt.Errorf("schedule %s: %w", name, ErrExists)
	}
	s.entries[name] = e
	s.changeLocked()
	return nil
}

func checkName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return backend.Invalid("schedule name %q: want 1 to %d characters", name, MaxNameLen)
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}); i >= 0 {
		return backend.Invalid("schedule name %q: %q is not a letter, digit, '.', '_' or '-'", name, name[i])
	}
	return nil
}

// Remove removes the schedule: it fires no more (a job running now
// finishes). Its Store entry is kept, so adding it again carries on.
func (s *Scheduler) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookupLocked(name)
	if err != nil {
		return err
	}
	e.removed = true
	delete(s.entries, name)
	s.changeLocked()
	return nil
}

// Pause stops the schedule firing until Resume; pausing a paused one
// changes nothing. A pause lasts while the Scheduler does: it is not kept
// in the Store.
func (s *Scheduler) Pause(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookupLocked(name)
	if err != nil {
		return err
	}
	e.st.Paused = true
	s.changeLocked()
	return nil
}

// Resume lets a paused schedule fire again from now: the slots that passed
// while it was paused are skipped (SkippedPaused), whatever its missed-slot
// policy. Resuming one that is not paused changes nothing.
func (s *Scheduler) Resume(name string) error {
	s.mu.Lock()
	e, err := s.lookupLocked(name)
	if err != nil || !e.st.Paused {
		s.mu.Unlock()
		return err
	}
	e.st.Paused = false
	now := s.clk.Now()
	e.since = laterOf(e.since, now)
	n, last := e.spec.slotsThrough(e.cursor, now)
	var save func() error
	if n > 0 {
		e.st.SkippedPaused += uint64(n)
		e.st.LastSkipped = last
		save = s.advanceLocked(e, last)
	}
	s.changeLocked()
	s.mu.Unlock()
	s.saved(e, save)
	return nil
}

// Trigger fires the schedule now, outside its slots, with a dedup ID of
// its own (so it never takes a slot's place), and returns the Fire and
// the job's error. It runs the job in the caller's goroutine, whether or
// not Run is running and even while the schedule is paused, and changes
// none of its slots.
func (s *Scheduler) Trigger(ctx context.Context, name string) (Fire, error) {
	if ctx == nil {
		return Fire{}, backend.Invalid("Trigger: nil context")
	}
	s.mu.Lock()
	e, err := s.lookupLocked(name)
	s.mu.Unlock()
	if err != nil {
		return Fire{}, err
	}
	f := Fire{Schedule: name, Slot: s.clk.Now(), DedupID: "sched:" + name + ":trigger:" + uuid.NewString(), Triggered: true}
	err = call(ctx, e.job, f)
	s.mu.Lock()
	if err != nil {
		s.failedLocked(e, err)
	} else {
		e.st.Triggered++
	}
	s.mu.Unlock()
	return f, err
}

// Status returns every schedule's status, sorted by name.
func (s *Scheduler) Status() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, e.statusLocked())
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (e *entry) statusLocked() Status {
	st := e.st
	if !st.Paused && !e.next.IsZero() {
		st.NextSlot, st.NextFire = e.next, e.fireAt()
	}
	return st
}

func (s *Scheduler) lookupLocked(name string) (*entry, error) {
	e, ok := s.entries[name]
	if !ok {
		return nil, fmt.Errorf("schedule %s: %w", name, ErrNotFound)
	}
	return e, nil
}

// changeLocked tells Run that the schedules changed: it is no longer at
// rest (see AwaitQuiet) until it has looked again.
func (s *Scheduler) changeLocked() {
	s.pk.Unpark()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// changed is the Parking's notify: it wakes every AwaitQuiet.
func (s *Scheduler) changed() {
	s.qmu.Lock()
	close(s.qch)
	s.qch = make(chan struct{})
	s.qmu.Unlock()
}

// AwaitQuiet blocks until Run is at rest: waiting with no slot or retry
// due at the clock's time, after every change made before the call was
// looked at. It returns nil then, or ctx's error if ctx ends first (also
// while Run is not running). On a clock.Mock, a test moves the clock and
// calls AwaitQuiet, and then every fire due at the new time has returned:
//
//	mock.Add(time.Hour)
//	if err := s.AwaitQuiet(ctx); err != nil { ... }
func (s *Scheduler) AwaitQuiet(ctx context.Context) error {
	for {
		s.qmu.Lock()
		ch := s.qch
		s.qmu.Unlock()
		if s.pk.Parked(s.clk.Now()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fireAt is when the pending slot e.next fires: the slot plus its
// jitter, or the retry's time if later.
func (e *entry) fireAt() time.Time {
	at := e.next.Add(e.jitterOf(e.next))
	if e.retryAt.After(at) {
		at = e.retryAt
	}
	return at
}

// jitterOf is slot's share of the schedule's jitter: a hash of the name
// and the slot, the same in every process.
func (e *entry) jitterOf(slot time.Time) time.Duration {
	if e.cfg.jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(e.name))
	h.Write([]byte(slot.UTC().Format(time.RFC3339Nano)))
	return time.Duration(h.Sum64() % uint64(e.cfg.jitter))
}

// dedupID names a slot of the schedule.
func dedupID(name string, slot time.Time) string {
	return "sched:" + name + ":" + slot.UTC().Format(time.RFC3339Nano)
}
