package broker_test

// The bad-input table for subscriptions: every call with invalid arguments
// and every settle call with every kind of lease that is not current; every
// call after Close, DeleteTopic or Unsubscribe; a clock moved backwards; a
// dead-letter topic that loops. The fixture is badinput_test.go's.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

func TestBadInputSubscription(t *testing.T) {
	cases := []badCase{
		{"Poll(0)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.s.Poll(ctx, 0); return err }},
		{"Poll(-1)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.s.Poll(ctx, -1); return err }},
		{"Poll(MinInt)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.s.Poll(ctx, math.MinInt); return err }},
		{"Poll(nil ctx)", queue.ErrInvalidArgument, func(f *badFixture) error {
			//lint:ignore SA1012 a nil context is the invalid input under test
			_, err := f.s.Poll(nil, 1)
			return err
		}},
		{"Poll(done ctx)", context.Canceled, func(f *badFixture) error { _, err := f.s.Poll(canceled(), 1); return err }},
		{"PollWithVisibility(vis 0)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.s.PollWithVisibility(ctx, 1, 0); return err }},
		{"PollWithVisibility(vis -1)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.s.PollWithVisibility(ctx, 1, -1); return err }},
		{"PollWithVisibility(n 0)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.s.PollWithVisibility(ctx, 0, vis); return err }},
		{"PollWithVisibility(done ctx)", context.Canceled, func(f *badFixture) error {
			_, err := f.s.PollWithVisibility(canceled(), 1, vis)
			return err
		}},
		{"PollInto(nil)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.s.PollInto(ctx, nil); return err }},
		{"PollInto(empty)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.s.PollInto(ctx, []queue.Delivery[string]{}); return err }},
		{"PollInto(done ctx)", context.Canceled, func(f *badFixture) error {
			_, err := f.s.PollInto(canceled(), make([]queue.Delivery[string], 1))
			return err
		}},
		{"TryPoll(0|-1|MinInt)", nil, func(f *badFixture) error {
			for _, n := range []int{0, -1, math.MinInt} {
				if ds := f.s.TryPoll(n); ds != nil {
					return fmt.Errorf("TryPoll(%d) = %v", n, ds)
				}
			}
			return nil
		}},
		{"TryPoll(MaxInt) with nothing visible", nil, func(f *badFixture) error {
			if ds := f.s.TryPoll(math.MaxInt); len(ds) != 0 {
				return fmt.Errorf("TryPoll = %v", ds)
			}
			return nil
		}},
		{"TryPollInto(nil)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.s.TryPollInto(nil); return err }},
		{"AwaitParked(nil ctx)", queue.ErrInvalidArgument, func(f *badFixture) error {
			//lint:ignore SA1012 a nil context is the invalid input under test
			return f.s.AwaitParked(nil, 0)
		}},
		{"AwaitParked(-1)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.s.AwaitParked(ctx, -1) }},
		{"AwaitParked(MinInt)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.s.AwaitParked(ctx, math.MinInt) }},
		{"AwaitParked(1, done ctx)", context.Canceled, func(f *badFixture) error { return f.s.AwaitParked(canceled(), 1) }},
	}
	// Every settle call × every kind of lease that is not current.
	type settleFn struct {
		name string
		fn   func(s *broker.Subscription[string], id lease.ID) error
	}
	settles := []settleFn{
		{"Ack", func(s *broker.Subscription[string], id lease.ID) error { return s.Ack(id) }},
		{"AckBatch", func(s *broker.Subscription[string], id lease.ID) error { return s.AckBatch([]lease.ID{id}) }},
		{"Nack", func(s *broker.Subscription[string], id lease.ID) error { return s.Nack(id, 0) }},
		{"Fail", func(s *broker.Subscription[string], id lease.ID) error { return s.Fail(id, errors.New("x")) }},
		{"Reject", func(s *broker.Subscription[string], id lease.ID) error { return s.Reject(id, nil) }},
		{"Release", func(s *broker.Subscription[string], id lease.ID) error { return s.Release(id) }},
		{"Extend", func(s *broker.Subscription[string], id lease.ID) error { return s.Extend(id, vis) }},
	}
	leases := []struct {
		name string
		id   func(f *badFixture) lease.ID
		want error
	}{
		{"zero lease", func(*badFixture) lease.ID { return lease.ID{} }, queue.ErrLeaseNotFound},
		{"foreign lease", func(f *badFixture) lease.ID { return f.foreign }, queue.ErrLeaseNotFound},
		{"acked lease", func(f *badFixture) lease.ID { return f.acked }, queue.ErrLeaseNotFound},
		{"dead-lettered lease", func(f *badFixture) lease.ID { return f.dead }, queue.ErrLeaseNotFound},
		{"never-issued delivery", func(f *badFixture) lease.ID { return lease.NewID(f.cur.Scope(), f.cur.Seq(), f.cur.Delivery()+1) }, queue.ErrLeaseNotFound},
		{"delivery 0", func(f *badFixture) lease.ID { return lease.NewID(f.cur.Scope(), f.cur.Seq(), 0) }, queue.ErrLeaseNotFound},
		{"huge seq", func(f *badFixture) lease.ID { return lease.NewID(f.cur.Scope(), math.MaxUint64, math.MaxUint32) }, queue.ErrLeaseNotFound},
		{"other scope", func(f *badFixture) lease.ID { return lease.NewID(f.cur.Scope()^2, f.cur.Seq(), f.cur.Delivery()) }, queue.ErrLeaseNotFound},
		{"superseded lease", func(f *badFixture) lease.ID { return f.old }, queue.ErrLeaseExpired},
		{"settled lease, message held", func(f *badFixture) lease.ID { return f.settled }, queue.ErrLeaseExpired},
	}
	for _, l := range leases {
		for _, s := range settles {
			cases = append(cases, badCase{s.name + "(" + l.name + ")", l.want, func(f *badFixture) error { return s.fn(f.s, l.id(f)) }})
		}
	}
	cases = append(cases,
		badCase{"Nack(cur, -1ns)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.s.Nack(f.cur, -1) }},
		badCase{"Nack(cur, MinInt64)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.s.Nack(f.cur, math.MinInt64) }},
		badCase{"Extend(cur, 0)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.s.Extend(f.cur, 0) }},
		badCase{"Extend(cur, MinInt64)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.s.Extend(f.cur, math.MinInt64) }},
		badCase{"Nack(zero, -1ns)", queue.ErrInvalidArgument, func(f *badFixture) error { return f.s.Nack(lease.ID{}, -1) }},
		badCase{"AckBatch(nil)", nil, func(f *badFixture) error { return f.s.AckBatch(nil) }},
		badCase{"AckBatch(zero, acked, zero)", queue.ErrLeaseNotFound, func(f *badFixture) error {
			return f.s.AckBatch([]lease.ID{{}, f.acked, {}})
		}},
		badCase{"Ack(cur) on the other subscription", queue.ErrLeaseNotFound, func(f *badFixture) error { return f.other.Ack(f.cur) }},
		badCase{"Nack(cur) at its deadline", queue.ErrLeaseExpired, func(f *badFixture) error {
			f.mock.Add(vis) // changes state by design: compare after with the clock moved
			return f.s.Nack(f.cur, 0)
		}},
	)
	runBadCases(t, cases)
}

// TestBadInputAfterClose: after Close, Unsubscribe or DeleteTopic every call
// returns ErrClosed (TryPoll returns nil) and changes nothing.
func TestBadInputAfterClose(t *testing.T) {
	closers := map[string]func(f *badFixture) error{
		"Close":       func(f *badFixture) error { return f.b.Close() },
		"DeleteTopic": func(f *badFixture) error { return f.b.DeleteTopic("t") },
		"Unsubscribe": func(f *badFixture) error { return f.b.Unsubscribe("t", "s") },
	}
	subCalls := map[string]func(f *badFixture) error{
		"Poll":               func(f *badFixture) error { _, err := f.s.Poll(ctx, 1); return err },
		"PollWithVisibility": func(f *badFixture) error { _, err := f.s.PollWithVisibility(ctx, 1, vis); return err },
		"PollInto":           func(f *badFixture) error { _, err := f.s.PollInto(ctx, make([]queue.Delivery[string], 1)); return err },
		"TryPollInto":        func(f *badFixture) error { _, err := f.s.TryPollInto(make([]queue.Delivery[string], 1)); return err },
		"Ack":                func(f *badFixture) error { return f.s.Ack(f.cur) },
		"AckBatch":           func(f *badFixture) error { return f.s.AckBatch([]lease.ID{f.cur}) },
		"Nack":               func(f *badFixture) error { return f.s.Nack(f.cur, 0) },
		"Fail":               func(f *badFixture) error { return f.s.Fail(f.cur, nil) },
		"Reject":             func(f *badFixture) error { return f.s.Reject(f.cur, nil) },
		"Release":            func(f *badFixture) error { return f.s.Release(f.cur) },
		"Extend":             func(f *badFixture) error { return f.s.Extend(f.cur, vis) },
		"Purge":              func(f *badFixture) error { _, err := f.s.Purge(); return err },
		"AwaitParked":        func(f *badFixture) error { return f.s.AwaitParked(ctx, 1) },
		"TryPoll":            func(f *badFixture) error { return closedIfNil(f.s.TryPoll(1)) },
	}
	brokerCalls := map[string]func(f *badFixture) error{
		"CreateTopic":   func(f *badFixture) error { return f.b.CreateTopic("u") },
		"DeleteTopic":   func(f *badFixture) error { return f.b.DeleteTopic("t") },
		"Subscriptions": func(f *badFixture) error { _, err := f.b.Subscriptions("t"); return err },
		"Subscribe":     func(f *badFixture) error { _, err := f.b.Subscribe("t", "x"); return err },
		"Subscribe(pattern)": func(f *badFixture) error {
			_, err := f.b.Subscribe("t.*", "x")
			return err
		},
		"Subscription": func(f *badFixture) error { _, err := f.b.Subscription("t", "s"); return err },
		"Subscription(pattern)": func(f *badFixture) error {
			_, err := f.b.Subscription("t.*", "s")
			return err
		},
		"Unsubscribe":          func(f *badFixture) error { return f.b.Unsubscribe("t", "s") },
		"Unsubscribe(pattern)": func(f *badFixture) error { return f.b.Unsubscribe("t.*", "s") },
		"Publish":              func(f *badFixture) error { _, err := f.b.Publish(ctx, "t", "x"); return err },
		"Redrive": func(f *badFixture) error {
			_, err := f.b.Redrive(func(queue.DeadLetter[string]) bool { return true })
			return err
		},
	}
	for cname, closeFn := range closers {
		var cases []badCase
		for name, fn := range subCalls {
			cases = append(cases, badCase{"after " + cname + ": Subscription." + name, queue.ErrClosed, fn})
		}
		if cname == "Close" {
			for name, fn := range brokerCalls {
				cases = append(cases, badCase{"after Close: Broker." + name, queue.ErrClosed, fn})
			}
			cases = append(cases,
				badCase{"after Close: Close", nil, func(f *badFixture) error { return f.b.Close() }},
				badCase{"after Close: Topics", nil, func(f *badFixture) error {
					if ts := f.b.Topics(); ts != nil {
						return fmt.Errorf("Topics() = %v, want nil", ts)
					}
					return nil
				}},
				badCase{"after Close: Redrive(nil)", queue.ErrInvalidArgument, func(f *badFixture) error { _, err := f.b.Redrive(nil); return err }},
			)
		}
		t.Run(cname, func(t *testing.T) {
			for _, c := range cases {
				f := newBadFixture(t)
				if err := closeFn(f); err != nil {
					t.Fatalf("%s: %v", cname, err)
				}
				checkBadCase(t, f, c)
			}
		})
	}
}

// closedIfNil turns TryPoll's documented nil after close into ErrClosed.
func closedIfNil(ds []queue.Delivery[string]) error {
	if ds == nil {
		return queue.ErrClosed
	}
	return fmt.Errorf("TryPoll after close = %v", ds)
}

// A mock clock moved backwards changes nothing that was settled, and
// nothing panics: leases already expired stay expired, live ones stay
// live, delayed messages stay delayed; moving forward again works.
func TestBadInputClockMovedBackwards(t *testing.T) {
	f := newBadFixture(t)
	mock, s := f.mock, f.s
	start := mock.Now()
	brokertest.Publish(t, f.b, "t", "m6")
	expired := s.TryPoll(1)[0] // m6: will expire
	mock.Add(vis)              // m1 (cur) and m6 expire; m1's attempt 2 of 3
	before := f.state()
	mock.Set(start.Add(-time.Hour))
	if after := f.state(); after.s != before.s || after.dead != before.dead {
		t.Errorf("moving the clock back changed the state:\n before %+v\n after  %+v", before, after)
	}
	testkit.WantErr(t, "Extend(expired lease) after the clock went back", testkit.CallSafely(func() error { return s.Extend(expired.LeaseID, vis) }), queue.ErrLeaseExpired)
	testkit.WantErr(t, "late Ack after the clock went back", testkit.CallSafely(func() error { return s.Ack(expired.LeaseID) }), nil)
	ds := s.TryPoll(10)
	if len(ds) != 1 || ds[0].Payload != "m1" || ds[0].Attempt != 3 || !ds[0].Deadline.Equal(start.Add(-time.Hour+vis)) {
		t.Fatalf("TryPoll after the clock went back = %+v, want m1, attempt 3, deadline now+vis", ds)
	}
	testkit.WantErr(t, "Extend(live lease) after the clock went back", testkit.CallSafely(func() error { return s.Extend(ds[0].LeaseID, vis) }), nil)
	mock.Set(start.Add(2 * time.Hour)) // forward again: m1's last attempt expires, m4 and m5 come due
	st := s.Stats()
	if st.InFlight != 0 || st.Delayed != 0 || st.Visible != 2 || len(f.b.DeadLetters()) != 2 {
		t.Errorf("after moving forward again: %+v, dead letters %d; want m4 and m5 visible, m1 dead-lettered", st, len(f.b.DeadLetters()))
	}
	balanced(t, st)
}

// A subscription whose dead-letter topic leads back to itself (its own
// topic, or a pattern that matches the dead-letter topic) and which
// overflows recurses without bound: onDead publishes, the publish
// overflows, onDead publishes... until the goroutine's stack overflows,
// which kills the process (no recover). WithDeadLetterTopic documents that
// "nothing is lost silently"; it should refuse the loop or break it (the
// store). The scenario runs in a child process so the crash cannot take the
// test binary down.
func TestBadInputDeadLetterTopicLoop(t *testing.T) {
	if os.Getenv("LEASEBUS_DLQ_LOOP_CHILD") == "1" {
		debug.SetMaxStack(32 << 20) // crash fast if it recurses
		b, err := broker.New[int]()
		must(t, err)
		defer b.Close()
		must(t, b.CreateTopic("t"))
		s, err := b.Subscribe("t", "s", broker.WithMaxQueue(1), broker.WithDeadLetterTopic("t"))
		if errors.Is(err, queue.ErrInvalidArgument) {
			return // refusing the loop is a fine answer
		}
		must(t, err)
		for i := range 2 {
			if _, err := b.Publish(ctx, "t", i); err != nil && !errors.Is(err, queue.ErrQueueFull) {
				t.Fatal(err)
			}
		}
		balanced(t, s.Stats())
		fmt.Println("CHILD-OK")
		return
	}
	if testing.Short() {
		t.Skip("runs a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadInputDeadLetterTopicLoop$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LEASEBUS_DLQ_LOOP_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHILD-OK") && !strings.Contains(string(out), "PASS") {
		first := strings.SplitN(string(out), "\n", 3)
		knownBugRoot(t, "dead-letter-topic-loop-crash",
			"Subscribe(\"t\", \"s\", WithMaxQueue(1), WithDeadLetterTopic(\"t\")) then two Publishes: the child process died (%v): %s",
			err, strings.Join(first[:min(2, len(first))], " | "))
	}
}
