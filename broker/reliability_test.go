package broker_test

// Concurrency stress on the real clock: nothing is lost, duplicated or
// stuck, and the broker's lifecycle calls race safely with everything else.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// stressSub is one subscription under stress and what its consumers saw.
type stressSub struct {
	name        string
	s           *broker.Subscription[int]
	maxAttempts int
	redrive     bool // dead letters are redriven (once each) while consumers run

	mu        sync.Mutex  // guards acked, redriven and latest
	acked     map[int]int // successful Acks per message
	redriven  map[int]bool
	latest    map[uint64]uint32 // the latest delivery seen of each hold (lease Seq)
	delivered atomic.Int64
	settled   atomic.Bool // all published, nothing held: the consumers may stop
}

// TestStressNothingLostOrDuplicated runs publishers and consumers that ack,
// nack, fail, reject, extend, release, ack late or abandon their leases at
// random, with 30 ms visibility timeouts on the real clock, and dead
// letters redriven while it runs. When everything has settled (bounded by
// a context deadline) every published message was acked or dead-lettered
// exactly once (or, where the user chose drop-oldest, counted as dropped),
// each subscription's counters add up, and no goroutine is left.
func TestStressNothingLostOrDuplicated(t *testing.T) {
	const (
		visibility   = 30 * time.Millisecond
		publishers   = 4
		perPublisher = 500
		consumers    = 3 // per subscription
		total        = publishers * perPublisher
	)
	b, err := broker.New[int](broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(visibility)))
	must(t, err)
	defer b.Close()
	must(t, b.CreateTopic("stress"))
	retry := broker.WithRetry(queue.RetryPolicy{Initial: time.Millisecond, Max: 4 * time.Millisecond})
	work, err := b.Subscribe("stress", "work", broker.WithMaxAttempts(4), retry)
	must(t, err)
	bounded, err := b.Subscribe("stress", "bounded", broker.WithMaxAttempts(3), retry,
		broker.WithMaxQueue(200), broker.WithOverflow(queue.OverflowDropOldest), broker.WithDefaultTTL(400*time.Millisecond),
		broker.WithMaxInFlight(16))
	must(t, err)
	subs := []*stressSub{
		{name: "work", s: work, maxAttempts: 4, redrive: true},
		{name: "bounded", s: bounded, maxAttempts: 3},
	}
	for _, ss := range subs {
		ss.acked = make(map[int]int)
		ss.redriven = make(map[int]bool)
		ss.latest = make(map[uint64]uint32)
	}

	deadline, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var published atomic.Bool
	var redriveMu sync.Mutex // a redrive and the "all settled" decision exclude each other
	var redrives atomic.Int64

	// done reports whether ss has settled: everything published and nothing
	// held any more (the checks at the end say whether it all adds up). Once
	// settled, nothing is redriven to it.
	done := func(ss *stressSub) bool {
		if !published.Load() {
			return false
		}
		redriveMu.Lock()
		defer redriveMu.Unlock()
		if st := ss.s.Stats(); st.Visible+st.Delayed+st.InFlight+st.HeldBack == 0 {
			ss.settled.Store(true)
		}
		return ss.settled.Load()
	}

	redriveSome := func(ss *stressSub) {
		redriveMu.Lock()
		defer redriveMu.Unlock()
		if ss.settled.Load() {
			return
		}
		n, err := b.Redrive(func(dl queue.DeadLetter[int]) bool {
			if dl.Subscription != ss.name {
				return false
			}
			ss.mu.Lock()
			defer ss.mu.Unlock()
			if ss.redriven[dl.Message.Payload] {
				return false
			}
			ss.redriven[dl.Message.Payload] = true
			return true
		})
		if err != nil {
			t.Errorf("redrive: %v", err)
		}
		redrives.Add(int64(n))
	}

	// settleErr accepts what a consumer may legitimately see from a lease
	// that expired meanwhile (another consumer may hold it, or it is gone).
	settleErr := func(op string, err error) {
		if err != nil && !errors.Is(err, queue.ErrLeaseExpired) && !errors.Is(err, queue.ErrLeaseNotFound) {
			t.Errorf("%s: %v", op, err)
		}
	}

	consume := func(ss *stressSub, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var late []queue.Delivery[int] // held to be acked late
		ack := func(d queue.Delivery[int]) {
			ss.mu.Lock()
			superseded := ss.latest[d.LeaseID.Seq()] > d.LeaseID.Delivery() // delivered again before this Ack began
			ss.mu.Unlock()
			err := ss.s.Ack(d.LeaseID)
			settleErr("ack", err)
			if err == nil && superseded {
				t.Errorf("%s: Ack of lease %v succeeded after its message was delivered again", ss.name, d.LeaseID)
			}
			if err == nil {
				ss.mu.Lock()
				ss.acked[d.Payload]++
				ss.mu.Unlock()
				if rng.IntN(5) == 0 { // a second Ack of the same lease finds nothing
					if err := ss.s.Ack(d.LeaseID); !errors.Is(err, queue.ErrLeaseNotFound) {
						t.Errorf("second ack of msg %d: %v, want ErrLeaseNotFound", d.Payload, err)
					}
				}
			}
		}
		for !done(ss) {
			if deadline.Err() != nil {
				return
			}
			pctx, pcancel := context.WithTimeout(deadline, 4*visibility) // a bounded wait, so done() is looked at again
			ds, err := ss.s.Poll(pctx, 1+rng.IntN(4))
			pcancel()
			ss.mu.Lock()
			for _, d := range ds {
				ss.latest[d.LeaseID.Seq()] = max(ss.latest[d.LeaseID.Seq()], d.LeaseID.Delivery())
			}
			ss.mu.Unlock()
			for _, d := range late {
				ack(d) // late, after a Poll: it may have expired and been redelivered (ErrLeaseExpired) or dead-lettered
			}
			late = late[:0]
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("poll %s: %v", ss.name, err)
					return
				}
				continue
			}
			for _, d := range ds {
				ss.delivered.Add(1)
				if d.Attempt < 1 || d.Attempt > ss.maxAttempts {
					t.Errorf("%s: msg %d delivered with Attempt %d (MaxAttempts %d)", ss.name, d.Payload, d.Attempt, ss.maxAttempts)
				}
				switch r := rng.IntN(100); {
				case r < 40:
					ack(d)
				case r < 50:
					settleErr("nack", ss.s.Nack(d.LeaseID, time.Duration(rng.IntN(3))*time.Millisecond))
				case r < 60:
					settleErr("fail", ss.s.Fail(d.LeaseID, fmt.Errorf("attempt %d failed", d.Attempt)))
				case r < 64:
					settleErr("reject", ss.s.Reject(d.LeaseID, errors.New("poison")))
					if ss.redrive {
						redriveSome(ss)
					}
				case r < 72:
					if err := ss.s.Extend(d.LeaseID, visibility); err == nil {
						ack(d)
					} else {
						settleErr("extend", err)
					}
				case r < 80:
					settleErr("release", ss.s.Release(d.LeaseID))
				case r < 88:
					late = append(late, d)
				default: // abandon: the lease expires
				}
			}
		}
	}

	var wg sync.WaitGroup
	for i, ss := range subs {
		for c := range consumers {
			wg.Go(func() { consume(ss, uint64(i*consumers+c)) })
		}
	}
	var pubs sync.WaitGroup
	for p := range publishers {
		pubs.Go(func() {
			for i := range perPublisher {
				id := p*perPublisher + i
				var opts []broker.PublishOption
				if id%5 == 0 {
					opts = append(opts, broker.WithKey(fmt.Sprintf("k%d", id%3)))
				}
				if id%7 == 0 {
					opts = append(opts, broker.WithPriority(queue.PriorityHigh))
				}
				if _, err := b.Publish(deadline, "stress", id, opts...); err != nil {
					t.Errorf("publish %d: %v", id, err)
				}
			}
		})
	}
	pubs.Wait()
	published.Store(true)
	waitAll(t, deadline, &wg, "consumers did not drain")

	dead := b.DeadLetters()
	deadBy := map[string]map[int]int{}
	for _, dl := range dead {
		if deadBy[dl.Subscription] == nil {
			deadBy[dl.Subscription] = map[int]int{}
		}
		deadBy[dl.Subscription][dl.Message.Payload]++
		switch dl.Reason {
		case queue.ReasonMaxAttempts, queue.ReasonRejected, queue.ReasonExpired:
		default:
			t.Errorf("dead letter of msg %d on %s: reason %v", dl.Message.Payload, dl.Subscription, dl.Reason)
		}
	}
	for _, ss := range subs {
		st := ss.s.Stats()
		t.Logf("%s: %+v", ss.name, st)
		balanced(t, st)
		var lost, twice []int
		acks, deads := 0, 0
		for id := range total {
			a, d := ss.acked[id], deadBy[ss.name][id]
			acks += a
			deads += d
			switch {
			case a+d > 1:
				twice = append(twice, id)
			case a+d == 0:
				lost = append(lost, id)
			}
		}
		if len(twice) > 0 {
			t.Errorf("%s: %d messages acked or dead-lettered more than once, e.g. %v", ss.name, len(twice), twice[:min(5, len(twice))])
		}
		if uint64(len(lost)) != st.Dropped { // only drop-oldest may lose messages, and it counts them
			t.Errorf("%s: %d messages neither acked nor dead-lettered (e.g. %v), but Dropped = %d", ss.name, len(lost), lost[:min(5, len(lost))], st.Dropped)
		}
		if st.Published != total || st.Acked != uint64(acks) || st.DeadLettered != uint64(deads)+st.Redriven || st.Delivered != uint64(ss.delivered.Load()) {
			t.Errorf("%s: counters %+v disagree with what the consumers saw: acked %d, dead letters held %d, deliveries %d",
				ss.name, st, acks, deads, ss.delivered.Load())
		}
	}
	t.Logf("%d messages × %d subscriptions; %d dead letters held, %d redriven", total, len(subs), len(dead), redrives.Load())
	if redrives.Load() == 0 || subs[1].s.Stats().Dropped == 0 && subs[1].s.Stats().DeadLettered == 0 {
		t.Errorf("the stress did not exercise redrive (%d) or the bounded subscription (%+v)", redrives.Load(), subs[1].s.Stats())
	}
	must(t, b.Close())
	goleak.VerifyNone(t)
}

// waitAll waits for wg, failing the test with every goroutine's stack if
// ctx ends first.
func waitAll(t *testing.T, ctx context.Context, wg *sync.WaitGroup, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() {
		wg.Wait()
		close(ch)
	}()
	select {
	case <-ch:
	case <-ctx.Done():
		var sb strings.Builder
		pprof.Lookup("goroutine").WriteTo(&sb, 1)
		t.Fatalf("%s before the deadline: %v\n%s", what, ctx.Err(), sb.String())
	}
}

// TestLifecycleRace races Close, DeleteTopic, Unsubscribe, CreateTopic and
// Subscribe against Poll, Publish (some blocked on a full OverflowBlock
// subscription), Ack, Nack, Release and AwaitParked from many goroutines:
// nothing panics, every error is one the docs allow, and once the broker
// is closed every blocked call returns.
func TestLifecycleRace(t *testing.T) {
	b, err := broker.New[int](broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(20 * time.Millisecond)))
	must(t, err)
	defer b.Close()
	topics := []string{"life.a", "life.b"}
	names := []string{"s1", "s2"}
	subOpts := func(name string) []broker.SubscribeOption {
		if name == "s2" { // tiny and blocking: publishers wait on it
			return []broker.SubscribeOption{broker.WithMaxQueue(2), broker.WithOverflow(queue.OverflowBlock)}
		}
		return nil
	}
	for _, tp := range topics {
		must(t, b.CreateTopic(tp))
		for _, n := range names {
			_, err := b.Subscribe(tp, n, subOpts(n)...)
			must(t, err)
		}
	}
	_, err = b.Subscribe("life.*", "wild")
	must(t, err)

	deadline, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var closed atomic.Bool
	allowed := func(op string, err error, ok ...error) {
		if err == nil {
			return
		}
		for _, e := range append(ok, queue.ErrClosed) {
			if errors.Is(err, e) {
				return
			}
		}
		t.Errorf("%s: unexpected error %v", op, err)
	}
	pick := func(rng *rand.Rand) (string, string) {
		if rng.IntN(5) == 0 {
			return "life.*", "wild"
		}
		return topics[rng.IntN(len(topics))], names[rng.IntN(len(names))]
	}
	var calls atomic.Int64

	var wg sync.WaitGroup
	for i := range 4 { // publishers
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for n := 0; ; n++ {
				_, err := b.Publish(deadline, topics[rng.IntN(len(topics))], n)
				calls.Add(1)
				if errors.Is(err, queue.ErrClosed) && closed.Load() {
					return
				}
				allowed("publish", err, broker.ErrTopicNotFound)
				if deadline.Err() != nil {
					return
				}
			}
		})
	}
	for i := range 6 { // pollers that settle what they get
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			for deadline.Err() == nil {
				tp, n := pick(rng)
				s, err := b.Subscription(tp, n)
				calls.Add(1)
				if err != nil {
					if errors.Is(err, queue.ErrClosed) {
						return
					}
					allowed("subscription", err, broker.ErrTopicNotFound, broker.ErrSubscriptionNotFound)
					runtime.Gosched()
					continue
				}
				ds, err := s.Poll(deadline, 1+rng.IntN(3))
				calls.Add(1)
				allowed("poll", err, context.DeadlineExceeded)
				for _, d := range ds {
					switch rng.IntN(4) {
					case 0:
						allowed("ack", s.Ack(d.LeaseID), queue.ErrLeaseExpired, queue.ErrLeaseNotFound)
					case 1:
						allowed("nack", s.Nack(d.LeaseID, 0), queue.ErrLeaseExpired, queue.ErrLeaseNotFound)
					case 2:
						allowed("release", s.Release(d.LeaseID), queue.ErrLeaseExpired, queue.ErrLeaseNotFound)
					} // else abandon
				}
			}
		})
	}
	for i := range 2 { // waiters on parked pollers
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			for deadline.Err() == nil {
				tp, n := pick(rng)
				s, err := b.Subscription(tp, n)
				if err != nil {
					if errors.Is(err, queue.ErrClosed) {
						return
					}
					runtime.Gosched()
					continue
				}
				allowed("await parked", s.AwaitParked(deadline, 1000), context.DeadlineExceeded)
				calls.Add(1)
			}
		})
	}
	var churn sync.WaitGroup
	for i := range 2 { // lifecycle churn
		churn.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 4))
			for range 5000 { // no Gosched: on one CPU the spinning workers would starve the churn
				tp, n := pick(rng)
				var err error
				switch rng.IntN(4) {
				case 0:
					if tp != "life.*" {
						err = b.DeleteTopic(tp)
					}
				case 1:
					if tp != "life.*" {
						err = b.CreateTopic(tp)
					}
				case 2:
					_, err = b.Subscribe(tp, n, subOpts(n)...)
				default:
					err = b.Unsubscribe(tp, n)
				}
				calls.Add(1)
				allowed("churn", err, broker.ErrTopicNotFound, broker.ErrSubscriptionNotFound, broker.ErrAlreadySubscribed)
				if deadline.Err() != nil {
					return
				}
			}
		})
	}
	churn.Wait()
	closed.Store(true)
	var closers sync.WaitGroup
	for range 2 { // Close twice, concurrently
		closers.Go(func() { allowed("close", b.Close()) })
	}
	closers.Wait()
	waitAll(t, deadline, &wg, "blocked calls did not return after Close")
	t.Logf("%d calls raced with the lifecycle", calls.Load())
	goleak.VerifyNone(t)
}

// TestFullDeadLetterTopicNeverStallsAConsumer: a consumer whose Nack, Fail,
// Reject or expiring lease dead-letters a message into a dead-letter topic
// whose subscription is full and blocking must not be stalled by it (those
// calls take no context); the dead letter goes to the broker's store. Run
// in a synctest bubble, so "stalled" means durably blocked, not slow.
func TestFullDeadLetterTopicNeverStallsAConsumer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := broker.New[int](broker.WithClock(clock.New()), broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Minute)))
		must(t, err)
		defer b.Close()
		must(t, b.CreateTopic("t"))
		must(t, b.CreateTopic("dlq"))
		dlq, err := b.Subscribe("dlq", "d", broker.WithMaxQueue(1), broker.WithOverflow(queue.OverflowBlock))
		must(t, err)
		s, err := b.Subscribe("t", "s", broker.WithMaxAttempts(1), broker.WithDeadLetterTopic("dlq"))
		must(t, err)
		for i := range 5 {
			_, err := b.Publish(ctx, "t", i)
			must(t, err)
		}
		ds := s.TryPoll(5)
		if len(ds) != 5 {
			t.Fatalf("polled %d", len(ds))
		}
		settles := []func() error{
			func() error { return s.Nack(ds[0].LeaseID, 0) }, // fills the dead-letter topic
			func() error { return s.Nack(ds[1].LeaseID, 0) },
			func() error { return s.Fail(ds[2].LeaseID, errors.New("x")) },
			func() error { return s.Reject(ds[3].LeaseID, nil) },
			func() error { _ = s.Stats(); _ = b.DeadLetters(); return nil }, // ds[4]'s lease has expired
		}
		for i, call := range settles {
			if i == len(settles)-1 {
				time.Sleep(time.Minute) // bubble time: everything else is blocked, so the clock jumps
			}
			done := make(chan error, 1)
			go func() { done <- call() }()
			synctest.Wait()
			select {
			case err := <-done:
				must(t, err)
			default:
				t.Fatalf("call %d is stalled by the full dead-letter topic", i)
			}
		}
		if st := dlq.Stats(); st.Visible != 1 {
			t.Errorf("dead-letter topic subscription: %+v, want the first dead letter", st)
		}
		if n := len(b.DeadLetters()); n != 4 {
			t.Errorf("%d dead letters in the store, want the 4 the full topic refused", n)
		}
		balanced(t, s.Stats())
	})
}
