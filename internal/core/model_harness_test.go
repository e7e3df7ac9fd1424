package core

// The harness that drives the real Queue and the reference model side by
// side (see model_test.go): one step per operation, then every check.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// tester is what the harness needs of *testing.T and *rapid.T.
type tester interface {
	Helper()
	Fatalf(format string, args ...any)
}

type attemptTrack struct {
	last     int  // Attempt of the last delivery
	released bool // its last lease was released: the next delivery has the same Attempt
	redriven bool // redriven since: the next delivery is attempt 1
}

type deadPair struct {
	real Letter[int]
	exp  mDead
}

type harness struct {
	t      tester
	rc     runConfig
	vis    time.Duration // the effective visibility timeout
	clk    driver
	q      *Queue[int]
	m      *model
	got    []Letter[int] // delivered to onDead, not yet compared
	dead   []deadPair    // dead letters not yet redriven
	leases []*leaseRec
	seen   map[lease.ID]bool
	lseq   map[*mEntry]uint64
	track  map[int]*attemptTrack
	scope  uint64 // the queue's lease scope, once a lease was seen
	next   int    // next payload
	trace  []string
	defer_ bool // the Stats check waits for the next operation (lazy expiry)
	// leftSettle is set by an Offer that left the settle due to the next
	// call: its dead letters come with the check's Stats.
	leftSettle bool

	ops   int
	cover map[string]int // what the run exercised, for the coverage floor
}

func newHarness(t tester, cfgBytes [configBytes]byte, clk driver) *harness {
	t.Helper()
	rc := decodeConfig(cfgBytes)
	h := &harness{
		t: t, rc: rc, clk: clk,
		seen:  make(map[lease.ID]bool),
		lseq:  make(map[*mEntry]uint64),
		track: make(map[int]*attemptTrack),
		cover: make(map[string]int),
	}
	for _, k := range configCover(cfgBytes) {
		h.cover[k]++
	}
	cfg := rc.cfg
	cfg.Clock = clk
	q, err := New(cfg, func(dl Letter[int]) { h.got = append(h.got, dl) })
	if err != nil {
		t.Fatalf("New(%v): %v", rc, err)
	}
	// A small inbox, so that the queue's bounds freeze and thaw it often.
	q.in = newInbox(q, modelInbox)
	h.q = q
	h.m = newModel(rc.cfg)
	h.vis = h.m.cfg.VisibilityTimeout
	got := q.Config()
	if got.VisibilityTimeout != h.m.cfg.VisibilityTimeout || got.MaxAttempts != h.m.cfg.MaxAttempts ||
		got.MaxQueue != h.m.cfg.MaxQueue || got.MaxInFlight != h.m.cfg.MaxInFlight || got.TTL != h.m.cfg.TTL ||
		got.Overflow != h.m.cfg.Overflow || got.Clock != clk || got.Name != cfg.Name {
		t.Fatalf("Config() = %+v, want the defaults filled in: %+v", got, h.m.cfg)
	}
	return h
}

// modelInbox is the harness queue's inbox size.
const modelInbox = 2

func (h *harness) close() { h.q.Close() }

func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s\nconfig: %v\noperations (the last one failed):\n  %s",
		fmt.Sprintf(format, args...), h.rc, strings.Join(h.trace, "\n  "))
}

func (h *harness) logf(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf(format, args...))
}

func (h *harness) run(ops []op) {
	h.t.Helper()
	for _, o := range ops {
		h.step(o)
	}
	h.check(false)
}

// errMask says which sentinels an error matches, so errors compare by class.
func errMask(err error) string {
	if err == nil {
		return "nil"
	}
	var names []string
	for _, s := range []struct {
		name string
		err  error
	}{
		{"NotFound", queue.ErrLeaseNotFound}, {"Expired", queue.ErrLeaseExpired}, {"Closed", queue.ErrClosed},
		{"Full", queue.ErrQueueFull}, {"Invalid", queue.ErrInvalidArgument}, {"Canceled", context.Canceled},
		{"NoMessage", queue.ErrMessageNotFound},
	} {
		if errors.Is(err, s.err) {
			names = append(names, s.name)
		}
	}
	if len(names) == 0 {
		return "other(" + err.Error() + ")"
	}
	return strings.Join(names, "+")
}

func (h *harness) sameErr(what string, got, want error) {
	h.t.Helper()
	h.cover[what+":"+errMask(want)]++
	if errMask(got) != errMask(want) {
		h.fail("%s: error %v (%s), want %s", what, got, errMask(got), errMask(want))
	}
}

func payloadID(p int) uuid.UUID {
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[8:], uint64(p))
	id[0] = 0x1e
	return id
}

func (h *harness) dur(b uint8, choices ...time.Duration) time.Duration {
	return choices[int(b)%len(choices)]
}

// pick chooses a lease: usually a current one, sometimes any lease ever
// issued (late, superseded, settled, gone). nil when none was issued.
func (h *harness) pick(a, mode uint8) *leaseRec {
	if len(h.leases) == 0 {
		return nil
	}
	if mode%4 != 3 {
		var cur []*leaseRec
		for _, r := range h.leases {
			if r.current() {
				cur = append(cur, r)
			}
		}
		if len(cur) > 0 {
			return cur[int(a)%len(cur)]
		}
	}
	return h.leases[int(a)%len(h.leases)]
}

func idOf(r *leaseRec) lease.ID {
	if r == nil {
		return lease.ID{}
	}
	return r.id
}

func describe(r *leaseRec) string {
	if r == nil {
		return "zero-id"
	}
	state := "gone"
	switch {
	case r.current():
		state = "current"
	case r.e.state != mGone:
		state = "not current"
	}
	return fmt.Sprintf("lease %v of msg %d (%s)", r.id, r.e.msg.Payload, state)
}

var canceledCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (h *harness) step(o op) {
	h.t.Helper()
	h.ops++
	now := h.clk.Now()
	settled := !h.defer_ // the last call settled the queue at now
	h.defer_ = false
	switch o.Kind {
	case opNop: // the checks only (not traced: shrunk sequences are full of them)
	case opOffer:
		h.offer(o, now, settled)
	case opPoll:
		h.poll(o, now)
	case opAck:
		r := h.pick(o.A, o.C)
		h.logf("%v: Ack %s", o, describe(r))
		late := r != nil && r.current() && (r.e.state == mReady || !now.Before(r.e.deadline))
		superseded := r != nil && r.e.state != mGone && r.delivery != r.e.delivery
		err := h.q.Ack(idOf(r))
		h.sameErr("Ack", err, h.m.ack(now, r))
		if err == nil && late {
			h.cover["Ack:late"]++
		}
		if superseded {
			h.cover["Ack:superseded"]++
		}
	case opAckBatch:
		r1, r2 := h.pick(o.A, o.C), h.pick(o.B, o.C>>2)
		recs := []*leaseRec{r1, r2}
		if o.C&0x10 != 0 {
			recs = append(recs, nil)
		}
		ids := make([]lease.ID, len(recs))
		var desc []string
		for i, r := range recs {
			ids[i] = idOf(r)
			desc = append(desc, describe(r))
		}
		h.logf("%v: AckBatch [%s]", o, strings.Join(desc, "; "))
		h.sameErr("AckBatch", h.q.AckBatch(ids), h.m.ack(now, recs...))
	case opNack:
		r := h.pick(o.A, o.C)
		delay := h.dur(o.B, 0, 0, 1, h.vis/2, h.vis, 3*h.vis)
		h.logf("%v: Nack %s delay %v", o, describe(r), delay)
		h.sameErr("Nack", h.q.Nack(idOf(r), delay), h.m.settleLease(now, r, func(e *mEntry) {
			e.lastErr = "nacked"
			h.m.retry(now, e, delay)
		}))
	case opFail:
		r := h.pick(o.A, o.C)
		var cause error
		if o.B%2 == 1 {
			cause = fmt.Errorf("boom %d", o.B)
		}
		h.logf("%v: Fail %s cause %v", o, describe(r), cause)
		h.sameErr("Fail", h.q.Fail(idOf(r), cause), h.m.settleLease(now, r, func(e *mEntry) {
			e.lastErr = causeText(cause)
			h.m.retry(now, e, h.m.cfg.Retry.Delay(e.attempt))
		}))
	case opReject:
		r := h.pick(o.A, o.C)
		var cause error
		if o.B%2 == 1 {
			cause = fmt.Errorf("poison %d", o.B)
		}
		h.logf("%v: Reject %s cause %v", o, describe(r), cause)
		h.sameErr("Reject", h.q.Reject(idOf(r), cause), h.m.settleLease(now, r, func(e *mEntry) {
			e.lastErr = causeText(cause)
			h.m.deadLetter(now, e, queue.ReasonRejected)
		}))
	case opRelease:
		r := h.pick(o.A, o.C)
		h.logf("%v: Release %s", o, describe(r))
		err := h.q.Release(idOf(r))
		h.sameErr("Release", err, h.m.settleLease(now, r, func(e *mEntry) {
			e.attempt--
			h.m.back(now, e, 0)
		}))
		if err == nil {
			h.track[r.e.msg.Payload].released = true
		}
	case opExtend:
		r := h.pick(o.A, o.C)
		timeout := h.dur(o.B, 1, h.vis/2, h.vis, 2*h.vis, time.Hour)
		h.logf("%v: Extend %s by %v", o, describe(r), timeout)
		h.sameErr("Extend", h.q.Extend(idOf(r), timeout), h.m.extend(now, r, timeout))
	case opAdvance:
		h.advance(o, now)
		return
	case opSetBack:
		d := h.dur(o.A, 1, h.vis/2, h.vis, time.Hour)
		h.logf("%v: clock set back by %v", o, d)
		h.clk.set(now.Add(-d))
		h.defer_ = o.C%2 == 1
		if h.defer_ {
			return
		}
	case opRedrive:
		h.redrive(o, now)
	case opPurge:
		if o.A%2 == 1 {
			h.logf("%v: (no purge)", o)
			break
		}
		h.logf("%v: Purge", o)
		n, err := h.q.Purge()
		wn, werr := h.m.purge(now)
		h.sameErr("Purge", err, werr)
		if n != wn {
			h.fail("Purge() = %d, want %d", n, wn)
		}
	case opForeign:
		h.foreign(o, now)
	case opManage:
		h.manage(o, now)
	case opBad:
		h.bad(o, now)
	case opClose:
		if o.A%16 != 7 {
			h.logf("%v: (no close)", o)
			break
		}
		h.logf("%v: Close", o)
		h.sameErr("Close", h.q.Close(), nil)
		h.sameErr("Close again", h.q.Close(), nil)
		h.m.closed = true
	}
	h.check(h.leftSettle)
	h.leftSettle = false
}

func (h *harness) compareDeliveries(got []queue.Delivery[int], exp []*mEntry) {
	h.t.Helper()
	if len(got) != len(exp) {
		h.fail("poll leased %v, want %v", deliveredPayloads(got), entryPayloads(exp))
	}
	for i, d := range got {
		e := exp[i]
		switch {
		case d.Payload != e.msg.Payload:
			h.fail("delivery %d: payload order %v, want %v", i, deliveredPayloads(got), entryPayloads(exp))
		case d.ID != e.msg.ID || d.Priority != e.msg.Priority || d.Key != e.msg.Key || !d.PublishedAt.Equal(e.msg.PublishedAt):
			h.fail("delivery %d: message %+v, want %+v", i, d.Message, *e.msg)
		case d.Attempt != e.attempt:
			h.fail("delivery of msg %d: Attempt %d, want %d", d.Payload, d.Attempt, e.attempt)
		case !d.Deadline.Equal(e.deadline):
			h.fail("delivery of msg %d: Deadline %v, want %v", d.Payload, d.Deadline, e.deadline)
		case d.LeaseID.IsZero() || h.seen[d.LeaseID]:
			h.fail("delivery of msg %d: lease %v is zero or was issued before", d.Payload, d.LeaseID)
		case d.LeaseID.Delivery() != e.delivery:
			h.fail("delivery of msg %d: lease %v names delivery %d, want %d", d.Payload, d.LeaseID, d.LeaseID.Delivery(), e.delivery)
		case h.m.cfg.MaxAttempts != queue.UnlimitedAttempts && d.Attempt > h.m.cfg.MaxAttempts:
			h.fail("delivery of msg %d: Attempt %d beyond MaxAttempts %d", d.Payload, d.Attempt, h.m.cfg.MaxAttempts)
		}
		if h.scope == 0 {
			h.scope = d.LeaseID.Scope()
		}
		if d.LeaseID.Scope() != h.scope {
			h.fail("lease %v: scope changed from %x", d.LeaseID, h.scope)
		}
		if seq, ok := h.lseq[e]; ok && seq != d.LeaseID.Seq() {
			h.fail("lease %v: seq changed from %d for the same hold of msg %d", d.LeaseID, seq, d.Payload)
		}
		h.lseq[e] = d.LeaseID.Seq()
		if back, err := lease.ParseID(d.LeaseID.String()); err != nil || back != d.LeaseID {
			h.fail("lease %v does not round-trip: %v %v", d.LeaseID, back, err)
		}
		// Attempts never go down, except by Release (the same again) or Redrive (1).
		tr := h.track[d.Payload]
		want := tr.last + 1
		switch {
		case tr.redriven:
			want = 1
		case tr.released:
			want = tr.last
		}
		if d.Attempt != want {
			h.fail("msg %d: Attempt %d after %d (released %v, redriven %v)", d.Payload, d.Attempt, tr.last, tr.released, tr.redriven)
		}
		switch {
		case tr.redriven:
			h.cover["delivery:after redrive"]++
		case tr.released:
			h.cover["delivery:after release"]++
		case d.Attempt > 1:
			h.cover["delivery:redelivery"]++
		default:
			h.cover["delivery:first"]++
		}
		*tr = attemptTrack{last: d.Attempt}
		h.seen[d.LeaseID] = true
		h.leases = append(h.leases, &leaseRec{id: d.LeaseID, e: e, delivery: e.delivery})
	}
}

func deliveredPayloads(ds []queue.Delivery[int]) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%d#%d", d.Payload, d.Attempt)
	}
	return out
}

func entryPayloads(es []*mEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%d#%d", e.msg.Payload, e.attempt)
	}
	return out
}

// compareDead compares the dead letters the queue handed to onDead since
// the last call with those the model made, in order.
func (h *harness) compareDead() {
	h.t.Helper()
	got, exp := h.got, h.m.dead
	h.got, h.m.dead = nil, nil
	if len(got) != len(exp) {
		var g, w []string
		for _, d := range got {
			g = append(g, fmt.Sprintf("%d(%v)", d.Message.Payload, d.Reason))
		}
		for _, d := range exp {
			w = append(w, fmt.Sprintf("%d(%v)", d.dl.Message.Payload, d.dl.Reason))
		}
		h.fail("dead letters %v, want %v", g, w)
	}
	for i, d := range got {
		w := exp[i].dl
		if d.Subscription != w.Subscription || d.Message.ID != w.Message.ID || d.Message.Payload != w.Message.Payload ||
			d.Message.Priority != w.Message.Priority || d.Message.Key != w.Message.Key ||
			d.Reason != w.Reason || d.Attempts != w.Attempts || d.LastError != w.LastError ||
			!d.At.Equal(w.At) || d.KeyContinued != w.KeyContinued {
			h.fail("dead letter %d:\n got  %s\n want %s", i, dlString(d.DeadLetter), dlString(w))
		}
		h.dead = append(h.dead, deadPair{real: d, exp: exp[i]})
		h.cover["dead letter:"+d.Reason.String()]++
		if d.KeyContinued {
			h.cover["dead letter:key continued"]++
		}
	}
}

func dlString(d queue.DeadLetter[int]) string {
	return fmt.Sprintf("{sub %q msg %d prio %v key %q reason %v attempts %d lastErr %q at %v keyContinued %v}",
		d.Subscription, d.Message.Payload, d.Message.Priority, d.Message.Key, d.Reason, d.Attempts, d.LastError, d.At, d.KeyContinued)
}

// check compares Stats, the dead letters and the queue's bookkeeping with
// the model, and checks the conservation invariant.
// check compares the queue with the model. After an Offer that left the
// settle due to the next call (offerNeedsNoSettleLocked), the dead letters
// come with the Stats that settles.
func (h *harness) check(settleLeft bool) {
	h.t.Helper()
	if !settleLeft {
		h.compareDead()
	}
	now := h.clk.Now()
	st := h.q.Stats()
	want := h.m.statsAt(now)
	h.compareDead()
	if want.HeldBack > 0 {
		h.cover["state:held back"]++
	}
	if want.Delayed > 0 {
		h.cover["state:delayed"]++
	}
	if want.Dropped > 0 {
		h.cover["state:dropped"]++
	}
	if st != want {
		h.fail("Stats() =\n  %+v\nwant\n  %+v", st, want)
	}
	in := st.Published + st.Redriven
	out := st.Acked + st.DeadLettered + st.Dropped + uint64(st.Visible+st.Delayed+st.InFlight+st.HeldBack)
	if in != out {
		h.fail("conservation: Published+Redriven = %d, Acked+DeadLettered+Dropped+Visible+Delayed+InFlight+HeldBack = %d: %+v", in, out, st)
	}

	q := h.q
	q.mu.Lock()
	defer q.mu.Unlock()
	counts := map[entryState]int{}
	for _, e := range q.heldEntries() {
		counts[e.state]++
	}
	keys := map[string]bool{}
	ttl := 0
	for _, e := range h.m.held {
		if e.key != "" {
			keys[e.key] = true
		}
		if e.state != mLeased && !e.expiresAt.IsZero() {
			ttl++
		}
	}
	switch {
	case q.nheld != len(h.m.held) || len(q.heldEntries()) != q.nheld:
		h.fail("queue holds %d entries, model %d", q.nheld, len(h.m.held))
	case counts[stateReady] != want.Visible || counts[stateDelayed] != want.Delayed || counts[stateLeased] != want.InFlight || counts[stateHeld] != want.HeldBack:
		h.fail("entry states %v disagree with %+v", counts, want)
	case q.heldBack != want.HeldBack || q.ready.len() != want.Visible || q.delayed.len() != want.Delayed || q.inflight.Len() != want.InFlight:
		h.fail("structures: heldBack %d ready %d delayed %d inflight %d, want %+v", q.heldBack, q.ready.len(), q.delayed.len(), q.inflight.Len(), want)
	case q.ttl.len() != ttl:
		h.fail("TTL heap holds %d, want %d", q.ttl.len(), ttl)
	case len(q.keys) != len(keys):
		h.fail("queue tracks %d keys, model %d", len(q.keys), len(keys))
	case q.parked != 0 || len(q.pending) != 0:
		h.fail("parked %d, pending dead letters %d after the call returned", q.parked, len(q.pending))
	}
}
