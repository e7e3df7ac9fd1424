package publishtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// hangGuard bounds every wait on a condition, so that a broken backend
// fails a case instead of hanging the test binary. It is never a timing
// assertion.
const hangGuard = 15 * time.Second

// outboxHeader is the header the outbox's relay gives every message (the
// outbox module's HeaderDedupID): a backend must carry a header of the
// "leasebus-" family that is not its own.
const outboxHeader = "leasebus-outbox-dedup-id"

// Run runs the suite against h, one subtest per case, and closes h when
// the test ends. Each case uses a fresh topic.
func Run(t *testing.T, h Harness) {
	t.Helper()
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Harness.Close: %v", err)
		}
	})
	caps := h.Capabilities()
	u := caps.Unit
	if u <= 0 {
		u = time.Second
	}
	s := &suite{h: h, pub: h.Publisher(), caps: caps, unit: u}
	cases := []namedCase{
		{"PublishArrivesWhole", s.testWhole},
		{"DedupInsideTheWindow", s.testDedupInside},
		{"DedupOfASettledMessage", s.testDedupSettled},
		{"DedupPastTheWindow", s.testDedupPast},
		{"Delay", s.testDelay},
		{"KeyOrder", s.testKeyOrder},
		{"Priorities", s.testPriorities},
		{"TTL", s.testTTL},
		{"TooLarge", s.testTooLarge},
		{"ContextDone", s.testContextDone},
		{"BadInput", s.testBadInput},
		{"ScheduleOncePerSlot", s.testSchedule},
	}
	for name := range caps.Differs {
		if !slices.ContainsFunc(cases, func(c namedCase) bool { return c.name == name }) {
			t.Errorf("Capabilities.Differs names %q, which is no case of the suite", name)
		}
	}
	for _, c := range cases {
		if why, ok := caps.Differs[c.name]; ok {
			t.Run(c.name, func(t *testing.T) { t.Skipf("the backend differs (Capabilities.Differs): %s", why) })
			continue
		}
		t.Run(c.name, c.f)
	}
}

type namedCase struct {
	name string
	f    func(*testing.T)
}

type suite struct {
	h    Harness
	pub  backend.Publisher[string]
	caps Capabilities
	unit time.Duration
}

// bounded returns a context that ends after the hang guard.
func (s *suite) bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard+20*s.unit)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) topic(t *testing.T) string {
	t.Helper()
	topic, err := s.h.NewTopic(s.bounded(t))
	if err != nil {
		t.Fatalf("NewTopic: %v", err)
	}
	return topic
}

func (s *suite) publish(t *testing.T, topic, payload string, opts ...queue.PublishOption) queue.Message[string] {
	t.Helper()
	m, err := s.pub.Publish(s.bounded(t), topic, payload, opts...)
	if err != nil {
		t.Fatalf("Publish(%q, %q): %v", topic, short(payload), err)
	}
	return m
}

// receive waits (bounded) for n messages of topic.
func (s *suite) receive(t *testing.T, topic string, n int) []queue.Message[string] {
	t.Helper()
	ms, err := s.h.Receive(s.bounded(t), topic, n)
	if err != nil {
		t.Fatalf("Receive(%q, %d): %v", topic, n, err)
	}
	if len(ms) != n {
		t.Fatalf("received %d messages of %q, want %d: %v", len(ms), topic, n, payloads(ms))
	}
	return ms
}

// expectNone checks that nothing of topic is received now: at once on a
// fake clock, within a few units on real time.
func (s *suite) expectNone(t *testing.T, topic string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if !s.caps.FakeClock {
		ctx, cancel = context.WithTimeout(context.Background(), 3*s.unit)
	} else {
		cancel() // done: what is visible now
	}
	defer cancel()
	ms, err := s.h.Receive(ctx, topic, 1)
	if err != nil {
		t.Fatalf("Receive(%q): %v", topic, err)
	}
	if len(ms) > 0 {
		t.Fatalf("received %v, want nothing", payloads(ms))
	}
}

// advance moves the backend's clock, or skips t.
func (s *suite) advance(t *testing.T, d time.Duration) {
	t.Helper()
	if err := s.h.Advance(d); err != nil {
		t.Fatalf("Advance(%v): %v", d, err)
	}
}

func (s *suite) needFakeClock(t *testing.T, why string) {
	t.Helper()
	if !s.caps.FakeClock {
		t.Skipf("backend lacks Capabilities.FakeClock: %s", why)
	}
}

// refused checks that a publish with opts is refused for good, as want
// (errors.ErrUnsupported or queue.ErrInvalidArgument) says, by Publish and,
// where the options themselves are valid (the backend refuses what they
// ask), by CheckPublish alike, and stores nothing.
func (s *suite) refused(t *testing.T, topic string, want error, opts ...queue.PublishOption) {
	t.Helper()
	if !backend.Permanent(want) {
		t.Fatalf("the suite's own error: %v is not a refusal for good", want)
	}
	if _, err := s.pub.Publish(s.bounded(t), topic, "refused", opts...); !errors.Is(err, want) {
		t.Fatalf("Publish: %v, want an error matching %v", err, want)
	}
	var o queue.PublishOptions
	if err := o.Apply(opts...); err != nil {
		if !errors.Is(err, want) {
			t.Fatalf("the options themselves: %v, want an error matching %v", err, want)
		}
	} else if err := s.pub.CheckPublish(topic, o); !errors.Is(err, want) {
		t.Fatalf("CheckPublish: %v, but Publish refuses it for good (%v)", err, want)
	}
	s.expectNone(t, topic)
}

func payloads(ms []queue.Message[string]) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = short(m.Payload)
	}
	return out
}

// short is a payload as a failure shows it: a large one cut.
func short(p string) string {
	if len(p) > 40 {
		return fmt.Sprintf("%s… (%d bytes)", p[:20], len(p))
	}
	return p
}

func (s *suite) testWhole(t *testing.T) {
	topic := s.topic(t)
	headers := map[string]string{"trace": "abc", outboxHeader: "outbox:7"}
	if err := s.pub.CheckPublish(topic, queue.PublishOptions{Headers: headers}); err != nil {
		t.Fatalf("CheckPublish: %v", err)
	}
	m := s.publish(t, topic, "hello", queue.WithHeaders(headers))
	if m.ID == [16]byte{} || m.Topic != topic || m.Payload != "hello" || m.PublishedAt.IsZero() {
		t.Fatalf("Publish returned %+v", m)
	}
	if got := maps(m.Headers); !equalMaps(got, headers) {
		t.Fatalf("Publish returned headers %v, want %v", got, headers)
	}
	r := s.receive(t, topic, 1)[0]
	if r.ID != m.ID || r.Topic != topic || r.Payload != "hello" || r.Key != "" || !equalMaps(maps(r.Headers), headers) {
		t.Fatalf("received %+v, want %+v", r, m)
	}
	if s.caps.FakeClock && !r.PublishedAt.Equal(m.PublishedAt) {
		t.Fatalf("received PublishedAt %v, Publish returned %v", r.PublishedAt, m.PublishedAt)
	}
	s.expectNone(t, topic)
}

func maps(h queue.Headers) map[string]string {
	out := map[string]string{}
	for k, v := range h.All() {
		out[k] = v
	}
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func (s *suite) testDedupInside(t *testing.T) {
	topic := s.topic(t)
	if s.caps.DedupWindow == 0 {
		s.refused(t, topic, errors.ErrUnsupported, queue.WithDedupID("d-1"))
		return
	}
	first := s.publish(t, topic, "first", queue.WithDedupID("d-1"))
	again := s.publish(t, topic, "again", queue.WithDedupID("d-1"))
	if again.ID != first.ID {
		t.Fatalf("the duplicate returned ID %v, want the original's %v", again.ID, first.ID)
	}
	other := s.publish(t, topic, "other", queue.WithDedupID("d-2"))
	if other.ID == first.ID {
		t.Fatal("another dedup ID returned the first message")
	}
	ms := s.receive(t, topic, 2)
	if got := strings.Join(payloads(ms), ","); got != "first,other" {
		t.Fatalf("received %s, want first,other", got)
	}
	s.expectNone(t, topic)
}

// A dedup ID still stops a publish once its message is settled (a
// schedule's slot fired again after its message was handled, a relay's
// row published again after the consumer acked it): the publish succeeds
// and stores nothing.
func (s *suite) testDedupSettled(t *testing.T) {
	if s.caps.DedupWindow == 0 {
		t.Skip("the backend does not deduplicate (Capabilities.DedupWindow is 0)")
	}
	topic := s.topic(t)
	s.publish(t, topic, "first", queue.WithDedupID("d-1"))
	s.receive(t, topic, 1)
	if _, err := s.pub.Publish(s.bounded(t), topic, "again", queue.WithDedupID("d-1")); err != nil {
		t.Fatalf("a duplicate of a settled message: %v, want nil", err)
	}
	s.expectNone(t, topic)
}

func (s *suite) testDedupPast(t *testing.T) {
	if s.caps.DedupWindow == 0 {
		t.Skip("the backend does not deduplicate (Capabilities.DedupWindow is 0)")
	}
	s.needFakeClock(t, "the dedup window has to pass")
	topic := s.topic(t)
	s.publish(t, topic, "first", queue.WithDedupID("d-1"))
	s.advance(t, s.caps.DedupWindow-time.Nanosecond)
	s.publish(t, topic, "inside", queue.WithDedupID("d-1"))
	s.advance(t, time.Nanosecond)
	s.publish(t, topic, "past", queue.WithDedupID("d-1"))
	ms := s.receive(t, topic, 2)
	if got := strings.Join(payloads(ms), ","); got != "first,past" {
		t.Fatalf("received %s, want first,past (a window from the first publish)", got)
	}
}

func (s *suite) testDelay(t *testing.T) {
	topic := s.topic(t)
	if s.caps.MaxDelay == 0 {
		s.refused(t, topic, errors.ErrUnsupported, queue.WithDelay(s.unit))
		return
	}
	s.refused(t, topic, queue.ErrInvalidArgument, queue.WithDelay(-time.Second))
	if s.caps.MaxDelay < time.Duration(1<<62) {
		s.refused(t, topic, queue.ErrInvalidArgument, queue.WithDelay(s.caps.MaxDelay+time.Second))
	}
	d := min(4*s.unit, s.caps.MaxDelay)
	start := time.Now()
	s.publish(t, topic, "later", queue.WithDelay(d))
	s.publish(t, topic, "now")
	if got := s.receive(t, topic, 1)[0].Payload; got != "now" {
		t.Fatalf("received %q first, want the message without a delay", got)
	}
	if s.caps.FakeClock {
		s.advance(t, d-time.Nanosecond)
		s.expectNone(t, topic)
		s.advance(t, time.Nanosecond)
		s.receive(t, topic, 1)
		return
	}
	s.receive(t, topic, 1)
	if waited := time.Since(start); waited < d {
		t.Fatalf("a message delayed %v came after %v", d, waited)
	}
}

func (s *suite) testKeyOrder(t *testing.T) {
	topic := s.topic(t)
	if !s.caps.Keys {
		s.refused(t, topic, errors.ErrUnsupported, queue.WithKey("customer-1"))
		return
	}
	for i := range 5 {
		for _, k := range []string{"a", "b"} {
			s.publish(t, topic, fmt.Sprintf("%s-%d", k, i), queue.WithKey(k))
		}
	}
	ms := s.receive(t, topic, 10)
	next := map[string]int{}
	for _, m := range ms {
		if m.Key == "" {
			t.Fatalf("received %q without its key", m.Payload)
		}
		if want := fmt.Sprintf("%s-%d", m.Key, next[m.Key]); m.Payload != want {
			t.Fatalf("received %v: key %s out of order at %s (want %s)", payloads(ms), m.Key, m.Payload, want)
		}
		next[m.Key]++
	}
}

func (s *suite) testPriorities(t *testing.T) {
	topic := s.topic(t)
	if !s.caps.Priorities {
		s.refused(t, topic, errors.ErrUnsupported, queue.WithPriority(queue.PriorityHigh))
		s.publish(t, topic, "normal", queue.WithPriority(queue.PriorityNormal))
		s.receive(t, topic, 1)
		return
	}
	s.refused(t, topic, queue.ErrInvalidArgument, queue.WithPriority(queue.PriorityCritical+1))
	for _, p := range []queue.Priority{queue.PriorityLow, queue.PriorityNormal, queue.PriorityCritical, queue.PriorityHigh} {
		s.publish(t, topic, p.String(), queue.WithPriority(p))
	}
	if got := strings.Join(payloads(s.receive(t, topic, 4)), ","); got != "critical,high,normal,low" {
		t.Fatalf("received %s, want critical,high,normal,low", got)
	}
}

func (s *suite) testTTL(t *testing.T) {
	topic := s.topic(t)
	if !s.caps.TTL {
		s.refused(t, topic, errors.ErrUnsupported, queue.WithTTL(time.Minute))
		return
	}
	s.refused(t, topic, queue.ErrInvalidArgument, queue.WithTTL(-time.Second))
	s.needFakeClock(t, "a TTL has to pass")
	s.publish(t, topic, "expires", queue.WithTTL(2*s.unit))
	s.publish(t, topic, "stays")
	s.advance(t, 2*s.unit)
	if got := s.receive(t, topic, 1)[0].Payload; got != "stays" {
		t.Fatalf("received %q, want the message its TTL did not expire", got)
	}
	s.expectNone(t, topic)
}

func (s *suite) testTooLarge(t *testing.T) {
	if s.caps.MaxSize == 0 {
		t.Skip("the backend has no size limit the suite tests (Capabilities.MaxSize is 0)")
	}
	topic := s.topic(t)
	if _, err := s.pub.Publish(s.bounded(t), topic, strings.Repeat("x", s.caps.MaxSize+1)); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("a payload of %d bytes: %v, want an error matching queue.ErrInvalidArgument", s.caps.MaxSize+1, err)
	}
	s.expectNone(t, topic)
	size := max(s.caps.MaxSize-1024, 1) // room for what the backend adds (an ID header, say)
	s.publish(t, topic, strings.Repeat("x", size))
	if got := len(s.receive(t, topic, 1)[0].Payload); got != size {
		t.Fatalf("received %d bytes, want %d", got, size)
	}
}

func (s *suite) testContextDone(t *testing.T) {
	topic := s.topic(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.pub.Publish(ctx, topic, "canceled"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish with a done context: %v, want context.Canceled", err)
	}
	s.expectNone(t, topic)
}

func (s *suite) testBadInput(t *testing.T) {
	topic := s.topic(t)
	for _, bad := range []string{"", "has space", "new\nline"} {
		if _, err := s.pub.Publish(s.bounded(t), bad, "x"); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("Publish to topic %q: %v, want queue.ErrInvalidArgument", bad, err)
		}
		if err := s.pub.CheckPublish(bad, queue.PublishOptions{}); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("CheckPublish(%q): %v, want queue.ErrInvalidArgument", bad, err)
		}
	}
	for what, opt := range map[string]queue.PublishOption{
		"the zero option":     {},
		"an empty dedup ID":   queue.WithDedupID(""),
		"a dedup ID too long": queue.WithDedupID(strings.Repeat("d", queue.MaxDedupID+1)),
		"WithDedupIDs":        queue.WithDedupIDs([]string{"a"}),
	} {
		if _, err := s.pub.Publish(s.bounded(t), topic, "x", opt); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("Publish with %s: %v, want queue.ErrInvalidArgument", what, err)
		}
	}
	if err := s.pub.CheckPublish(topic, queue.PublishOptions{DedupID: strings.Repeat("d", queue.MaxDedupID+1)}); !backend.Permanent(err) {
		t.Errorf("CheckPublish with a dedup ID too long: %v, want a refusal for good", err)
	}
	s.expectNone(t, topic)
}
