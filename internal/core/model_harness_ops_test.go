package core

// The harness's operations that take more than a line or two: offer, poll,
// advance, redrive, a foreign lease, bad arguments. See model_harness_test.go.

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

func (h *harness) offer(o op, now time.Time, settled bool) {
	prio := queue.Priority(int(o.A%4) - 1)
	delay := h.dur(o.B, 0, 0, 0, 0, 0, 1, 2, h.vis/2, h.vis, 3*h.vis)
	key := ""
	if h.rc.keys {
		key = keyChoices[o.C%4]
	}
	var opts []OfferOption
	ttl := h.m.cfg.TTL
	switch o.C / 4 % 4 {
	case 2:
		ttl = h.vis
		opts = append(opts, WithTTL(ttl))
	case 3:
		ttl = 2*h.vis + 1
		opts = append(opts, WithTTL(ttl))
	}
	var at time.Time // zero: the queue reads its clock
	modelAt := now
	if o.C/16%4 == 3 && settled { // published a little earlier (nothing is due in between)
		at = now.Add(-h.vis / 2)
		modelAt = at
	}
	ctx := context.Background()
	if h.rc.cfg.Overflow == queue.OverflowBlock {
		ctx = canceledCtx // never block the harness
	}
	p := h.next
	h.next++
	msg := &queue.Message[int]{ID: payloadID(p), Payload: p, Priority: prio, Key: key, PublishedAt: at}
	h.logf("%v: Offer msg %d prio %v key %q delay %v ttl %v publishedAt %v", o, p, prio, key, delay, ttl, at)
	h.track[p] = &attemptTrack{}
	h.sameErr("Offer", h.q.Offer(ctx, msg, delay, opts...), h.m.offer(modelAt, msg, delay, ttl))
	h.q.mu.Lock()
	h.leftSettle = h.q.sweepLeft // the check's Stats settles it (every step ends with one)
	h.q.mu.Unlock()
	if h.leftSettle {
		h.cover["Offer:left the settle"]++
	}
}

func (h *harness) poll(o op, now time.Time) {
	n := []int{1, 1, 2, 3, 5, math.MaxInt}[o.A%6]
	vis := h.vis
	var got []queue.Delivery[int]
	var err, want error
	var exp []*mEntry
	expect := func(block bool) {
		switch {
		case h.m.closed:
			if block {
				want = queue.ErrClosed
			}
		default:
			h.m.settle(now)
			if block && h.m.leasable(n) == 0 {
				want = context.Canceled // it parks; the watchdog cancels it
				return
			}
			exp = h.m.poll(now, n, vis)
		}
	}
	switch o.B % 4 {
	case 0, 3:
		h.logf("%v: TryPoll(%d)", o, n)
		expect(false)
		got = h.q.TryPoll(n)
	case 1:
		n = min(n, 8)
		h.logf("%v: TryPollInto(len %d)", o, n)
		buf := make([]queue.Delivery[int], n)
		k, e := h.q.TryPollInto(buf)
		got, err = buf[:k], e
		expect(false)
		if h.m.closed {
			want = queue.ErrClosed
		}
	case 2:
		var call func(ctx context.Context) ([]queue.Delivery[int], error)
		switch o.C % 4 {
		case 0:
			h.logf("%v: Poll(%d)", o, n)
			call = func(ctx context.Context) ([]queue.Delivery[int], error) { return h.q.Poll(ctx, n) }
		case 1:
			n = min(n, 8)
			h.logf("%v: PollInto(len %d)", o, n)
			call = func(ctx context.Context) ([]queue.Delivery[int], error) {
				buf := make([]queue.Delivery[int], n)
				k, err := h.q.PollInto(ctx, buf)
				return buf[:k], err
			}
		default:
			vis = h.dur(o.C/4, h.vis/2+1, 3*h.vis, 1)
			h.logf("%v: PollWithVisibility(%d, %v)", o, n, vis)
			call = func(ctx context.Context) ([]queue.Delivery[int], error) { return h.q.PollWithVisibility(ctx, n, vis) }
		}
		expect(true)
		got, err = h.blockingPoll(call)
	}
	h.sameErr("Poll", err, want)
	h.compareDeliveries(got, exp)
}

// blockingPoll runs a blocking Poll; a watchdog cancels it once it parks,
// so a Poll that should return at once but waits fails instead of hanging.
func (h *harness) blockingPoll(call func(ctx context.Context) ([]queue.Delivery[int], error)) ([]queue.Delivery[int], error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wctx, wcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if h.q.AwaitParked(wctx, 1) == nil {
			cancel()
		}
	}()
	ds, err := call(ctx)
	wcancel()
	<-done
	return ds, err
}

func (h *harness) advance(o op, now time.Time) {
	var d time.Duration
	events := h.m.nextEvents(now)
	switch o.A % 9 {
	case 0:
		d = 0
	case 1:
		d = 1
	case 2: // exactly to the next event
		d = h.vis
		if len(events) > 0 {
			d = events[0].Sub(now)
		}
	case 3: // 1ns before the next event
		d = 1
		if len(events) > 0 && events[0].Sub(now) > 1 {
			d = events[0].Sub(now) - 1
		}
	case 4:
		d = h.vis
	case 5:
		d = time.Duration(o.B) * h.vis / 16
	case 6:
		d = time.Hour
	default: // exactly to one of the coming events
		if len(events) > 0 {
			d = events[int(o.B)%len(events)].Sub(now)
		}
	}
	h.defer_ = o.C%2 == 1
	h.logf("%v: clock +%v (check deferred: %v)", o, d, h.defer_)
	h.clk.advance(d)
	if !h.defer_ {
		h.check(false)
	}
}

func (h *harness) redrive(o op, now time.Time) {
	if o.B%4 == 0 { // a letter from elsewhere
		p := h.next
		h.next++
		key := ""
		if h.rc.keys {
			key = keyChoices[o.C%4]
		}
		msg := queue.Message[int]{ID: payloadID(p), Payload: p, Priority: queue.Priority(int(o.A%4) - 1), Key: key}
		h.logf("%v: Redrive foreign msg %d prio %v key %q", o, p, msg.Priority, key)
		h.track[p] = &attemptTrack{}
		dl := Letter[int]{DeadLetter: queue.DeadLetter[int]{Subscription: "elsewhere", Message: msg, Reason: queue.ReasonMaxAttempts, Attempts: 3}}
		h.sameErr("Redrive foreign", h.q.Redrive(dl), h.m.redrive(now, mDead{dl: dl.DeadLetter}, false))
		return
	}
	if len(h.dead) == 0 {
		h.logf("%v: (no dead letter to redrive)", o)
		return
	}
	i := int(o.A) % len(h.dead)
	pair := h.dead[i]
	h.logf("%v: Redrive dead msg %d (%v)", o, pair.real.Message.Payload, pair.real.Reason)
	err := h.q.Redrive(pair.real)
	h.sameErr("Redrive", err, h.m.redrive(now, pair.exp, true))
	if err == nil {
		h.cover["Redrive:"+pair.real.Reason.String()+" letter"]++
		h.dead = slices.Delete(h.dead, i, i+1)
		h.track[pair.real.Message.Payload].redriven = true
	}
}

func (h *harness) foreign(o op, now time.Time) {
	var id lease.ID
	if h.scope != 0 && len(h.leases) > 0 {
		r := h.leases[int(o.B)%len(h.leases)]
		switch o.A % 5 {
		case 1:
			id = lease.NewID(h.scope^2, r.id.Seq(), r.id.Delivery()) // another scope
		case 2:
			id = lease.NewID(h.scope, r.id.Seq(), r.e.delivery+1+uint32(o.C%3)) // never issued
		case 3:
			id = lease.NewID(h.scope, 1<<40+uint64(o.B), 1) // no such message
		case 4:
			id = lease.NewID(h.scope, r.id.Seq(), 0) // delivery 0 is never issued
		}
	}
	want := queue.ErrLeaseNotFound
	if h.m.closed {
		want = queue.ErrClosed
	} else {
		h.m.settle(now)
	}
	var err error
	var name string
	switch o.C / 4 % 6 {
	case 0:
		name, err = "Ack", h.q.Ack(id)
	case 1:
		name, err = "Nack", h.q.Nack(id, 0)
	case 2:
		name, err = "Extend", h.q.Extend(id, h.vis)
	case 3:
		name, err = "Release", h.q.Release(id)
	case 4:
		name, err = "Fail", h.q.Fail(id, nil)
	default:
		name, err = "Reject", h.q.Reject(id, nil)
	}
	h.logf("%v: %s of foreign id %v", o, name, id)
	h.sameErr(name+" of a foreign lease", err, want)
}

// bad calls with invalid arguments: each must return its documented error
// and change nothing (the Stats check after the step covers the latter).
func (h *harness) bad(o op, now time.Time) {
	r := h.pick(o.B, o.C)
	id := idOf(r)
	ctx := context.Background()
	closedOr := func(err error) error {
		if h.m.closed {
			return queue.ErrClosed
		}
		return err
	}
	type call struct {
		name string
		err  error
		want error
	}
	var calls []call
	switch o.A % 12 {
	case 0:
		for _, n := range []int{0, -1, math.MinInt} {
			if ds := h.q.TryPoll(n); ds != nil {
				h.fail("TryPoll(%d) = %v, want nil", n, ds)
			}
		}
		h.logf("%v: TryPoll(0|-1|MinInt)", o)
	case 1:
		_, e1 := h.q.TryPollInto(nil)
		_, e2 := h.q.TryPollInto([]queue.Delivery[int]{})
		calls = []call{{"TryPollInto(nil)", e1, queue.ErrInvalidArgument}, {"TryPollInto(empty)", e2, queue.ErrInvalidArgument}}
	case 2:
		calls = []call{
			{"Nack(-1ns)", h.q.Nack(id, -1), queue.ErrInvalidArgument},
			{"Nack(MinInt64)", h.q.Nack(id, math.MinInt64), queue.ErrInvalidArgument},
		}
	case 3:
		calls = []call{
			{"Extend(0)", h.q.Extend(id, 0), queue.ErrInvalidArgument},
			{"Extend(-1ns)", h.q.Extend(id, -1), queue.ErrInvalidArgument},
			{"Extend(MinInt64)", h.q.Extend(id, math.MinInt64), queue.ErrInvalidArgument},
		}
	case 4:
		//lint:ignore SA1012 a nil context is the invalid input under test
		e1 := h.q.Offer(nil, &queue.Message[int]{}, 0)
		calls = []call{
			{"Offer(nil ctx)", e1, queue.ErrInvalidArgument},
			{"Offer(nil msg)", h.q.Offer(ctx, nil, 0), queue.ErrInvalidArgument},
		}
	case 5:
		calls = []call{
			{"Offer(priority 3)", h.q.Offer(ctx, &queue.Message[int]{Priority: 3}, 0), queue.ErrInvalidArgument},
			{"Offer(priority -2)", h.q.Offer(ctx, &queue.Message[int]{Priority: -2}, 0), queue.ErrInvalidArgument},
			{"Offer(priority 127)", h.q.Offer(ctx, &queue.Message[int]{Priority: math.MaxInt8}, 0), queue.ErrInvalidArgument},
			{"Offer(delay -1)", h.q.Offer(ctx, &queue.Message[int]{}, -1), queue.ErrInvalidArgument},
			{"Offer(WithTTL(0))", h.q.Offer(ctx, &queue.Message[int]{}, 0, WithTTL(0)), queue.ErrInvalidArgument},
			{"Offer(WithTTL(-1))", h.q.Offer(ctx, &queue.Message[int]{}, 0, WithTTL(-1)), queue.ErrInvalidArgument},
		}
	case 6:
		calls = []call{
			{"Redrive(priority 9)", h.q.Redrive(Letter[int]{DeadLetter: queue.DeadLetter[int]{Message: queue.Message[int]{Priority: 9}}}), queue.ErrInvalidArgument},
			{"Redrive(priority MinInt8)", h.q.Redrive(Letter[int]{DeadLetter: queue.DeadLetter[int]{Message: queue.Message[int]{Priority: math.MinInt8}}}), queue.ErrInvalidArgument},
		}
	case 7:
		_, e1 := h.q.Poll(ctx, 0)
		_, e2 := h.q.Poll(ctx, math.MinInt)
		_, e3 := h.q.PollWithVisibility(ctx, 1, 0)
		_, e4 := h.q.PollWithVisibility(ctx, 1, -1)
		_, e5 := h.q.PollWithVisibility(ctx, 0, h.vis)
		_, e6 := h.q.PollInto(ctx, nil)
		//lint:ignore SA1012 a nil context is the invalid input under test
		_, e7 := h.q.Poll(nil, 1)
		calls = []call{
			{"Poll(0)", e1, queue.ErrInvalidArgument}, {"Poll(MinInt)", e2, queue.ErrInvalidArgument},
			{"PollWithVisibility(vis 0)", e3, queue.ErrInvalidArgument}, {"PollWithVisibility(vis -1)", e4, queue.ErrInvalidArgument},
			{"PollWithVisibility(n 0)", e5, queue.ErrInvalidArgument}, {"PollInto(nil)", e6, queue.ErrInvalidArgument},
			{"Poll(nil ctx)", e7, queue.ErrInvalidArgument},
		}
	case 8: // a done ctx leases nothing, even with messages visible
		ds, e1 := h.q.Poll(canceledCtx, 1)
		if len(ds) != 0 {
			h.fail("Poll(done ctx) leased %v", deliveredPayloads(ds))
		}
		k, e2 := h.q.PollInto(canceledCtx, make([]queue.Delivery[int], 2))
		if k != 0 {
			h.fail("PollInto(done ctx) leased %d", k)
		}
		_, e3 := h.q.PollWithVisibility(canceledCtx, 1, h.vis)
		calls = []call{{"Poll(done ctx)", e1, context.Canceled}, {"PollInto(done ctx)", e2, context.Canceled}, {"PollWithVisibility(done ctx)", e3, context.Canceled}}
	case 9:
		//lint:ignore SA1012 a nil context is the invalid input under test
		e1 := h.q.AwaitParked(nil, 0)
		calls = []call{
			{"AwaitParked(nil ctx)", e1, queue.ErrInvalidArgument},
			{"AwaitParked(-1)", h.q.AwaitParked(ctx, -1), queue.ErrInvalidArgument},
			{"AwaitParked(0)", h.q.AwaitParked(ctx, 0), closedOr(nil)},
		}
		if p := h.q.Parked(); p != 0 {
			h.fail("Parked() = %d with no Poll running", p)
		}
	case 10:
		e1 := h.q.AckBatch(nil)
		h.m.ack(now) // settles, like the real AckBatch
		e2 := h.q.AckBatch([]lease.ID{{}})
		calls = []call{{"AckBatch(nil)", e1, closedOr(nil)}, {"AckBatch(zero id)", e2, closedOr(queue.ErrLeaseNotFound)}}
	default:
		h.q.Sweep()
		h.m.settle(now)
		h.logf("%v: Settle", o)
	}
	for _, c := range calls {
		h.logf("%v: %s", o, c.name)
		h.sameErr(c.name, c.err, c.want)
	}
}

// manage deletes a held message, or makes it visible, by its ID; one time
// in eight the ID is one the queue does not hold.
func (h *harness) manage(o op, now time.Time) {
	var id uuid.UUID
	if n := len(h.m.held); n > 0 && o.A%8 != 7 {
		id = h.m.held[int(o.A)%n].msg.ID
	} else {
		id = payloadID(1<<30 + int(o.A)) // never offered
	}
	var n, wn int
	var err, werr error
	if o.B%2 == 0 {
		h.logf("%v: DeleteMessages(%v)", o, id)
		n, err = h.q.DeleteMessages(id)
		wn, werr = h.m.deleteMessage(now, id)
		h.sameErr("DeleteMessages", err, werr)
	} else {
		h.logf("%v: MakeVisible(%v)", o, id)
		n, err = h.q.MakeVisible(id)
		wn, werr = h.m.makeVisible(now, id)
		h.sameErr("MakeVisible", err, werr)
	}
	if n != wn {
		h.fail("%v: acted on %d, want %d", o, n, wn)
	}
}
