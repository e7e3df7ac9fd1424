package core

// A reference model of one queue, driven side by side with the real Queue.
//
// The model is deliberately naive: plain slices, linear scans, sorting on
// demand, no heaps, no lanes, no free lists. It implements the semantics of
// DESIGN.md ("Semantics to hold") and of the doc comments: priority then
// publish order with a returned message keeping its place; current and
// superseded leases; MaxAttempts and dead-lettering by expiry, Nack, Fail and
// Reject; Release giving the attempt back; delayed offers; TTL; ordering keys;
// overflow under each policy; MaxInFlight; Redrive; Purge; Close.
//
// The same operation decoder feeds the rapid property (TestQueueModel) and
// the native fuzz target (FuzzQueue in fuzz_test.go). After every operation
// the harness compares errors (by errors.Is class), deliveries (payload,
// priority, key, attempt, deadline, lease ID), dead letters (every public
// field), Stats (every field), the conservation invariant, attempt
// monotonicity per message, and the queue's internal bookkeeping.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// ---------------------------------------------------------------- operations

type opKind uint8

const (
	opNop      opKind = iota // nothing but the checks
	opOffer                  // Offer: priority, delay, key, TTL, PublishedAt
	opPoll                   // TryPoll, TryPollInto, Poll, PollInto, PollWithVisibility
	opAck                    // Ack of a current, late, superseded, settled or gone lease
	opAckBatch               // AckBatch of two leases (maybe the same) and maybe a foreign one
	opNack                   // Nack with a delay
	opFail                   // Fail (RetryPolicy delay)
	opReject                 // Reject
	opRelease                // Release
	opExtend                 // Extend
	opAdvance                // move the clock forward: 0, 1ns, exact boundaries, larger steps
	opSetBack                // move the clock backwards
	opRedrive                // Redrive one of this queue's dead letters, or a foreign one
	opPurge                  // Purge (half the time; else nothing)
	opForeign                // Ack/Nack/Extend/Release/Fail/Reject of an ID never issued here
	opBad                    // invalid arguments: each must fail and change nothing
	opClose                  // Close (one time in 16; else nothing)
)

var opNames = [...]string{"nop", "offer", "poll", "ack", "ackBatch", "nack", "fail", "reject", "release", "extend", "advance", "setBack", "redrive", "purge", "foreign", "bad", "close"}

func (k opKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// opTable weights the kinds. Index 0 is opNop, so a shrunk failing sequence
// shows no-ops where an operation did not matter.
var opTable = []opKind{
	opNop,
	opOffer, opOffer, opOffer, opOffer, opOffer,
	opPoll, opPoll, opPoll, opPoll, opPoll, opPoll,
	opAck, opAck, opAck,
	opAckBatch,
	opNack, opNack,
	opFail, opFail,
	opReject,
	opRelease, opRelease,
	opExtend, opExtend,
	opAdvance, opAdvance, opAdvance, opAdvance, opAdvance,
	opSetBack,
	opRedrive, opRedrive,
	opForeign,
	opBad, opBad,
	opPurge,
	opClose,
}

// op is one operation: a kind and three parameter bytes whose meaning
// depends on the kind (which lease, which delay, ...). Parameters pick
// among what exists at the time, modulo its size, so every byte string
// decodes to a valid sequence.
type op struct {
	Kind    opKind
	A, B, C uint8
}

func (o op) String() string { return fmt.Sprintf("%v(%d,%d,%d)", o.Kind, o.A, o.B, o.C) }

const (
	configBytes = 4
	opBytes     = 4
	maxOps      = 128
)

// decodeInput splits a byte string into the configuration bytes and the
// operations, 4 bytes each: kind (index into opTable), A, B, C.
func decodeInput(data []byte) (cfg [configBytes]byte, ops []op) {
	n := copy(cfg[:], data)
	data = data[n:]
	for len(data) >= opBytes && len(ops) < maxOps {
		ops = append(ops, op{Kind: opTable[int(data[0])%len(opTable)], A: data[1], B: data[2], C: data[3]})
		data = data[opBytes:]
	}
	return cfg, ops
}

// encodeInput is decodeInput's inverse (for seeds).
func encodeInput(cfg [configBytes]byte, ops []op) []byte {
	out := append([]byte(nil), cfg[:]...)
	for _, o := range ops {
		out = append(out, byte(slices.Index(opTable, o.Kind)), o.A, o.B, o.C)
	}
	return out
}

// ---------------------------------------------------------------- configuration

var (
	attemptChoices  = []int{1, 2, 3, 5, UnlimitedAttempts, 0}
	visChoices      = []time.Duration{10, time.Second, 0} // 10ns, 1s, the default
	retryChoices    = []RetryPolicy{{}, {Initial: 3, Max: 20, Multiplier: 1.5}, {NoBackoff: true}, {Initial: 4, Max: time.Second, Jitter: 0.5, Rand: func() float64 { return 0.5 }}}
	ttlChoices      = []time.Duration{0, 0, 25, 45 * time.Second}
	maxQueueChoices = []int{1, 2, 3, 5, 8, 0}
	inflightChoices = []int{0, 0, 1, 3}
	keyChoices      = []string{"", "", "a", "b"}
)

// runConfig is a queue configuration decoded from four bytes.
type runConfig struct {
	cfg  Config
	keys bool // offers carry ordering keys
}

// configCover names the choices a configuration made, for the coverage floor.
func configCover(b [configBytes]byte) []string {
	return []string{
		fmt.Sprintf("config:attempts#%d", int(b[0])%len(attemptChoices)),
		fmt.Sprintf("config:visibility#%d", int(b[0])/len(attemptChoices)%len(visChoices)),
		fmt.Sprintf("config:retry#%d", int(b[1])%len(retryChoices)),
		fmt.Sprintf("config:ttl#%d", int(b[1])/len(retryChoices)%len(ttlChoices)),
		fmt.Sprintf("config:maxQueue#%d", int(b[2])%len(maxQueueChoices)),
		fmt.Sprintf("config:maxInFlight#%d", int(b[2])/len(maxQueueChoices)%len(inflightChoices)),
		fmt.Sprintf("config:keys#%d", b[3]/4%2),
	}
}

// allConfigCover lists every configuration choice.
func allConfigCover() []string {
	var out []string
	for _, d := range []struct {
		name string
		n    int
	}{
		{"attempts", len(attemptChoices)}, {"visibility", len(visChoices)}, {"retry", len(retryChoices)}, {"ttl", len(ttlChoices)},
		{"maxQueue", len(maxQueueChoices)}, {"maxInFlight", len(inflightChoices)}, {"keys", 2},
	} {
		for i := range d.n {
			out = append(out, fmt.Sprintf("config:%s#%d", d.name, i))
		}
	}
	return out
}

func decodeConfig(b [configBytes]byte) runConfig {
	return runConfig{
		cfg: Config{
			Name:              "model",
			MaxAttempts:       attemptChoices[int(b[0])%len(attemptChoices)],
			VisibilityTimeout: visChoices[int(b[0])/len(attemptChoices)%len(visChoices)],
			Retry:             retryChoices[int(b[1])%len(retryChoices)],
			TTL:               ttlChoices[int(b[1])/len(retryChoices)%len(ttlChoices)],
			MaxQueue:          maxQueueChoices[int(b[2])%len(maxQueueChoices)],
			MaxInFlight:       inflightChoices[int(b[2])/len(maxQueueChoices)%len(inflightChoices)],
			Overflow:          OverflowPolicy(b[3] % 4),
		},
		keys: b[3]/4%2 == 1,
	}
}

func (rc runConfig) String() string {
	c := rc.cfg
	return fmt.Sprintf("MaxAttempts=%d Visibility=%v Retry=%+v TTL=%v MaxQueue=%d MaxInFlight=%d Overflow=%v keys=%v",
		c.MaxAttempts, c.VisibilityTimeout, RetryPolicy{Initial: c.Retry.Initial, Max: c.Retry.Max, Multiplier: c.Retry.Multiplier, Jitter: c.Retry.Jitter, NoBackoff: c.Retry.NoBackoff},
		c.TTL, c.MaxQueue, c.MaxInFlight, c.Overflow, rc.keys)
}

// ---------------------------------------------------------------- clocks

// driver is a clock the harness can move.
type driver interface {
	clock.Clock
	advance(d time.Duration)
	set(t time.Time)
}

// mockDriver moves a clock.Mock (each move sleeps 1ms: the mock's gosched).
type mockDriver struct{ *clock.Mock }

func (d mockDriver) advance(x time.Duration) { d.Add(x) }
func (d mockDriver) set(t time.Time)         { d.Set(t) }

// stepClock is a manual clock for the fuzz target, which cannot afford the
// mock's millisecond per move. A queue driven by the harness reads Now, and
// arms a Timer only in a blocking Poll that the harness's watchdog cancels;
// that timer is a real one far in the future, stopped by the Poll. Every
// other method is the nil embedded interface's and would panic.
type stepClock struct {
	clock.Clock
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Timer(time.Duration) *clock.Timer { return clock.New().Timer(time.Hour) }

func (c *stepClock) AfterFunc(_ time.Duration, f func()) *clock.Timer {
	return clock.New().AfterFunc(time.Hour, f)
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *stepClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

var modelEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ---------------------------------------------------------------- the model

type mState uint8

const (
	mReady   mState = iota + 1 // may be delivered now
	mDelayed                   // waiting for visibleAt
	mLeased                    // in flight
	mHeld                      // behind the head of its ordering key
	mGone                      // acked, dead-lettered, dropped or purged
)

type mEntry struct {
	msg       *Message[int]
	place     uint64 // publish order; kept across expiry, nack, backoff, redrive
	key       string
	head      bool // the one message of its key that is not held back
	state     mState
	visibleAt time.Time
	deadline  time.Time
	stamp     uint64 // lease order: equal deadlines expire in this order
	attempt   int
	delivery  uint32
	leaseOpen bool // the lease of delivery number `delivery` is current
	lastErr   string
	ttl       time.Duration
	expiresAt time.Time
}

// mDead is a dead letter the model expects, with what a redrive needs.
type mDead struct {
	dl    queue.DeadLetter[int] // public fields only
	place uint64
	ttl   time.Duration
}

type model struct {
	cfg       Config // defaults filled in by the model itself
	closed    bool
	held      []*mEntry
	nextPlace uint64
	stamp     uint64
	stats     Stats // counters; the gauges are counted on demand
	dead      []mDead
}

func newModel(cfg Config) *model {
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = 30 * time.Second
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 100_000
	}
	return &model{cfg: cfg}
}

func (m *model) count(s mState) int {
	n := 0
	for _, e := range m.held {
		if e.state == s {
			n++
		}
	}
	return n
}

func (m *model) exhausted(e *mEntry) bool {
	return m.cfg.MaxAttempts != UnlimitedAttempts && e.attempt >= m.cfg.MaxAttempts
}

func (m *model) headOf(key string) *mEntry {
	for _, e := range m.held {
		if e.key == key && e.head {
			return e
		}
	}
	return nil
}

// show makes a waiting entry ready or delayed.
func (m *model) show(now time.Time, e *mEntry) {
	if e.visibleAt.After(now) {
		e.state = mDelayed
	} else {
		e.state = mReady
	}
}

// place puts a new or redriven entry behind its key's head, or shows it.
func (m *model) place(now time.Time, e *mEntry) {
	if e.key != "" {
		if m.headOf(e.key) != nil {
			e.state = mHeld
			return
		}
		e.head = true
	}
	m.show(now, e)
}

// finish lets go of e; the next message of its key (lowest place) takes its turn.
func (m *model) finish(now time.Time, e *mEntry) {
	if e.head {
		e.head = false
		var next *mEntry
		for _, x := range m.held {
			if x.key == e.key && x.state == mHeld && (next == nil || x.place < next.place) {
				next = x
			}
		}
		if next != nil {
			next.head = true
			m.show(now, next)
		}
	}
	e.state = mGone
	m.held = slices.DeleteFunc(m.held, func(x *mEntry) bool { return x == e })
}

func (m *model) deadLetter(now time.Time, e *mEntry, reason Reason) {
	m.stats.DeadLettered++
	continued := false
	for _, x := range m.held {
		if e.key != "" && x != e && x.key == e.key && x.state == mHeld && x.place > e.place {
			continued = true
		}
	}
	m.dead = append(m.dead, mDead{
		dl: queue.DeadLetter[int]{
			Subscription: m.cfg.Name, Message: *e.msg, Reason: reason, Attempts: e.attempt,
			LastError: e.lastErr, At: now, KeyContinued: continued,
		},
		place: e.place, ttl: e.ttl,
	})
	m.finish(now, e)
}

// back makes an entry whose lease ended wait again after delay, unless its
// TTL has passed.
func (m *model) back(now time.Time, e *mEntry, delay time.Duration) {
	if !e.expiresAt.IsZero() && !now.Before(e.expiresAt) {
		m.deadLetter(now, e, ReasonExpired)
		return
	}
	e.visibleAt = time.Time{}
	if delay > 0 {
		e.visibleAt = now.Add(delay)
	}
	m.show(now, e)
}

func (m *model) retry(now time.Time, e *mEntry, delay time.Duration) {
	if m.exhausted(e) {
		m.deadLetter(now, e, ReasonMaxAttempts)
		return
	}
	m.back(now, e, delay)
}

// settle applies everything due at now: expired leases (earliest deadline
// first, then lease order), delayed messages, TTLs (earliest first, then
// place).
func (m *model) settle(now time.Time) {
	if m.closed {
		return
	}
	var expired []*mEntry
	for _, e := range m.held {
		if e.state == mLeased && !now.Before(e.deadline) {
			expired = append(expired, e)
		}
	}
	slices.SortFunc(expired, func(a, b *mEntry) int {
		if c := a.deadline.Compare(b.deadline); c != 0 {
			return c
		}
		return cmpU(a.stamp, b.stamp)
	})
	for _, e := range expired {
		e.lastErr = "lease expired" // documented: expiry records that the lease expired
		if m.exhausted(e) {
			m.deadLetter(now, e, ReasonMaxAttempts)
			continue
		}
		m.back(now, e, 0) // the lease stays current until redelivery
	}
	for _, e := range m.held {
		if e.state == mDelayed && !e.visibleAt.After(now) {
			e.state = mReady
		}
	}
	var ttl []*mEntry
	for _, e := range m.held {
		if e.state != mLeased && !e.expiresAt.IsZero() && !now.Before(e.expiresAt) {
			ttl = append(ttl, e)
		}
	}
	slices.SortFunc(ttl, func(a, b *mEntry) int {
		if c := a.expiresAt.Compare(b.expiresAt); c != 0 {
			return c
		}
		return cmpU(a.place, b.place)
	})
	for _, e := range ttl {
		m.deadLetter(now, e, ReasonExpired)
	}
}

// causeText is what Fail and Reject record: the cause's text, "failed" for nil.
func causeText(err error) string {
	if err == nil {
		return "failed"
	}
	return err.Error()
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (m *model) statsAt(now time.Time) Stats {
	m.settle(now)
	s := m.stats
	s.Visible, s.Delayed, s.InFlight, s.HeldBack = m.count(mReady), m.count(mDelayed), m.count(mLeased), m.count(mHeld)
	return s
}

// dropVictim is the message OverflowDropOldest gives up: the oldest visible
// message of the lowest priority present (nil when none is visible: all are
// delayed, held back or in flight, and the newcomer goes instead).
func (m *model) dropVictim() *mEntry {
	var v *mEntry
	for _, e := range m.held {
		if e.state == mReady && (v == nil || e.msg.Priority < v.msg.Priority || (e.msg.Priority == v.msg.Priority && e.place < v.place)) {
			v = e
		}
	}
	return v
}

func (m *model) insert(at time.Time, msg *Message[int], delay, ttl time.Duration) {
	m.nextPlace++
	e := &mEntry{msg: msg, place: m.nextPlace, key: msg.Key}
	m.stats.Published++
	if delay > 0 {
		e.visibleAt = at.Add(delay)
	}
	if ttl > 0 {
		e.ttl, e.expiresAt = ttl, at.Add(ttl)
	}
	m.held = append(m.held, e)
	m.place(at, e)
}

var errFullCanceled = errors.Join(ErrQueueFull, context.Canceled)

func (m *model) offer(at time.Time, msg *Message[int], delay, ttl time.Duration) error {
	if m.closed {
		return ErrClosed
	}
	m.settle(at)
	if len(m.held) < m.cfg.MaxQueue {
		m.insert(at, msg, delay, ttl)
		return nil
	}
	switch m.cfg.Overflow {
	case OverflowReject:
		m.stats.Rejected++
		return ErrQueueFull
	case OverflowDropOldest:
		if v := m.dropVictim(); v != nil {
			m.stats.Dropped++
			m.finish(at, v)
			m.insert(at, msg, delay, ttl)
		} else {
			m.stats.Published++
			m.stats.Dropped++
		}
		return nil
	case OverflowBlock: // the harness offers with a done context only
		m.stats.Rejected++
		return errFullCanceled
	default:
		m.stats.Published++
		m.stats.DeadLettered++
		m.nextPlace++ // its publish order, kept by a redrive: after everything held
		m.dead = append(m.dead, mDead{
			dl:    queue.DeadLetter[int]{Subscription: m.cfg.Name, Message: *msg, Reason: ReasonOverflow, At: at},
			place: m.nextPlace, ttl: ttl,
		})
		return nil
	}
}

// leasable reports how many a Poll for n would lease now (after settling).
func (m *model) leasable(n int) int {
	k := min(n, m.count(mReady))
	if m.cfg.MaxInFlight > 0 {
		k = min(k, m.cfg.MaxInFlight-m.count(mLeased))
	}
	return max(k, 0)
}

func (m *model) poll(now time.Time, n int, vis time.Duration) []*mEntry {
	k := m.leasable(n)
	var out []*mEntry
	for range k {
		var e *mEntry
		for _, x := range m.held {
			if x.state == mReady && (e == nil || x.msg.Priority > e.msg.Priority || (x.msg.Priority == e.msg.Priority && x.place < e.place)) {
				e = x
			}
		}
		e.delivery++
		e.attempt++
		e.leaseOpen = true
		e.state = mLeased
		e.deadline = now.Add(vis)
		m.stamp++
		e.stamp = m.stamp
		m.stats.Delivered++
		if e.attempt > 1 {
			m.stats.Redelivered++
		}
		out = append(out, e)
	}
	return out
}

// leaseRec is a lease the real queue issued, with the model entry it names.
type leaseRec struct {
	id       lease.ID
	e        *mEntry
	delivery uint32
}

func (r *leaseRec) current() bool {
	return r.e.state != mGone && r.e.leaseOpen && r.delivery == r.e.delivery
}

// lookup is the model of lookupLocked; rec == nil is a lease never issued here.
func (m *model) lookup(rec *leaseRec) (*mEntry, error) {
	if rec == nil || rec.e.state == mGone {
		return nil, ErrLeaseNotFound
	}
	if rec.delivery != rec.e.delivery || !rec.e.leaseOpen {
		return nil, ErrLeaseExpired
	}
	return rec.e, nil
}

func (m *model) live(rec *leaseRec) (*mEntry, error) {
	e, err := m.lookup(rec)
	if err != nil {
		return nil, err
	}
	if e.state != mLeased {
		return nil, ErrLeaseExpired
	}
	return e, nil
}

func (m *model) ackLocked(now time.Time, rec *leaseRec) error {
	e, err := m.lookup(rec)
	if err != nil {
		return err
	}
	m.stats.Acked++
	m.finish(now, e)
	return nil
}

func (m *model) ack(now time.Time, recs ...*leaseRec) error {
	if m.closed {
		return ErrClosed
	}
	m.settle(now)
	var errs []error
	for _, r := range recs {
		if err := m.ackLocked(now, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// settleLease is the model of Queue.settle: f runs on a live lease's entry.
func (m *model) settleLease(now time.Time, rec *leaseRec, f func(e *mEntry)) error {
	if m.closed {
		return ErrClosed
	}
	m.settle(now)
	e, err := m.live(rec)
	if err != nil {
		return err
	}
	e.leaseOpen = false
	f(e)
	return nil
}

func (m *model) extend(now time.Time, rec *leaseRec, timeout time.Duration) error {
	if m.closed {
		return ErrClosed
	}
	m.settle(now)
	e, err := m.live(rec)
	if err != nil {
		return err
	}
	e.deadline = now.Add(timeout)
	return nil
}

// redrive puts a dead letter back: own letters keep their place, foreign
// ones queue as if just published.
func (m *model) redrive(now time.Time, d mDead, own bool) error {
	if m.closed {
		return ErrClosed
	}
	m.settle(now)
	if len(m.held) >= m.cfg.MaxQueue {
		return ErrQueueFull
	}
	msg := d.dl.Message
	e := &mEntry{msg: &msg, key: msg.Key, place: d.place}
	ttl := d.ttl
	if !own {
		m.nextPlace++
		e.place = m.nextPlace
		ttl = m.cfg.TTL // "as if just published"; Config.TTL: "from its publish (or redrive)"
	}
	if ttl > 0 {
		e.ttl, e.expiresAt = ttl, now.Add(ttl)
	}
	m.stats.Redriven++
	m.held = append(m.held, e)
	m.place(now, e)
	return nil
}

func (m *model) purge(now time.Time) (int, error) {
	if m.closed {
		return 0, ErrClosed
	}
	m.settle(now)
	n := len(m.held)
	m.stats.Dropped += uint64(n)
	for _, e := range m.held {
		e.state = mGone
		e.head = false
	}
	m.held = nil
	return n, nil
}

// nextEvents returns the future times at which the model changes by itself.
func (m *model) nextEvents(now time.Time) []time.Time {
	var ts []time.Time
	for _, e := range m.held {
		switch {
		case e.state == mLeased:
			ts = append(ts, e.deadline)
		case e.state == mDelayed || e.state == mHeld && e.visibleAt.After(now):
			ts = append(ts, e.visibleAt)
		}
		if e.state != mLeased && !e.expiresAt.IsZero() {
			ts = append(ts, e.expiresAt)
		}
	}
	ts = slices.DeleteFunc(ts, func(t time.Time) bool { return !t.After(now) })
	slices.SortFunc(ts, time.Time.Compare)
	return ts
}

// ---------------------------------------------------------------- the harness

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
	h.check()
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
		{"NotFound", ErrLeaseNotFound}, {"Expired", ErrLeaseExpired}, {"Closed", ErrClosed},
		{"Full", ErrQueueFull}, {"Invalid", ErrInvalidArgument}, {"Canceled", context.Canceled},
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
			h.m.deadLetter(now, e, ReasonRejected)
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
	h.check()
}

func (h *harness) offer(o op, now time.Time, settled bool) {
	prio := Priority(int(o.A%4) - 1)
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
	if h.rc.cfg.Overflow == OverflowBlock {
		ctx = canceledCtx // never block the harness
	}
	p := h.next
	h.next++
	msg := &Message[int]{ID: payloadID(p), Payload: p, Priority: prio, Key: key, PublishedAt: at}
	h.logf("%v: Offer msg %d prio %v key %q delay %v ttl %v publishedAt %v", o, p, prio, key, delay, ttl, at)
	h.track[p] = &attemptTrack{}
	h.sameErr("Offer", h.q.Offer(ctx, msg, delay, opts...), h.m.offer(modelAt, msg, delay, ttl))
}

func (h *harness) poll(o op, now time.Time) {
	n := []int{1, 1, 2, 3, 5, math.MaxInt}[o.A%6]
	vis := h.vis
	var got []Delivery[int]
	var err, want error
	var exp []*mEntry
	expect := func(block bool) {
		switch {
		case h.m.closed:
			if block {
				want = ErrClosed
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
		buf := make([]Delivery[int], n)
		k, e := h.q.TryPollInto(buf)
		got, err = buf[:k], e
		expect(false)
		if h.m.closed {
			want = ErrClosed
		}
	case 2:
		var call func(ctx context.Context) ([]Delivery[int], error)
		switch o.C % 4 {
		case 0:
			h.logf("%v: Poll(%d)", o, n)
			call = func(ctx context.Context) ([]Delivery[int], error) { return h.q.Poll(ctx, n) }
		case 1:
			n = min(n, 8)
			h.logf("%v: PollInto(len %d)", o, n)
			call = func(ctx context.Context) ([]Delivery[int], error) {
				buf := make([]Delivery[int], n)
				k, err := h.q.PollInto(ctx, buf)
				return buf[:k], err
			}
		default:
			vis = h.dur(o.C/4, h.vis/2+1, 3*h.vis, 1)
			h.logf("%v: PollWithVisibility(%d, %v)", o, n, vis)
			call = func(ctx context.Context) ([]Delivery[int], error) { return h.q.PollWithVisibility(ctx, n, vis) }
		}
		expect(true)
		got, err = h.blockingPoll(call)
	}
	h.sameErr("Poll", err, want)
	h.compareDeliveries(got, exp)
}

// blockingPoll runs a blocking Poll; a watchdog cancels it once it parks,
// so a Poll that should return at once but waits fails instead of hanging.
func (h *harness) blockingPoll(call func(ctx context.Context) ([]Delivery[int], error)) ([]Delivery[int], error) {
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

func (h *harness) compareDeliveries(got []Delivery[int], exp []*mEntry) {
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
		case h.m.cfg.MaxAttempts != UnlimitedAttempts && d.Attempt > h.m.cfg.MaxAttempts:
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

func deliveredPayloads(ds []Delivery[int]) []string {
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
		h.check()
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
		msg := Message[int]{ID: payloadID(p), Payload: p, Priority: Priority(int(o.A%4) - 1), Key: key}
		h.logf("%v: Redrive foreign msg %d prio %v key %q", o, p, msg.Priority, key)
		h.track[p] = &attemptTrack{}
		dl := Letter[int]{DeadLetter: queue.DeadLetter[int]{Subscription: "elsewhere", Message: msg, Reason: ReasonMaxAttempts, Attempts: 3}}
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
	want := ErrLeaseNotFound
	if h.m.closed {
		want = ErrClosed
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
			return ErrClosed
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
		_, e2 := h.q.TryPollInto([]Delivery[int]{})
		calls = []call{{"TryPollInto(nil)", e1, ErrInvalidArgument}, {"TryPollInto(empty)", e2, ErrInvalidArgument}}
	case 2:
		calls = []call{
			{"Nack(-1ns)", h.q.Nack(id, -1), ErrInvalidArgument},
			{"Nack(MinInt64)", h.q.Nack(id, math.MinInt64), ErrInvalidArgument},
		}
	case 3:
		calls = []call{
			{"Extend(0)", h.q.Extend(id, 0), ErrInvalidArgument},
			{"Extend(-1ns)", h.q.Extend(id, -1), ErrInvalidArgument},
			{"Extend(MinInt64)", h.q.Extend(id, math.MinInt64), ErrInvalidArgument},
		}
	case 4:
		//lint:ignore SA1012 a nil context is the invalid input under test
		e1 := h.q.Offer(nil, &Message[int]{}, 0)
		calls = []call{
			{"Offer(nil ctx)", e1, ErrInvalidArgument},
			{"Offer(nil msg)", h.q.Offer(ctx, nil, 0), ErrInvalidArgument},
		}
	case 5:
		calls = []call{
			{"Offer(priority 3)", h.q.Offer(ctx, &Message[int]{Priority: 3}, 0), ErrInvalidArgument},
			{"Offer(priority -2)", h.q.Offer(ctx, &Message[int]{Priority: -2}, 0), ErrInvalidArgument},
			{"Offer(priority 127)", h.q.Offer(ctx, &Message[int]{Priority: math.MaxInt8}, 0), ErrInvalidArgument},
			{"Offer(delay -1)", h.q.Offer(ctx, &Message[int]{}, -1), ErrInvalidArgument},
			{"Offer(WithTTL(0))", h.q.Offer(ctx, &Message[int]{}, 0, WithTTL(0)), ErrInvalidArgument},
			{"Offer(WithTTL(-1))", h.q.Offer(ctx, &Message[int]{}, 0, WithTTL(-1)), ErrInvalidArgument},
		}
	case 6:
		calls = []call{
			{"Redrive(priority 9)", h.q.Redrive(Letter[int]{DeadLetter: queue.DeadLetter[int]{Message: Message[int]{Priority: 9}}}), ErrInvalidArgument},
			{"Redrive(priority MinInt8)", h.q.Redrive(Letter[int]{DeadLetter: queue.DeadLetter[int]{Message: Message[int]{Priority: math.MinInt8}}}), ErrInvalidArgument},
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
			{"Poll(0)", e1, ErrInvalidArgument}, {"Poll(MinInt)", e2, ErrInvalidArgument},
			{"PollWithVisibility(vis 0)", e3, ErrInvalidArgument}, {"PollWithVisibility(vis -1)", e4, ErrInvalidArgument},
			{"PollWithVisibility(n 0)", e5, ErrInvalidArgument}, {"PollInto(nil)", e6, ErrInvalidArgument},
			{"Poll(nil ctx)", e7, ErrInvalidArgument},
		}
	case 8: // a done ctx leases nothing, even with messages visible
		ds, e1 := h.q.Poll(canceledCtx, 1)
		if len(ds) != 0 {
			h.fail("Poll(done ctx) leased %v", deliveredPayloads(ds))
		}
		k, e2 := h.q.PollInto(canceledCtx, make([]Delivery[int], 2))
		if k != 0 {
			h.fail("PollInto(done ctx) leased %d", k)
		}
		_, e3 := h.q.PollWithVisibility(canceledCtx, 1, h.vis)
		calls = []call{{"Poll(done ctx)", e1, context.Canceled}, {"PollInto(done ctx)", e2, context.Canceled}, {"PollWithVisibility(done ctx)", e3, context.Canceled}}
	case 9:
		//lint:ignore SA1012 a nil context is the invalid input under test
		e1 := h.q.AwaitParked(nil, 0)
		calls = []call{
			{"AwaitParked(nil ctx)", e1, ErrInvalidArgument},
			{"AwaitParked(-1)", h.q.AwaitParked(ctx, -1), ErrInvalidArgument},
			{"AwaitParked(0)", h.q.AwaitParked(ctx, 0), closedOr(nil)},
		}
		if p := h.q.Parked(); p != 0 {
			h.fail("Parked() = %d with no Poll running", p)
		}
	case 10:
		e1 := h.q.AckBatch(nil)
		h.m.ack(now) // settles, like the real AckBatch
		e2 := h.q.AckBatch([]lease.ID{{}})
		calls = []call{{"AckBatch(nil)", e1, closedOr(nil)}, {"AckBatch(zero id)", e2, closedOr(ErrLeaseNotFound)}}
	default:
		h.q.Settle()
		h.m.settle(now)
		h.logf("%v: Settle", o)
	}
	for _, c := range calls {
		h.logf("%v: %s", o, c.name)
		h.sameErr(c.name, c.err, c.want)
	}
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
func (h *harness) check() {
	h.t.Helper()
	h.compareDead()
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

// ---------------------------------------------------------------- the property

// TestQueueModel drives the real queue and the model with random operation
// sequences on a mock clock, one rapid property per overflow policy (each
// with rapid's default 100 checks of 25 to 100 operations).
func TestQueueModel(t *testing.T) {
	var runs, ops int
	cover := map[string]int{}
	for _, policy := range []OverflowPolicy{OverflowDeadLetter, OverflowReject, OverflowBlock, OverflowDropOldest} {
		t.Run(policy.String(), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				var cfg [configBytes]byte
				for i := range cfg {
					cfg[i] = rapid.Byte().Draw(rt, fmt.Sprintf("config%d", i))
				}
				cfg[3] = cfg[3]&^3 | byte(policy)
				seq := rapid.SliceOfN(opGen, 25, 100).Draw(rt, "ops")
				mock := clock.NewMock()
				mock.Set(modelEpoch)
				h := newHarness(rt, cfg, mockDriver{mock})
				defer h.close()
				h.run(seq)
				runs++
				ops += h.ops
				for k, v := range h.cover {
					cover[k] += v
				}
			})
		})
	}
	t.Logf("%d runs, %d operations checked against the model", runs, ops)
	if t.Failed() {
		return
	}
	for _, k := range append(requiredCoverage, allConfigCover()...) {
		if cover[k] == 0 {
			t.Errorf("the generator never exercised %q: %v", k, cover)
		}
	}
	if testing.Verbose() {
		for _, k := range slices.Sorted(maps.Keys(cover)) {
			t.Logf("  %-32s %d", k, cover[k])
		}
	}
}

// requiredCoverage lists what the generator must exercise across one run of
// the property, so that a change that starves an operation fails loudly.
var requiredCoverage = []string{
	"Ack:nil", "Ack:Expired", "Ack:NotFound", "Ack:late", "Ack:superseded", "AckBatch:nil", "AckBatch:NotFound",
	"Nack:nil", "Nack:Expired", "Fail:nil", "Reject:nil", "Release:nil", "Release:Expired", "Extend:nil", "Extend:Expired",
	"Redrive:nil", "Redrive:Full", "Redrive foreign:nil", "Redrive:overflow letter", "Redrive:expired letter", "Offer:nil", "Offer:Full", "Offer:Full+Canceled", "Purge:nil", "Close:nil",
	"Poll:nil", "Poll:Canceled", "Poll:Closed", "Ack:Closed",
	"dead letter:max-attempts", "dead letter:expired", "dead letter:overflow", "dead letter:rejected", "dead letter:key continued",
	"delivery:first", "delivery:redelivery", "delivery:after release", "delivery:after redrive",
	"state:held back", "state:delayed", "state:dropped",
}

var opGen = rapid.Custom(func(t *rapid.T) op {
	return op{
		Kind: rapid.SampledFrom(opTable).Draw(t, "kind"),
		A:    rapid.Byte().Draw(t, "a"),
		B:    rapid.Byte().Draw(t, "b"),
		C:    rapid.Byte().Draw(t, "c"),
	}
})
