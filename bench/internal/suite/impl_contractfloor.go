package suite

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/leasebus/leasebus/bench/internal/leasefloor"
	"github.com/leasebus/leasebus/queue"
)

// The contract floors are the lease floor made to keep leasebus's public
// contract and nothing more, so that a ratio to them says what leasebus's
// own machinery costs, apart from what any broker with its API must do.
// A publish makes one envelope that every subscription shares (a
// queue.Message with a unique ID, the topic and a PublishedAt read from the
// clock), and a consumer gets each delivery as a queue.Delivery, by value:
// into a buffer it reuses (ContractFloor, as PollInto) or into a fresh
// slice each poll (ContractFloorPoll, as Poll). Each part is as cheap as
// leasebus makes it: the ID a fixed prefix and a counter, the time one
// reading of the monotonic clock. Nothing else: no priorities, attempts,
// dead letters or bounds, as in the floor.
//
// They are not table rows (Impls): BenchmarkContractFloor runs them on
// W1–W4, beside leasebus and the floor with a -bench pattern.
var ContractFloors = []Impl{ContractFloor, ContractFloorPoll}

// The two contract floors.
var (
	ContractFloor = Impl{
		Name:   "contractfloor",
		Module: "the lease floor with leasebus's envelope and deliveries (bench/leasefloor)",
		Notes:  "an envelope per publish; Poll into a reused []queue.Delivery, then Ack per lease",
		New:    func(s Setup) (System, error) { return newContractFloor(s, false), nil },
	}
	ContractFloorPoll = Impl{
		Name:   "contractfloor-poll",
		Module: ContractFloor.Module,
		Notes:  "as contractfloor, with a fresh []queue.Delivery each poll, as Poll returns",
		New:    func(s Setup) (System, error) { return newContractFloor(s, true), nil },
	}
)

type contractFloor struct {
	subs   []*leasefloor.Queue[*queue.Message[[]byte]]
	now    func() time.Time
	vis    time.Duration
	prefix uint64
	next   atomic.Uint64
	fresh  bool // a new slice of deliveries each poll
}

func newContractFloor(s Setup, fresh bool) *contractFloor {
	f := &contractFloor{now: monoNow(s), vis: visibility(s), prefix: 0x5eed_0000_8000_0000, fresh: fresh}
	f.subs = make([]*leasefloor.Queue[*queue.Message[[]byte]], s.Subs)
	for i := range f.subs {
		f.subs[i] = leasefloor.New[*queue.Message[[]byte]](f.now, f.vis)
	}
	return f
}

// monoNow returns the setup's clock, or the real one read as leasebus reads
// it for a publish: one monotonic reading past a full one taken at start.
func monoNow(s Setup) func() time.Time {
	if s.Clock != nil {
		return s.Clock.Now
	}
	base := time.Now()
	return func() time.Time { return base.Add(time.Since(base)) }
}

func (f *contractFloor) Publish(_ context.Context, p []byte) error {
	m := &queue.Message[[]byte]{Topic: "t", Payload: p, PublishedAt: f.now()}
	binary.BigEndian.PutUint64(m.ID[:8], f.prefix)
	binary.BigEndian.PutUint64(m.ID[8:], f.next.Add(1)|1<<63)
	for _, q := range f.subs {
		q.Publish(m)
	}
	return nil
}

func (f *contractFloor) Consumer(sub int) Consumer {
	return &contractConsumer{f: f, q: f.subs[sub]}
}

func (f *contractFloor) Close() error { return nil }

type contractConsumer struct {
	f      *contractFloor
	q      *leasefloor.Queue[*queue.Message[[]byte]]
	leases []leasefloor.Delivery[*queue.Message[[]byte]]
	out    []queue.Delivery[[]byte] // reused unless f.fresh
}

func (c *contractConsumer) Take(ctx context.Context, max int, fn func([]byte)) (int, error) {
	if cap(c.leases) < max {
		c.leases = make([]leasefloor.Delivery[*queue.Message[[]byte]], max)
		c.out = make([]queue.Delivery[[]byte], max)
	}
	n, err := c.q.Poll(ctx, c.leases[:max])
	ds := c.deliveries(n)
	for i := range ds {
		if fn != nil {
			fn(ds[i].Payload)
		}
		if err := c.q.Ack(c.leases[i].ID); err != nil {
			return i, err
		}
	}
	return n, err
}

// deliveries copies the first n leases into deliveries by value, as
// leasebus hands them over. The floor's Poll does not say the deadline it
// gave, so this reads the clock once more a poll.
func (c *contractConsumer) deliveries(n int) []queue.Delivery[[]byte] {
	if n == 0 {
		return nil
	}
	ds := c.out[:n]
	if c.f.fresh {
		ds = make([]queue.Delivery[[]byte], n)
	}
	deadline := c.f.now().Add(c.f.vis)
	for i, l := range c.leases[:n] {
		ds[i] = queue.Delivery[[]byte]{Message: *l.Payload, Attempt: 1, Deadline: deadline}
	}
	return ds
}

func (c *contractConsumer) Lease(max int) (int, error) {
	if cap(c.leases) < max {
		c.leases = make([]leasefloor.Delivery[*queue.Message[[]byte]], max)
		c.out = make([]queue.Delivery[[]byte], max)
	}
	n := c.q.TryPoll(c.leases[:max])
	c.deliveries(n)
	return n, nil
}
