package core

// The reference model of one queue (see model_test.go): plain slices and
// linear scans, what the doc comments of queue, broker and core say, nothing
// cleverer.

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

type mState uint8

const (
	mReady   mState = iota + 1 // may be delivered now
	mDelayed                   // waiting for visibleAt
	mLeased                    // in flight
	mHeld                      // behind the head of its ordering key
	mGone                      // acked, dead-lettered, dropped or purged
)

type mEntry struct {
	msg       *queue.Message[int]
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
	cfg       queue.Config // defaults filled in by the model itself
	closed    bool
	held      []*mEntry
	nextPlace uint64
	stamp     uint64
	stats     queue.Stats // counters; the gauges are counted on demand
	dead      []mDead
}

func newModel(cfg queue.Config) *model {
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = 30 * time.Second
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 100_000
	}
	if cfg.KeyConcurrency == 0 {
		cfg.KeyConcurrency = 1
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
	return m.cfg.MaxAttempts != queue.UnlimitedAttempts && e.attempt >= m.cfg.MaxAttempts
}

// outOf counts the messages of key that are out (not held back).
func (m *model) outOf(key string) int {
	n := 0
	for _, e := range m.held {
		if e.key == key && e.head {
			n++
		}
	}
	return n
}

// show makes a waiting entry ready or delayed.
func (m *model) show(now time.Time, e *mEntry) {
	if e.visibleAt.After(now) {
		e.state = mDelayed
	} else {
		e.state = mReady
	}
}

// place puts a new or redriven entry behind its key's out ones, when
// KeyConcurrency of them are, or shows it.
func (m *model) place(now time.Time, e *mEntry) {
	if e.key != "" {
		if m.outOf(e.key) >= m.cfg.KeyConcurrency {
			e.state = mHeld
			return
		}
		e.head = true
	}
	m.show(now, e)
}

// finish lets go of e; the next messages of its key (lowest place first)
// take its turn, while fewer than KeyConcurrency are out.
func (m *model) finish(now time.Time, e *mEntry) {
	if e.head {
		e.head = false
		for m.outOf(e.key) < m.cfg.KeyConcurrency {
			var next *mEntry
			for _, x := range m.held {
				if x.key == e.key && x.state == mHeld && (next == nil || x.place < next.place) {
					next = x
				}
			}
			if next == nil {
				break
			}
			next.head = true
			m.show(now, next)
		}
	}
	e.state = mGone
	m.held = slices.DeleteFunc(m.held, func(x *mEntry) bool { return x == e })
}

func (m *model) deadLetter(now time.Time, e *mEntry, reason queue.Reason) {
	m.countDead(reason)
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
		m.deadLetter(now, e, queue.ReasonExpired)
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
		m.deadLetter(now, e, queue.ReasonMaxAttempts)
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
			m.deadLetter(now, e, queue.ReasonMaxAttempts)
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
		m.deadLetter(now, e, queue.ReasonExpired)
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

func (m *model) statsAt(now time.Time) queue.Stats {
	m.settle(now)
	s := m.stats
	s.Visible, s.Delayed, s.InFlight, s.HeldBack = m.count(mReady), m.count(mDelayed), m.count(mLeased), m.count(mHeld)
	s.OldestVisibleAge = m.oldestVisibleAge(now)
	return s
}

// oldestVisibleAge is now minus the earliest PublishedAt among the next
// visible message of each priority (a zero PublishedAt not counted), 0 if
// none or if that is in the future.
func (m *model) oldestVisibleAge(now time.Time) time.Duration {
	next := map[queue.Priority]*mEntry{}
	for _, e := range m.held {
		if n := next[e.msg.Priority]; e.state == mReady && (n == nil || e.place < n.place) {
			next[e.msg.Priority] = e
		}
	}
	var oldest time.Time
	for _, e := range next {
		if at := e.msg.PublishedAt; !at.IsZero() && (oldest.IsZero() || at.Before(oldest)) {
			oldest = at
		}
	}
	if oldest.IsZero() || !now.After(oldest) {
		return 0
	}
	return now.Sub(oldest)
}

// countDead counts a dead letter in all and by its reason.
func (m *model) countDead(reason queue.Reason) {
	m.stats.DeadLettered++
	switch reason {
	case queue.ReasonMaxAttempts:
		m.stats.DeadLetteredBy.MaxAttempts++
	case queue.ReasonOverflow:
		m.stats.DeadLetteredBy.Overflow++
	case queue.ReasonExpired:
		m.stats.DeadLetteredBy.Expired++
	case queue.ReasonRejected:
		m.stats.DeadLetteredBy.Rejected++
	}
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

func (m *model) insert(at time.Time, msg *queue.Message[int], delay, ttl time.Duration) {
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

var errFullCanceled = errors.Join(queue.ErrQueueFull, context.Canceled)

func (m *model) offer(at time.Time, msg *queue.Message[int], delay, ttl time.Duration) error {
	if m.closed {
		return queue.ErrClosed
	}
	m.settle(at)
	if len(m.held) < m.cfg.MaxQueue {
		m.insert(at, msg, delay, ttl)
		return nil
	}
	switch m.cfg.Overflow {
	case queue.OverflowReject:
		m.stats.Rejected++
		return queue.ErrQueueFull
	case queue.OverflowDropOldest:
		if v := m.dropVictim(); v != nil {
			m.stats.Dropped++
			m.finish(at, v)
			m.insert(at, msg, delay, ttl)
		} else {
			m.stats.Published++
			m.stats.Dropped++
		}
		return nil
	case queue.OverflowBlock: // the harness offers with a done context only
		m.stats.Rejected++
		return errFullCanceled
	default:
		m.stats.Published++
		m.countDead(queue.ReasonOverflow)
		m.nextPlace++ // its publish order, kept by a redrive: after everything held
		m.dead = append(m.dead, mDead{
			dl:    queue.DeadLetter[int]{Subscription: m.cfg.Name, Message: *msg, Reason: queue.ReasonOverflow, At: at},
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
		return nil, queue.ErrLeaseNotFound
	}
	if rec.delivery != rec.e.delivery || !rec.e.leaseOpen {
		return nil, queue.ErrLeaseExpired
	}
	return rec.e, nil
}

func (m *model) live(rec *leaseRec) (*mEntry, error) {
	e, err := m.lookup(rec)
	if err != nil {
		return nil, err
	}
	if e.state != mLeased {
		return nil, queue.ErrLeaseExpired
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

// ack is Ack and AckBatch. Like the queue, it settles first only when the
// time can change the outcome (see ackTimeless): a lease that is not
// current, a key, a TTL, a last attempt still leased. Otherwise it leaves
// what is due (and the dead letters it makes) to the next call that
// settles.
func (m *model) ack(now time.Time, recs ...*leaseRec) error {
	if m.closed {
		return queue.ErrClosed
	}
	if !m.ackTimeless(recs) {
		m.settle(now)
	}
	var errs []error
	for _, r := range recs {
		if err := m.ackLocked(now, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ackTimeless is the model of the condition of Queue.ackTimeless.
func (m *model) ackTimeless(recs []*leaseRec) bool {
	if len(recs) == 0 {
		return false
	}
	for _, r := range recs {
		e, err := m.lookup(r)
		exhausted := m.cfg.MaxAttempts != queue.UnlimitedAttempts && e != nil && e.attempt >= m.cfg.MaxAttempts
		if err != nil || e.key != "" || !e.expiresAt.IsZero() || (e.state == mLeased && exhausted) {
			return false
		}
	}
	return true
}

// settleLease is the model of Queue.settle: f runs on a live lease's entry.
func (m *model) settleLease(now time.Time, rec *leaseRec, f func(e *mEntry)) error {
	if m.closed {
		return queue.ErrClosed
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
		return queue.ErrClosed
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
		return queue.ErrClosed
	}
	m.settle(now)
	if len(m.held) >= m.cfg.MaxQueue {
		return queue.ErrQueueFull
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
		return 0, queue.ErrClosed
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

// find returns the held entry of message id, or nil.
func (m *model) find(id uuid.UUID) *mEntry {
	for _, e := range m.held {
		if e.msg.ID == id {
			return e
		}
	}
	return nil
}

func (m *model) deleteMessage(now time.Time, id uuid.UUID) (int, error) {
	if m.closed {
		return 0, queue.ErrClosed
	}
	m.settle(now)
	e := m.find(id)
	if e == nil {
		return 0, queue.ErrMessageNotFound
	}
	m.stats.Dropped++
	m.finish(now, e)
	return 1, nil
}

func (m *model) makeVisible(now time.Time, id uuid.UUID) (int, error) {
	if m.closed {
		return 0, queue.ErrClosed
	}
	m.settle(now)
	e := m.find(id)
	switch {
	case e == nil:
		return 0, queue.ErrMessageNotFound
	case e.state == mReady:
		return 0, nil
	case e.state != mDelayed:
		return 0, queue.ErrInvalidArgument
	}
	e.visibleAt = time.Time{}
	e.state = mReady
	return 1, nil
}
