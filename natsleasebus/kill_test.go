package natsleasebus_test

// A real nats-server process, built from the version this module
// requires, killed with SIGKILL under a worker pool and started again on
// its directory. What must hold, whatever the server's sync setting:
// nothing confirmed is lost (every job is acked in the end), and no
// receipt names two deliveries. With `sync_interval: always` a confirmed
// ack must also never come back.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// natsServerBinary returns a nats-server built from the version go.mod
// requires: $NATS_SERVER if set (.ci/run builds it once), else one built
// now into a temporary directory.
func natsServerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NATS_SERVER"); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	return bin
}

// serverProcess is a nats-server process with JetStream on its own
// directory, on loopback.
type serverProcess struct {
	bin, dir, conf string
	name           string
	port           int
	cmd            *exec.Cmd
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// newServerProcesses configures n servers (n > 1: a cluster of n, whose
// streams take WithReplicas(n)), syncing every write if syncAlways.
func newServerProcesses(t *testing.T, bin string, n int, syncAlways bool) []*serverProcess {
	t.Helper()
	routes := make([]int, n)
	for i := range routes {
		routes[i] = freePort(t)
	}
	var ps []*serverProcess
	for i := range n {
		p := &serverProcess{bin: bin, dir: t.TempDir(), port: freePort(t), name: fmt.Sprintf("n%d", i+1)}
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n", p.name, p.port, filepath.Join(p.dir, "js"))
		if syncAlways {
			conf += "  sync_interval: always\n"
		}
		conf += "}\n"
		if n > 1 {
			var rs []string
			for j, r := range routes {
				if j != i {
					rs = append(rs, fmt.Sprintf("nats-route://127.0.0.1:%d", r))
				}
			}
			conf += fmt.Sprintf("cluster {\n  name: kill\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", routes[i], strings.Join(rs, ", "))
		}
		p.conf = filepath.Join(p.dir, "server.conf")
		if err := os.WriteFile(p.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.kill)
		ps = append(ps, p)
	}
	return ps
}

// startAll starts the processes together (a cluster node waits for its
// routes before it is ready) and returns once every one is ready for
// clients.
func startAll(t *testing.T, ps ...*serverProcess) {
	t.Helper()
	ready := make(chan error, len(ps))
	for _, p := range ps {
		p.cmd = exec.Command(p.bin, "-c", p.conf)
		stderr, err := p.cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stderr)
			said := false
			for sc.Scan() {
				if !said && strings.Contains(sc.Text(), "Server is ready") {
					said = true
					ready <- nil
				}
			}
			if !said {
				ready <- fmt.Errorf("nats-server %s exited before it was ready", p.name)
			}
		}()
	}
	for range ps {
		select {
		case err := <-ready:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(hangGuard):
			t.Fatal("nats-server not ready")
		}
	}
}

// kill kills the process with SIGKILL and waits for it to exit.
func (p *serverProcess) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.cmd = nil
}

// seen is one handling or confirmed ack: when (a step of the run) and at
// which attempt.
type seen struct{ step, attempt int }

// killRun is what one run saw.
type killRun struct {
	mu        sync.Mutex
	step      int                 // orders every handling and every confirmed ack
	handled   map[string][]seen   // job → each handling
	confirmed map[string]seen     // job → its first confirmed ack
	receipts  map[lease.ID]string // every receipt handed out → its job
	repeated  []string            // receipts handed out twice
	acks      chan struct{}       // a signal per confirmed ack
	killed    string              // the server killed
}

// TestKilledServer runs a pool against nats-server processes and kills
// one with SIGKILL a third of the way through. On one server (any sync
// setting) a confirmed ack may come back: the server writes a consumer's
// acks about ten times a second, after it has answered them, so the run
// only counts those. In a cluster of three with replicas 3 the server
// answers an ack once a quorum has it: killing the consumer's leader must
// bring back none.
func TestKilledServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nats-server processes")
	}
	bin := natsServerBinary(t)
	for _, tc := range []struct {
		name       string
		servers    int
		syncAlways bool
		strongest  bool // the documented setting under which no confirmed ack comes back
	}{
		{"R1", 1, false, false},
		{"R1-sync-always", 1, true, false},
		{"R3-sync-always", 3, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const jobs = 3000
			start := time.Now()
			r := killedRun(t, newServerProcesses(t, bin, tc.servers, tc.syncAlways), jobs)
			if len(r.confirmed) != jobs {
				t.Fatalf("%d of %d jobs confirmed acked", len(r.confirmed), jobs)
			}
			if len(r.repeated) > 0 {
				t.Fatalf("%d receipts named two deliveries, e.g. %s", len(r.repeated), r.repeated[0])
			}
			// A job handled again after its ack was confirmed either came
			// back (the server forgot the ack, and with it the delivery:
			// the attempt is not higher than the acked one) or raced it (a
			// delivery the server had already made again when the ack
			// arrived, its lease having expired during the outage: a later
			// attempt, the at-least-once race of every late ack).
			forgot, raced, handlings := 0, 0, 0
			for job, hs := range r.handled {
				handlings += len(hs)
				ack := r.confirmed[job]
				for _, h := range hs {
					if h.step > ack.step {
						if h.attempt <= ack.attempt {
							forgot++
						} else {
							raced++
						}
						break
					}
				}
			}
			t.Logf("%s: killed %s; %d jobs, %d handlings; after a confirmed ack, %d came back forgotten, %d raced it; %v",
				tc.name, r.killed, jobs, handlings, forgot, raced, time.Since(start).Round(100*time.Millisecond))
			if tc.strongest && forgot > 0 {
				t.Fatalf("%d confirmed acks were forgotten after SIGKILL", forgot)
			}
		})
	}
}

// killedRun publishes jobs to the servers while a pool of 8 workers
// handles them, kills one server with SIGKILL once a third are confirmed
// (the consumer's leader, in a cluster), starts it again, and returns
// once every job is confirmed and the consumer holds nothing.
func killedRun(t *testing.T, ps []*serverProcess, jobs int) *killRun {
	var urls []string
	for _, p := range ps {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p.port))
	}
	startAll(t, ps...)
	nc, err := nats.Connect(strings.Join(urls, ","),
		nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.Timeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*hangGuard)
	defer cancel()
	var bus *natsleasebus.Bus
	for { // a cluster answers once it has elected its meta leader
		octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
		bus, err = natsleasebus.Open(octx, nc, natsleasebus.WithReplicas(len(ps)))
		ocancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("open: %v", err)
		}
	}
	var sub *natsleasebus.Subscription[string]
	for {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		sub, err = natsleasebus.Subscribe[string](sctx, bus, "jobs", "workers",
			natsleasebus.WithVisibilityTimeout(2*time.Second), natsleasebus.WithMaxAttempts(queue.UnlimitedAttempts),
			natsleasebus.WithPollSlice(50*time.Millisecond))
		scancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("subscribe: %v", err)
		}
	}
	defer sub.Close()

	r := &killRun{handled: map[string][]seen{}, confirmed: map[string]seen{}, receipts: map[lease.ID]string{}, acks: make(chan struct{}, jobs*4)}
	pool, err := poller.New(sub, func(_ context.Context, d queue.Delivery[string]) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.step++
		r.handled[d.Payload] = append(r.handled[d.Payload], seen{r.step, d.Attempt})
		if prev, ok := r.receipts[d.LeaseID]; ok {
			r.repeated = append(r.repeated, fmt.Sprintf("%v (%s, then %s)", d.LeaseID, prev, d.Payload))
		}
		r.receipts[d.LeaseID] = d.Payload
		return nil
	}, poller.WithWorkers(8), poller.WithObserver(func(e poller.Event[string]) {
		// An Ack whose answer a killed server never sent is reported
		// refused, yet may have taken effect: the job is never delivered
		// again. Both count as the pool's ack here, as the check below
		// expects (a refused one the server did not keep comes back, and
		// counts as raced).
		if e.Outcome != poller.OutcomeAcked && (e.Outcome != poller.OutcomeSettleFailed || e.Err != nil) {
			return
		}
		r.mu.Lock()
		r.step++
		if _, ok := r.confirmed[e.Delivery.Payload]; !ok {
			r.confirmed[e.Delivery.Payload] = seen{r.step, e.Delivery.Attempt}
		}
		r.mu.Unlock()
		r.acks <- struct{}{}
	}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- pool.Run(runCtx) }()
	defer func() {
		stop()
		<-ran
	}()

	// The publisher: batches of 100 with a dedup ID per job, each tried
	// until it is confirmed (the dedup IDs make a retry queue nothing
	// twice).
	published := make(chan error, 1)
	go func() {
		for first := 0; first < jobs; first += 100 {
			var payloads, ids []string
			for i := first; i < min(first+100, jobs); i++ {
				payloads = append(payloads, "job-"+strconv.Itoa(i))
				ids = append(ids, "job-"+strconv.Itoa(i))
			}
			for {
				if _, err := natsleasebus.PublishBatch(ctx, bus, "jobs", payloads, queue.WithDedupIDs(ids)); err == nil {
					break
				} else if ctx.Err() != nil {
					published <- err
					return
				}
			}
		}
		published <- nil
	}()

	// Kill it once a third of the jobs are confirmed: a scheduled event,
	// not a timed one.
	for range jobs / 3 {
		select {
		case <-r.acks:
		case <-ctx.Done():
			t.Fatal("a third of the jobs were not confirmed")
		}
	}
	victim := ps[0]
	if len(ps) > 1 {
		info, err := sub.Consumer().Info(ctx)
		if err != nil || info.Cluster == nil {
			t.Fatalf("consumer info: %v", err)
		}
		for _, p := range ps {
			if p.name == info.Cluster.Leader {
				victim = p
			}
		}
	}
	r.killed = victim.name
	victim.kill()
	startAll(t, victim)

	if err := <-published; err != nil {
		t.Fatalf("publish: %v", err)
	}
	for {
		r.mu.Lock()
		done := len(r.confirmed) == jobs
		r.mu.Unlock()
		if done {
			info, err := sub.Consumer().Info(ctx)
			if err == nil && info.NumAckPending == 0 && info.NumPending == 0 {
				return r // nothing left that could come back
			}
		}
		select {
		case <-r.acks:
		case <-time.After(100 * time.Millisecond): // a redelivery needs no ack to be due: look again
		case <-ctx.Done():
			t.Fatalf("%d of %d jobs confirmed when the wait ended", len(r.confirmed), jobs)
		}
	}
}
