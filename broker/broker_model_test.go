package broker_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"pgregory.net/rapid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// TestBrokerModel drives a real broker and a deliberately simple model side
// by side: wildcard routing, publish deduplication and dead-letter topics,
// which internal/core's TestQueueModel (one queue) cannot see. After every
// step each live subscription is drained with TryPoll and must have
// received exactly the messages the model routed to it, each once; its
// Stats must balance; and the broker's dead-letter store must equal the
// model's.
//
// Leases are long (an hour) and a run moves the clock at most 40 × 10s, so no
// lease ever expires: every redelivery the model would have to predict comes
// from an explicit Fail or Reject.
func TestBrokerModel(t *testing.T) {
	var runs, ops int
	cover := map[string]int{}
	rapid.Check(t, func(rt *rapid.T) {
		b, mock := brokertest.New[int](t, broker.WithDedupWindow(bmWindow), broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Hour)))
		defer b.Close()
		m := &brokerModel{t: t, rt: rt, b: b, mock: mock, now: mock.Now(),
			topics: map[string]*bmTopic{}, subs: map[string]*bmSub{}, cover: cover}
		steps := rapid.IntRange(20, 40).Draw(rt, "steps")
		for range steps {
			m.step(rapid.SampledFrom(bmOps).Draw(rt, "op"))
			m.check()
			m.ops++
		}
		runs++
		ops += m.ops
	})
	t.Logf("%d runs, %d operations checked against the broker model", runs, ops)
	if t.Failed() || testing.Short() {
		// -short runs a fifth of rapid's checks, which need not reach every
		// case; the full run, from a fixed seed (TestMain), must.
		return
	}
	for _, k := range bmRequiredCoverage {
		if cover[k] == 0 {
			t.Errorf("the generator never exercised %q: %v", k, cover)
		}
	}
	if testing.Verbose() {
		for _, k := range slices.Sorted(maps.Keys(cover)) {
			t.Logf("  %-28s %d", k, cover[k])
		}
	}
}

const (
	bmWindow = 10 * time.Second
	bmDLQ    = "dlq"
)

var (
	bmTopics   = []string{"a", "a.b", "a.c", "a.b.c", "x.y", bmDLQ}
	bmPatterns = []string{"a.*", "a.>", "*.b", "#", "x.*"}
	bmTargets  = append(slices.Clone(bmTopics), bmPatterns...)
	bmNames    = []string{"s1", "s2", "ops"}
	bmDedupIDs = []string{"", "", "d1", "d2"}
	bmAdvances = []time.Duration{time.Second, 5 * time.Second, bmWindow}
	// Ops, repeated for weight.
	bmOps = []string{
		"CreateTopic", "CreateTopic", "CreateTopic",
		"Subscribe", "Subscribe", "Subscribe", "Subscribe", "SubscribeOps",
		"Unsubscribe",
		"DeleteTopic",
		"Publish", "Publish", "Publish", "Publish", "Publish", "Publish",
		"Settle", "Settle", "Settle", "Settle",
		"Advance", "Advance",
	}
	// bmRequiredCoverage are the outcomes every run of 100 checks must
	// reach (each is seen several times per run). "publish:dedup window
	// passed" is counted but not required: it needs a publish, a clock move
	// past the window and the same ID on the same topic, and a run misses
	// it about one time in ten; TestPublishDedup checks it deterministically.
	bmRequiredCoverage = []string{
		"publish:new", "publish:duplicate", "publish:missing topic",
		"delivery:exact", "delivery:pattern", "delivery:dead letter",
		"subscribe:exists", "subscribe:missing topic", "unsubscribe:nil", "unsubscribe:not found",
		"delete:nil", "delete:missing",
		"settle:ack", "dead letter:to topic", "dead letter:store (no topic or subscription)", "dead letter:store (died again)",
	}
)

// bmMatch is the model's router: a plain segment matcher. '*' matches one
// segment; '>' and '#', as the last segment, one or more.
func bmMatch(pattern, topic string) bool {
	ps, ts := strings.Split(pattern, "."), strings.Split(topic, ".")
	for i, p := range ps {
		if p == ">" || p == "#" {
			return len(ts) > i
		}
		if i >= len(ts) || (p != "*" && p != ts[i]) {
			return false
		}
	}
	return len(ps) == len(ts)
}

func bmIsPattern(target string) bool { return strings.ContainsAny(target, "*>#") }

type bmTopic struct {
	dedup map[string]bmDedup
}

type bmDedup struct {
	at  time.Time
	msg queue.Message[int]
}

// bmExpect is a delivery the model expects on one subscription.
type bmExpect struct {
	payload int
	topic   string
	headers map[string]string // exactly these headers
}

type bmHeld struct {
	d   queue.Delivery[int]
	key string
}

type bmSub struct {
	target, name string
	dl           bool // WithMaxAttempts(1), WithDeadLetterTopic("dlq"): holds what it polls
	s            *broker.Subscription[int]
	pending      map[string]bmExpect // by message key
	held         []bmHeld
}

func (s *bmSub) key() string { return s.target + "/" + s.name }

func (s *bmSub) routes(topic string) bool {
	if bmIsPattern(s.target) {
		return bmMatch(s.target, topic)
	}
	return s.target == topic
}

// bmStored is a dead letter the model expects in the broker's store.
type bmStored struct {
	key, sub, lastErr string
	reason            queue.Reason
	attempts          int
}

type brokerModel struct {
	t      *testing.T
	rt     *rapid.T
	b      *broker.Broker[int]
	mock   *clock.Mock
	now    time.Time
	topics map[string]*bmTopic
	subs   map[string]*bmSub // by bmSub.key
	store  []bmStored
	next   int // the next payload
	ops    int
	cover  map[string]int
}

// msgKey names a message the same way on both sides: a published message by
// its ID, a dead letter on a dead-letter topic by its origin (message ID,
// source subscription), which is unique because a message reaches each
// subscription once and dies there at most once.
func msgKey(m queue.Message[int]) string {
	if _, ok := m.Headers.Lookup(backend.HeaderReason); ok {
		return "dl:" + m.Headers.Get(backend.HeaderMessageID) + "@" +
			m.Headers.Get(backend.HeaderTopic) + "/" + m.Headers.Get(backend.HeaderSubscription)
	}
	return "m:" + m.ID.String()
}

func (m *brokerModel) wantErr(op string, got, want error) {
	m.rt.Helper()
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		m.rt.Fatalf("%s: error %v, model wants %v", op, got, want)
	}
}

func (m *brokerModel) step(op string) {
	rt := m.rt
	switch op {
	case "CreateTopic":
		name := rapid.SampledFrom(bmTopics).Draw(rt, "topic")
		m.wantErr("CreateTopic "+name, m.b.CreateTopic(name), nil)
		if m.topics[name] == nil {
			m.topics[name] = &bmTopic{dedup: map[string]bmDedup{}}
		}

	case "DeleteTopic":
		name := m.topic("topic")
		err := m.b.DeleteTopic(name)
		if m.topics[name] == nil {
			m.wantErr("DeleteTopic "+name, err, broker.ErrTopicNotFound)
			m.cover["delete:missing"]++
			return
		}
		m.wantErr("DeleteTopic "+name, err, nil)
		m.cover["delete:nil"]++
		delete(m.topics, name) // and its dedup IDs
		for k, s := range m.subs {
			if s.target == name { // exact subscriptions close; patterns stay
				m.closed(s)
				delete(m.subs, k)
			}
		}

	case "Subscribe", "SubscribeOps":
		target := rapid.SampledFrom(bmPatterns).Draw(rt, "pattern")
		if rapid.Bool().Draw(rt, "exact") {
			target = m.topic("topic")
		}
		name := rapid.SampledFrom(bmNames).Draw(rt, "name")
		if op == "SubscribeOps" { // "ops" on "dlq", creating it if need be
			target, name = bmDLQ, "ops"
			m.wantErr("CreateTopic dlq", m.b.CreateTopic(bmDLQ), nil)
			if m.topics[bmDLQ] == nil {
				m.topics[bmDLQ] = &bmTopic{dedup: map[string]bmDedup{}}
			}
		}
		dl := rapid.Bool().Draw(rt, "deadLetterTopic")
		var opts []broker.SubscribeOption
		if dl {
			opts = []broker.SubscribeOption{broker.WithMaxAttempts(1), broker.WithDeadLetterTopic(bmDLQ)}
		}
		s, err := m.b.Subscribe(target, name, opts...)
		op = fmt.Sprintf("Subscribe(%q, %q, dl=%v)", target, name, dl)
		ms := &bmSub{target: target, name: name, dl: dl, s: s, pending: map[string]bmExpect{}}
		switch {
		case !bmIsPattern(target) && m.topics[target] == nil:
			m.wantErr(op, err, broker.ErrTopicNotFound)
			m.cover["subscribe:missing topic"]++
		case m.subs[ms.key()] != nil:
			m.wantErr(op, err, broker.ErrAlreadySubscribed)
			m.cover["subscribe:exists"]++
		default:
			m.wantErr(op, err, nil)
			m.subs[ms.key()] = ms
		}

	case "Unsubscribe":
		target := rapid.SampledFrom(bmTargets).Draw(rt, "target")
		name := rapid.SampledFrom(bmNames).Draw(rt, "name")
		if len(m.subs) > 0 && rapid.IntRange(0, 4).Draw(rt, "subExists") > 0 {
			s := m.subs[rapid.SampledFrom(slices.Sorted(maps.Keys(m.subs))).Draw(rt, "sub")]
			target, name = s.target, s.name
		}
		err := m.b.Unsubscribe(target, name)
		op := fmt.Sprintf("Unsubscribe(%q, %q)", target, name)
		s := m.subs[target+"/"+name]
		switch {
		case !bmIsPattern(target) && m.topics[target] == nil:
			m.wantErr(op, err, broker.ErrTopicNotFound)
		case s == nil:
			m.wantErr(op, err, broker.ErrSubscriptionNotFound)
			m.cover["unsubscribe:not found"]++
		default:
			m.wantErr(op, err, nil)
			m.cover["unsubscribe:nil"]++
			m.closed(s)
			delete(m.subs, s.key())
		}

	case "Publish":
		topic := m.topic("topic")
		id := rapid.SampledFrom(bmDedupIDs).Draw(rt, "dedupID")
		p := m.next
		m.next++
		var opts []broker.PublishOption
		if id != "" {
			opts = append(opts, broker.WithDedupID(id))
		}
		msg, err := m.b.Publish(ctx, topic, p, opts...)
		op := fmt.Sprintf("Publish(%q, %d, dedup %q) at +%v", topic, p, id, m.now.Sub(brokertest.Epoch))
		t := m.topics[topic]
		if t == nil {
			m.wantErr(op, err, broker.ErrTopicNotFound)
			m.cover["publish:missing topic"]++
			return
		}
		m.wantErr(op, err, nil)
		if d, ok := t.dedup[id]; ok && id != "" {
			if m.now.Before(d.at.Add(bmWindow)) {
				m.cover["publish:duplicate"]++
				// The original while a subscription holds it; once it is
				// settled (and collected, which is the GC's time), its ID and
				// time with the duplicate's payload.
				if msg.ID != d.msg.ID || (msg.Payload != d.msg.Payload && msg.Payload != p) || !msg.PublishedAt.Equal(d.msg.PublishedAt) {
					rt.Fatalf("%s: a duplicate within the window returned %v (payload %d), want the original %v (payload %d or %d, published at +%v)",
						op, msg.ID, msg.Payload, d.msg.ID, d.msg.Payload, p, d.msg.PublishedAt.Sub(brokertest.Epoch))
				}
				return // no subscription gets a new delivery
			}
			m.cover["publish:dedup window passed"]++
		}
		m.cover["publish:new"]++
		if msg.Payload != p || msg.Topic != topic || !msg.PublishedAt.Equal(m.now) || msg.Headers.Len() != 0 {
			rt.Fatalf("%s: returned %+v", op, msg)
		}
		if id != "" {
			t.dedup[id] = bmDedup{at: m.now, msg: msg}
		}
		for _, s := range m.subs {
			if s.routes(topic) {
				s.pending[msgKey(msg)] = bmExpect{payload: p, topic: topic}
			}
		}

	case "Settle":
		var all []*bmSub
		for _, k := range slices.Sorted(maps.Keys(m.subs)) {
			if len(m.subs[k].held) > 0 {
				all = append(all, m.subs[k])
			}
		}
		if len(all) == 0 {
			return
		}
		s := rapid.SampledFrom(all).Draw(rt, "sub")
		i := rapid.IntRange(0, len(s.held)-1).Draw(rt, "lease")
		h := s.held[i]
		s.held = slices.Delete(s.held, i, i+1)
		how := rapid.SampledFrom([]string{"ack", "fail", "reject"}).Draw(rt, "how")
		cause := errors.New("boom " + strconv.Itoa(h.d.Payload))
		op := fmt.Sprintf("%s %s of %s on %s", how, h.d.LeaseID, h.key, s.key())
		var err error
		reason := queue.ReasonMaxAttempts
		switch how {
		case "ack":
			m.wantErr(op, s.s.Ack(h.d.LeaseID), nil)
			m.cover["settle:ack"]++
			return
		case "fail":
			err = s.s.Fail(h.d.LeaseID, cause)
		case "reject":
			err = s.s.Reject(h.d.LeaseID, cause)
			reason = queue.ReasonRejected
		}
		m.wantErr(op, err, nil)
		m.deadLetter(s, h, reason, cause.Error())

	case "Advance":
		d := rapid.SampledFrom(bmAdvances).Draw(rt, "by")
		m.mock.Add(d)
		m.now = m.now.Add(d)
	}
}

// topic draws a topic name, one that exists four times out of five.
func (m *brokerModel) topic(label string) string {
	if len(m.topics) == 0 || rapid.IntRange(0, 4).Draw(m.rt, label+"Exists") == 0 {
		return rapid.SampledFrom(bmTopics).Draw(m.rt, label)
	}
	return rapid.SampledFrom(slices.Sorted(maps.Keys(m.topics))).Draw(m.rt, label)
}

// deadLetter routes a dead letter the model's way: to every subscription of
// "dlq" if it exists and has one, else to the store; and to the store
// anyway if it already came through "dlq".
func (m *brokerModel) deadLetter(s *bmSub, h bmHeld, reason queue.Reason, lastErr string) {
	_, again := h.d.Headers.Lookup(backend.HeaderReason)
	var to []*bmSub
	if !again && m.topics[bmDLQ] != nil {
		for _, r := range m.subs {
			if r.routes(bmDLQ) {
				to = append(to, r)
			}
		}
	}
	if len(to) == 0 {
		m.store = append(m.store, bmStored{key: h.key, sub: s.name, lastErr: lastErr, reason: reason, attempts: 1})
		if again {
			m.cover["dead letter:store (died again)"]++
		} else {
			m.cover["dead letter:store (no topic or subscription)"]++
		}
		return
	}
	m.cover["dead letter:to topic"]++
	hdr := map[string]string{
		backend.HeaderReason:       reason.String(),
		backend.HeaderAttempts:     "1",
		backend.HeaderLastError:    lastErr,
		backend.HeaderSubscription: s.name,
		backend.HeaderTopic:        s.target,
		backend.HeaderMessageID:    h.d.ID.String(),
		backend.HeaderAt:           m.now.Format(time.RFC3339Nano),
	}
	key := "dl:" + h.d.ID.String() + "@" + s.key()
	for _, r := range to {
		if _, dup := r.pending[key]; dup {
			m.rt.Fatalf("model: dead letter %s routed twice to %s", key, r.key())
		}
		r.pending[key] = bmExpect{payload: h.d.Payload, topic: bmDLQ, headers: hdr}
	}
}

// closed checks that a subscription the model closed is closed.
func (m *brokerModel) closed(s *bmSub) {
	if ds := s.s.TryPoll(10); len(ds) != 0 {
		m.rt.Fatalf("%s: closed, yet TryPoll returned %v", s.key(), payloads(ds))
	}
	if _, err := s.s.TryPollInto(make([]queue.Delivery[int], 1)); !errors.Is(err, queue.ErrClosed) {
		m.rt.Fatalf("%s: closed, yet TryPollInto returned %v", s.key(), err)
	}
}

// check drains every live subscription and compares what it got with the
// model, acking (or, for dead-lettering subscriptions, holding) each lease;
// then Stats conservation, the dead-letter store and the topic list.
func (m *brokerModel) check() {
	rt := m.rt
	for _, k := range slices.Sorted(maps.Keys(m.subs)) {
		s := m.subs[k]
		ds := s.s.TryPoll(1000)
		got := map[string]bool{}
		for _, d := range ds {
			key := msgKey(d.Message)
			if got[key] {
				rt.Fatalf("after op %d: %s received %s twice", m.ops, k, key)
			}
			got[key] = true
			want, ok := s.pending[key]
			if !ok {
				rt.Fatalf("after op %d: %s received %s (payload %d, topic %q, headers %v), which the model did not route to it; it expects %v",
					m.ops, k, key, d.Payload, d.Topic, d.Headers, slices.Sorted(maps.Keys(s.pending)))
			}
			if d.Payload != want.payload || d.Topic != want.topic || d.Attempt != 1 {
				rt.Fatalf("after op %d: %s received %s as payload %d, topic %q, attempt %d; want %d, %q, 1",
					m.ops, k, key, d.Payload, d.Topic, d.Attempt, want.payload, want.topic)
			}
			if h := maps.Collect(d.Headers.All()); !(len(h) == 0 && len(want.headers) == 0) && !maps.Equal(h, want.headers) {
				rt.Fatalf("after op %d: %s received %s with headers %v, want %v", m.ops, k, key, h, want.headers)
			}
			if s.dl {
				s.held = append(s.held, bmHeld{d: d, key: key})
			} else {
				m.wantErr(fmt.Sprintf("ack %s on %s", key, k), s.s.Ack(d.LeaseID), nil)
			}
			switch {
			case want.headers != nil:
				m.cover["delivery:dead letter"]++
			case bmIsPattern(s.target):
				m.cover["delivery:pattern"]++
			default:
				m.cover["delivery:exact"]++
			}
		}
		for key := range s.pending {
			if !got[key] {
				rt.Fatalf("after op %d: %s did not receive %s (payload %d, topic %q); got %v",
					m.ops, k, key, s.pending[key].payload, s.pending[key].topic, slices.Sorted(maps.Keys(got)))
			}
		}
		clear(s.pending)
		st := s.s.Stats()
		if st.Published+st.Redriven != st.Acked+st.DeadLettered+st.Dropped+uint64(st.Visible+st.Delayed+st.InFlight+st.HeldBack) {
			if !m.t.Failed() {
				balanced(m.t, st) // testify's report, once (rapid re-runs while shrinking)
			}
			rt.Fatalf("after op %d: %s: Stats do not balance: %+v", m.ops, k, st)
		}
		if st.InFlight != len(s.held) || st.Visible+st.Delayed+st.HeldBack != 0 {
			rt.Fatalf("after op %d: %s: Stats %+v, model holds %d leases and nothing else", m.ops, k, st, len(s.held))
		}
	}

	dls := m.b.DeadLetters()
	if len(dls) != len(m.store) {
		rt.Fatalf("after op %d: the dead-letter store holds %d letters, model %d: %v", m.ops, len(dls), len(m.store), m.store)
	}
	for i, dl := range dls {
		w := m.store[i]
		if k := msgKey(dl.Message); k != w.key || dl.Subscription != w.sub || dl.Reason != w.reason || dl.Attempts != w.attempts || dl.LastError != w.lastErr {
			rt.Fatalf("after op %d: dead letter %d is %s from %q (%v, %d attempts, %q), model wants %+v",
				m.ops, i, k, dl.Subscription, dl.Reason, dl.Attempts, dl.LastError, w)
		}
	}
	if got, want := m.b.Topics(), slices.Sorted(maps.Keys(m.topics)); !slices.Equal(got, want) {
		rt.Fatalf("after op %d: topics %v, model %v", m.ops, got, want)
	}
}
