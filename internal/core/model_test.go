package core

// A reference model of one queue, driven side by side with the real Queue.
//
// The model is deliberately naive: plain slices, linear scans, sorting on
// demand, no heaps, no lanes, no free lists. It implements the semantics the
// doc comments of queue, broker and this package state: priority then
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
//
// This file holds the operations, their decoding, the configurations, the
// clocks and the property; the model is model_reference_test.go's, the
// harness model_harness_test.go's and model_harness_ops_test.go's.

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/leasebus/leasebus/queue"
	"pgregory.net/rapid"
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
	opManage                 // DeleteMessages or MakeVisible of a held message, or of an ID not held
)

var opNames = [...]string{"nop", "offer", "poll", "ack", "ackBatch", "nack", "fail", "reject", "release", "extend", "advance", "setBack", "redrive", "purge", "foreign", "bad", "close", "manage"}

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
	opManage, opManage,
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
	attemptChoices  = []int{1, 2, 3, 5, queue.UnlimitedAttempts, 0}
	visChoices      = []time.Duration{10, time.Second, 0} // 10ns, 1s, the default
	retryChoices    = []queue.RetryPolicy{{}, {Initial: 3, Max: 20, Multiplier: 1.5}, {NoBackoff: true}, {Initial: 4, Max: time.Second, Jitter: 0.5, Rand: func() float64 { return 0.5 }}}
	ttlChoices      = []time.Duration{0, 0, 25, 45 * time.Second}
	maxQueueChoices = []int{1, 2, 3, 5, 8, 0}
	inflightChoices = []int{0, 0, 1, 3}
	keyChoices      = []string{"", "", "a", "b"}
	keyConcChoices  = []int{0, 2, 3} // 0: the default, 1
)

// runConfig is a queue configuration decoded from four bytes.
type runConfig struct {
	cfg  queue.Config
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
		fmt.Sprintf("config:keyConcurrency#%d", int(b[3])/8%len(keyConcChoices)),
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
		{"keyConcurrency", len(keyConcChoices)},
	} {
		for i := range d.n {
			out = append(out, fmt.Sprintf("config:%s#%d", d.name, i))
		}
	}
	return out
}

func decodeConfig(b [configBytes]byte) runConfig {
	return runConfig{
		cfg: queue.Config{
			Name:              "model",
			MaxAttempts:       attemptChoices[int(b[0])%len(attemptChoices)],
			VisibilityTimeout: visChoices[int(b[0])/len(attemptChoices)%len(visChoices)],
			Retry:             retryChoices[int(b[1])%len(retryChoices)],
			TTL:               ttlChoices[int(b[1])/len(retryChoices)%len(ttlChoices)],
			MaxQueue:          maxQueueChoices[int(b[2])%len(maxQueueChoices)],
			MaxInFlight:       inflightChoices[int(b[2])/len(maxQueueChoices)%len(inflightChoices)],
			Overflow:          queue.OverflowPolicy(b[3] % 4),
			KeyConcurrency:    keyConcChoices[int(b[3])/8%len(keyConcChoices)],
		},
		keys: b[3]/4%2 == 1,
	}
}

func (rc runConfig) String() string {
	c := rc.cfg
	return fmt.Sprintf("MaxAttempts=%d Visibility=%v Retry=%+v TTL=%v MaxQueue=%d MaxInFlight=%d Overflow=%v keys=%v KeyConcurrency=%d",
		c.MaxAttempts, c.VisibilityTimeout, queue.RetryPolicy{Initial: c.Retry.Initial, Max: c.Retry.Max, Multiplier: c.Retry.Multiplier, Jitter: c.Retry.Jitter, NoBackoff: c.Retry.NoBackoff},
		c.TTL, c.MaxQueue, c.MaxInFlight, c.Overflow, rc.keys, c.KeyConcurrency)
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

func (d mockDriver) set(t time.Time) { d.Set(t) }

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

// ---------------------------------------------------------------- the property

// drawModelRun draws a queue configuration with the given overflow policy
// and a sequence of 25 to 100 operations, and returns a harness on a fresh
// mock clock with the sequence to run.
func drawModelRun(rt *rapid.T, policy queue.OverflowPolicy) (*harness, []op) {
	var cfg [configBytes]byte
	for i := range cfg {
		cfg[i] = rapid.Byte().Draw(rt, fmt.Sprintf("config%d", i))
	}
	cfg[3] = cfg[3]&^3 | byte(policy)
	seq := rapid.SliceOfN(opGen, 25, 100).Draw(rt, "ops")
	mock := clock.NewMock()
	mock.Set(modelEpoch)
	return newHarness(rt, cfg, mockDriver{mock}), seq
}

// TestQueueModel drives the real queue and the model with random operation
// sequences on a mock clock, one rapid property per overflow policy (each
// with rapid's default 100 checks of 25 to 100 operations).
func TestQueueModel(t *testing.T) {
	var runs, ops int
	cover := map[string]int{}
	for _, policy := range []queue.OverflowPolicy{queue.OverflowDeadLetter, queue.OverflowReject, queue.OverflowBlock, queue.OverflowDropOldest} {
		t.Run(policy.String(), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				h, seq := drawModelRun(rt, policy)
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
	if t.Failed() || testing.Short() {
		// -short runs a fifth of rapid's checks, which do not reach every
		// case; the full run, from a fixed seed (TestMain), must.
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
	"Redrive:nil", "Redrive:Full", "Redrive foreign:nil", "Redrive:overflow letter", "Redrive:expired letter", "Offer:nil", "Offer:left the settle", "Offer:Full", "Offer:Full+Canceled", "Purge:nil", "Close:nil",
	"Poll:nil", "Poll:Canceled", "Poll:Closed", "Ack:Closed",
	"dead letter:max-attempts", "dead letter:expired", "dead letter:overflow", "dead letter:rejected", "dead letter:key continued",
	"delivery:first", "delivery:redelivery", "delivery:after release", "delivery:after redrive",
	"state:held back", "state:delayed", "state:dropped",
	"DeleteMessages:nil", "DeleteMessages:NoMessage", "MakeVisible:nil", "MakeVisible:Invalid", "MakeVisible:NoMessage",
}

var opGen = rapid.Custom(func(t *rapid.T) op {
	return op{
		Kind: rapid.SampledFrom(opTable).Draw(t, "kind"),
		A:    rapid.Byte().Draw(t, "a"),
		B:    rapid.Byte().Draw(t, "b"),
		C:    rapid.Byte().Draw(t, "c"),
	}
})
