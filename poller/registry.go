package poller

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/lease"
)

// Registry is where pools say what they are doing, for an operator's view
// (the console's Workers page, console.WithWorkers): a pool made
// WithRegistry joins it when a Run starts and leaves it when the Run
// returns; meanwhile Pools shows its workers, its counters and every
// handler running, with its message, since when and its lease's deadline.
// It is safe for concurrent use; the zero Registry is empty and ready.
type Registry struct {
	mu    sync.Mutex
	next  uint64
	pools map[uint64]registered
}

// registered is a running pool: its status, and its Cancel.
type registered struct {
	snap   func() PoolStatus
	cancel func(uuid.UUID, CancelAs) bool
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{pools: map[uint64]registered{}} }

// join adds a running pool, whose status snap reports and whose jobs
// cancel stops, and returns the function that takes it out.
func (g *Registry) join(snap func() PoolStatus, cancel func(uuid.UUID, CancelAs) bool) (leave func()) {
	g.mu.Lock()
	if g.pools == nil { // a zero Registry
		g.pools = map[uint64]registered{}
	}
	g.next++
	id := g.next
	g.pools[id] = registered{snap, cancel}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.pools, id)
		g.mu.Unlock()
	}
}

// Pools returns the status of every pool running now, by name (pools of
// one name in the order they started). Each is read as Pools runs: a
// pool's Handlers and Stats are each consistent, not with each other.
func (g *Registry) Pools() []PoolStatus {
	g.mu.Lock()
	snaps := make([]func() PoolStatus, 0, len(g.pools))
	ids := make([]uint64, 0, len(g.pools))
	for id := range g.pools {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		snaps = append(snaps, g.pools[id].snap)
	}
	g.mu.Unlock()
	out := make([]PoolStatus, 0, len(snaps))
	for _, snap := range snaps { // outside the lock: a snapshot takes the pool's
		out = append(out, snap())
	}
	slices.SortStableFunc(out, func(a, b PoolStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// PoolStatus is one running pool, as its Registry shows it.
type PoolStatus struct {
	Name           string    // WithRegistry's name
	Workers        int       // handlers that may run at once (WithWorkers)
	MaxOutstanding int       // leases it may hold at once (WithMaxOutstanding)
	Started        time.Time // when this Run started, on the pool's clock
	Now            time.Time // the pool's clock when the status was read
	Draining       bool      // the Run is stopping: no handler starts
	Stats          Stats
	// Handlers are the handlers running now, the longest-running first.
	Handlers []Handling
}

// Handling is one handler at work, on one message.
type Handling struct {
	MessageID   uuid.UUID
	Topic       string
	Key         string // the message's ordering key, "" for none
	Attempt     int
	MaxAttempts int // 0: unlimited, or the source does not say
	LeaseID     lease.ID
	Started     time.Time // when the handler started, on the pool's clock
	Deadline    time.Time // the lease's deadline as last set (zero: the source gives none)
	Extensions  int       // how many times the pool extended the lease
	Batch       int       // the deliveries of its handler call: 1 for a Handler, the call's size for a BatchHandler
}

// WithRegistry makes the pool show in g (see Registry) under name while
// it runs, and its running jobs cancellable by Registry.Cancel. It costs
// a pool a short lock, a clock reading and a cancellable context per
// message; a pool without it pays nothing. A nil g or an empty name is refused by
// New.
func WithRegistry(g *Registry, name string) Option {
	return Option{func(c *config) {
		switch {
		case g == nil:
			c.fail(backend.Invalid("WithRegistry: nil registry"))
		case name == "":
			c.fail(backend.Invalid("WithRegistry: empty name"))
		}
		c.registry, c.name = g, name
	}}
}

// starting records that it's handler starts now, for the registry.
func (r *run[T]) starting(it *item[T], cancel context.CancelCauseFunc) {
	now := r.p.cfg.clock.Now()
	r.mu.Lock()
	it.started, it.cancel = now, cancel
	r.handling[it] = struct{}{}
	r.mu.Unlock()
}

// stopped records that it's handler has returned, and returns what
// Cancel chose for its message (zero: it was not cancelled) and why.
func (r *run[T]) stopped(it *item[T]) (CancelAs, error) {
	r.mu.Lock()
	delete(r.handling, it)
	as, cause := it.cancelAs, it.cancelBy
	r.mu.Unlock()
	return as, cause
}

// status is the run's PoolStatus.
func (r *run[T]) status() PoolStatus {
	p := r.p
	st := PoolStatus{
		Name: p.cfg.name, Workers: p.cfg.workers, MaxOutstanding: p.cfg.maxOutstanding,
		Started: r.began, Now: p.cfg.clock.Now(), Draining: r.stopping.Load(), Stats: p.Stats(),
	}
	r.mu.Lock()
	st.Handlers = make([]Handling, 0, len(r.handling))
	for it := range r.handling {
		d := it.d
		st.Handlers = append(st.Handlers, Handling{
			MessageID: d.ID, Topic: d.Topic, Key: d.Key, Attempt: d.Attempt, MaxAttempts: d.MaxAttempts,
			LeaseID: d.LeaseID, Started: it.started, Deadline: it.deadline, Extensions: it.extensions, Batch: it.batch,
		})
	}
	r.mu.Unlock()
	slices.SortFunc(st.Handlers, func(a, b Handling) int {
		return cmp.Or(a.Started.Compare(b.Started), cmp.Compare(a.LeaseID.Seq(), b.LeaseID.Seq()), cmp.Compare(a.LeaseID.Delivery(), b.LeaseID.Delivery()))
	})
	return st
}
