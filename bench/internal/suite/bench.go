// Package suite runs the same workloads on leasebus, on the libraries a Go
// user would pick instead, and on two floors (a buffered channel per
// subscription, and the simplest real lease queue), so that leasebus's
// numbers can be read side by side with theirs.
//
// Each implementation is an adapter behind System and Consumer. The
// workloads live in the package's benchmarks (bench_test.go); ../../cmd/benchtable
// runs them and prints one markdown table. See README.md.
package suite

import (
	"context"
	"errors"
	"time"

	"github.com/benbjohnson/clock"
)

// PayloadSize is the size of every message body in every workload.
const PayloadSize = 64

// Setup describes the system a workload needs.
type Setup struct {
	Subs       int           // subscriptions on the one topic (>= 1)
	Capacity   int           // the most messages one subscription holds at once (sizes bounded queues)
	Clock      clock.Clock   // nil: the real clock; set only for leasebus and the lease floor (Expiry)
	Visibility time.Duration // lease / ack deadline; 0: DefaultVisibility
}

// DefaultVisibility is the lease (visibility timeout, ack deadline) of every
// workload but Expiry: long enough that nothing is redelivered.
const DefaultVisibility = time.Minute

// System is one implementation, built for one workload run: a topic with
// Setup.Subs subscriptions.
type System interface {
	// Publish publishes payload to the topic, so that every subscription
	// gets it. It may be called from several goroutines at once.
	Publish(ctx context.Context, payload []byte) error
	// Consumer returns a new consumer on subscription sub. Several
	// consumers on one subscription compete for its messages. A Consumer is
	// used by one goroutine.
	Consumer(sub int) Consumer
	// Close releases everything the system holds.
	Close() error
}

// Consumer receives from one subscription.
type Consumer interface {
	// Take blocks until at least one message is there (or ctx ends), takes
	// up to max of them, calls fn (if not nil) with each payload, then acks
	// each one on its own, and returns how many it took. An implementation
	// without a batch receive takes what its API gives (see Impl.Notes).
	Take(ctx context.Context, max int, fn func([]byte)) (int, error)
}

// Leaser is a Consumer that can lease messages without settling them, for
// the Expiry workload: it leases up to max messages that are visible now
// and returns how many.
type Leaser interface {
	Lease(max int) (int, error)
}

// Prefiller is a System that can load n messages faster than n Publish
// calls (one transaction). Depth and Mem use it to build their backlog,
// outside the timed part.
type Prefiller interface {
	Prefill(ctx context.Context, n int, payload func(i int) []byte) error
}

// HeldBytes is a System whose queued messages live outside the Go heap
// (SQLite pages): it reports the bytes its store uses, for Mem.
type HeldBytes interface {
	HeldBytes() (int64, string, error)
}

// Impl is one implementation under test.
type Impl struct {
	Name    string // the benchmark sub-name: leasebus, mempubsub, watermill, goqite-mem, goqite-wal, chan, leasefloor
	Module  string // what it is, with its version
	Notes   string // how its adapter maps the workloads onto its API
	New     func(Setup) (System, error)
	skip    func(w Workload, short bool) string
	maxMsgs func(w Workload, short bool) int
	once    func(w Workload) bool
	peer    bool // not leasebus, not a floor
}

// Runs returns how many runs of w impl does in one process at most, or 0
// for as many as -count says. The table shows the n of each row. The
// peers are 10 to 1000 times slower than the floors, so they run 3 times
// in full mode and once in short mode (which stays near a minute so); Mem
// barely varies and runs 3 times, or once in short mode; a backlog of 10^6
// that alone takes 10–20 s to build runs once.
func (i Impl) Runs(w Workload, short bool) int {
	n := 0
	limit := func(k int) {
		if n == 0 || k < n {
			n = k
		}
	}
	if i.peer || w.Kind == Memory {
		if short {
			limit(1)
		} else {
			limit(3)
		}
	}
	if i.once != nil && i.once(w) {
		limit(1)
	}
	return n
}

// Skip returns why impl does not run workload w ("" when it does). The
// benchmarks skip with this reason and cmd/benchtable prints it as n/a.
func (i Impl) Skip(w Workload, short bool) string {
	if i.skip == nil {
		return ""
	}
	return i.skip(w, short)
}

// Messages returns how many messages impl's run of w uses: the workload's
// size, unless the implementation is too slow for it within the suite's
// time (a lower count, reported by the benchmark as its msgs metric).
func (i Impl) Messages(w Workload, short bool) int {
	n := w.Size(short)
	if i.maxMsgs != nil {
		if m := i.maxMsgs(w, short); m > 0 && m < n {
			return m
		}
	}
	return n
}

// Impls are the implementations, in table order.
var Impls = []Impl{LeaseBus, LeaseBusPoll, LeaseBusSync, LeaseBusNoSync, MemPubSub, Watermill, GoqiteMem, GoqiteWAL, Chan, LeaseFloor}

// FloorName is the implementation every ratio in the table is taken to.
const FloorName = "leasefloor"

// ErrClosed is returned by the floors after Close.
var ErrClosed = errors.New("bench: closed")

// Workload is one workload (one table row per implementation).
type Workload struct {
	Bench string // the benchmark path before the implementation: W1, Depth/1e5, ...
	Title string // the row's label in the table
	Kind  Kind
	Param int // depth for Depth, subscriptions for Subs
	full  int // messages in full mode
	short int // messages in short mode; 0: full mode only
}

// Kind says how a workload's headline number reads.
type Kind int

// The kinds of workload.
const (
	Throughput Kind = iota // ns per message (delivery)
	Latency                // publish → receive, percentiles
	Memory                 // bytes held per queued message
)

// Size returns the messages (deliveries, round trips) of one run; 0 when
// the workload does not run in short mode.
func (w Workload) Size(short bool) int {
	if short {
		return w.short
	}
	return w.full
}

// The workloads. Sizes are messages for W1, W2 and Depth; deliveries for
// W3, Subs and Expiry; round trips for W4; queued messages for Mem.
var (
	W1   = Workload{Bench: "W1", Title: "W1 publish 100k, then drain (1 consumer, batch 10, ack each)", full: 100_000, short: 20_000}
	W2   = Workload{Bench: "W2", Title: "W2 4 publishers + 4 consumers, 1 subscription, 200k", full: 200_000, short: 40_000}
	W3   = Workload{Bench: "W3", Title: "W3 fan-out 20k × 10 subscriptions = 200k deliveries", Param: 10, full: 200_000, short: 40_000}
	W4   = Workload{Bench: "W4", Title: "W4 publish → receive latency, consumer parked (10k round trips)", Kind: Latency, full: 10_000, short: 2_000}
	D1e3 = Workload{Bench: "Depth/1e3", Title: "Depth 10^3: publish+poll+ack 1 msg", Param: 1_000, full: 100_000, short: 20_000}
	D1e5 = Workload{Bench: "Depth/1e5", Title: "Depth 10^5: publish+poll+ack 1 msg", Param: 100_000, full: 100_000, short: 20_000}
	D1e6 = Workload{Bench: "Depth/1e6", Title: "Depth 10^6: publish+poll+ack 1 msg", Param: 1_000_000, full: 100_000}
	Exp  = Workload{Bench: "Expiry", Title: "Expiry: 10^5 leases expire, redeliver + ack all", Param: 100_000, full: 100_000, short: 100_000}
	S1   = Workload{Bench: "Subs/1", Title: "Subs 1: publish, poll+ack on every subscription", Param: 1, full: 100_000, short: 20_000}
	S10  = Workload{Bench: "Subs/10", Title: "Subs 10: publish, poll+ack on every subscription", Param: 10, full: 100_000, short: 20_000}
	S100 = Workload{Bench: "Subs/100", Title: "Subs 100: publish, poll+ack on every subscription", Param: 100, full: 100_000, short: 20_000}
	Mem  = Workload{Bench: "Mem", Title: "Mem: bytes held per queued message (depth 10^5)", Kind: Memory, Param: 100_000, full: 100_000, short: 100_000}
)

// Workloads are the workloads, in table order.
var Workloads = []Workload{W1, W2, W3, W4, D1e3, D1e5, D1e6, Exp, S1, S10, S100, Mem}
