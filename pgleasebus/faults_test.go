package pgleasebus_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// The fault tests' commands: shell commands that stop the test server
// at once (pg_ctl stop -m immediate) and start it again. .ci/run sets
// them for the cluster it starts.
const (
	stopEnv  = "LEASEBUS_TEST_PG_STOP"
	startEnv = "LEASEBUS_TEST_PG_START"
)

// childEnv makes the test binary a worker process of
// TestWorkerKilledMidLease: "url schema clock-ns acks".
const childEnv = "LEASEBUS_TEST_PG_WORKER"

// worker is the child process: it leases what it can on the clock it is
// given, prints each lease, acks the first acks of them, prints each ack
// once it returned, then holds the rest until it is killed.
func worker(arg string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	f := strings.Fields(arg)
	if len(f) != 4 {
		fail(fmt.Errorf("worker: %q", arg))
	}
	ns, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		fail(err)
	}
	acks, err := strconv.Atoi(f[3])
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, f[0])
	if err != nil {
		fail(err)
	}
	clk := clock.NewMock()
	clk.Set(time.Unix(0, ns))
	bus, err := pgleasebus.Open(ctx, pool, pgleasebus.WithClock(clk), pgleasebus.WithSchema(f[1]), pgleasebus.WithoutListen())
	if err != nil {
		fail(err)
	}
	sub, err := pgleasebus.Subscribe(ctx, bus, "jobs", "workers", queue.StringCodec())
	if err != nil {
		fail(err)
	}
	ds, err := sub.Poll(ctx, 100)
	if err != nil {
		fail(err)
	}
	for _, d := range ds {
		fmt.Printf("LEASED %s %d %d\n", d.Payload, d.Attempt, d.Deadline.UnixNano())
	}
	for _, d := range ds[:min(acks, len(ds))] {
		if err := sub.Ack(d.LeaseID); err != nil {
			fail(err)
		}
		fmt.Printf("ACKED %s\n", d.Payload)
	}
	fmt.Println("HOLDING")
	select {}
}

// runWorker runs a worker process at clock now that acks acks of its
// leases, kills it with SIGKILL once it holds the rest, and returns its
// leases (payload → attempt), its deadline and what it acked.
func runWorker(t *testing.T, e *env, now time.Time, acks int) (leased map[string]int, deadline time.Time, acked []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerKilledMidLease$")
	cmd.Env = append(os.Environ(), childEnv+"="+fmt.Sprintf("%s %s %d %d", pgURL(t), e.bus.Schema(), now.UnixNano(), acks))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	leased = map[string]int{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && f[0] == "LEASED":
			attempt, _ := strconv.Atoi(f[2])
			ns, _ := strconv.ParseInt(f[3], 10, 64)
			leased[f[1]], deadline = attempt, time.Unix(0, ns)
		case len(f) == 2 && f[0] == "ACKED":
			acked = append(acked, f[1])
		case len(f) == 1 && f[0] == "HOLDING":
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("worker: %v; stderr: %s", err, stderr.String())
	}
	return leased, deadline, acked
}

// A worker process SIGKILLed while it holds leases: each message comes
// back at its lease's deadline, to the nanosecond, with its attempt
// counted; what it acked before it died never comes back.
func TestWorkerKilledMidLease(t *testing.T) {
	if arg := os.Getenv(childEnv); arg != "" {
		worker(arg)
		return
	}
	e := newEnv(t)
	ctx := bounded(t)
	sub, pub := topicSub(t, e, "jobs", "workers", pgleasebus.WithVisibilityTimeout(30*time.Second))
	const n = 10
	for i := range n {
		if _, err := pub.Publish(ctx, "jobs", fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The first worker leases all ten and dies holding them.
	leased, deadline, _ := runWorker(t, e, e.clk.Now(), 0)
	if len(leased) != n {
		t.Fatalf("the first worker leased %v", leased)
	}
	e.clk.Set(deadline.Add(-time.Nanosecond))
	if ds := sub.TryPoll(n); len(ds) != 0 {
		t.Fatalf("a nanosecond before the deadline: leased %v", payloads(ds))
	}
	// The second leases them again at their deadline, attempt 2; it acks
	// four, and dies holding six.
	leased, deadline2, acked := runWorker(t, e, deadline, 4)
	if len(leased) != n || len(acked) != 4 {
		t.Fatalf("the second worker leased %v, acked %v", leased, acked)
	}
	for p, a := range leased {
		if a != 2 {
			t.Fatalf("%s redelivered as attempt %d, want 2", p, a)
		}
	}
	e.clk.Set(deadline2)
	ds, err := sub.Poll(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range ds {
		seen[d.Payload] = true
		if d.Attempt != 3 {
			t.Errorf("%s: attempt %d, want 3", d.Payload, d.Attempt)
		}
		if err := sub.Ack(d.LeaseID); err != nil {
			t.Fatal(err)
		}
	}
	dupAfterAck, lost := 0, 0
	for _, p := range acked {
		if seen[p] {
			dupAfterAck++
		}
		seen[p] = true
	}
	for i := range n {
		if !seen[fmt.Sprintf("m%d", i)] {
			lost++
		}
	}
	t.Logf("messages lost: %d; delivered again after an ack: %d", lost, dupAfterAck)
	if lost != 0 || dupAfterAck != 0 || len(ds) != n-len(acked) {
		t.Fatalf("after two workers died: %d redelivered, %d lost, %d delivered again after an ack", len(ds), lost, dupAfterAck)
	}
}

// backendPID waits for a backend of the pool's database that waits on a
// lock in a statement that contains stmt (in its first kilobyte, what
// pg_stat_activity keeps), and returns its process ID.
func backendPID(t *testing.T, pool *pgxpool.Pool, stmt string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var pid int
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0 LIMIT 1`, stmt).Scan(&pid)
		if err == nil {
			return pid
		}
		if ctx.Err() != nil {
			rows, _ := pool.Query(context.Background(), `SELECT coalesce(wait_event_type, '') || ' ' || state || ' ' || left(query, 80) FROM pg_stat_activity WHERE backend_type = 'client backend'`)
			var seen []string
			for rows.Next() {
				var l string
				rows.Scan(&l)
				seen = append(seen, l)
			}
			rows.Close()
			t.Fatalf("no backend waits in %q: %q", stmt, seen)
		}
		time.Sleep(time.Millisecond) // a look at the server's view each millisecond, bounded by ctx
	}
}

// A connection terminated (pg_terminate_backend) in the middle of an Ack
// and in the middle of a Poll, each held in the server on a lock the test
// takes: the Ack is sent again on another connection and acks; the Poll
// returns the error, leases nothing, and the next one leases the message
// as its first attempt.
func TestConnectionKilledMidPollAndMidAck(t *testing.T) {
	e := newEnv(t)
	ctx := bounded(t)
	sub, pub := topicSub(t, e, "orders", "billing")
	m, err := pub.Publish(ctx, "orders", "m")
	if err != nil {
		t.Fatal(err)
	}
	admin := newPool(t)
	table := e.bus.Schema() + ".messages"

	// Mid-poll: the messages table locked, the Poll's lease waits on it.
	lock, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Rollback(context.Background()) }) // a failure lets go of the lock, and the Poll
	if _, err := lock.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() {
		ds, err := sub.Poll(ctx, 1)
		if err == nil {
			err = fmt.Errorf("leased %v", payloads(ds))
		}
		polled <- err
	}()
	pid := backendPID(t, admin, "WITH cand AS (") // the lease (the view keeps only a statement's start)
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1, 10000)", pid); err != nil {
		t.Fatal(err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-polled; err == nil || errors.Is(err, context.DeadlineExceeded) || strings.HasPrefix(err.Error(), "leased") {
		t.Fatalf("a Poll whose connection was terminated: %v", err)
	}
	ds, err := sub.Poll(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].Attempt != 1 || ds[0].Message.ID != m.ID {
		t.Fatalf("the Poll after: %+v, %v", ds, err)
	}

	// Mid-ack: the message's row locked, the Ack's DELETE waits on it.
	lock, err = admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Rollback(context.Background()) })
	if _, err := lock.Exec(ctx, "SELECT 1 FROM "+table+" WHERE id = $1 FOR UPDATE", m.ID); err != nil {
		t.Fatal(err)
	}
	acked := make(chan error, 1)
	go func() { acked <- sub.Ack(ds[0].LeaseID) }()
	pid = backendPID(t, admin, "DELETE FROM "+table)
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1, 10000)", pid); err != nil {
		t.Fatal(err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-acked; err != nil {
		t.Fatalf("an Ack whose connection was terminated: %v", err)
	}
	e.clk.Add(time.Hour)
	if st, err := sub.Stats(ctx); err != nil || st.Visible+st.InFlight+st.Delayed+int(st.DeadLettered) != 0 {
		t.Fatalf("after the Ack: %v, %v", st, err)
	}
}

// The server stopped at once (pg_ctl stop -m immediate) and started
// again under a running worker pool and a publisher: the pool carries on
// when the server is back; every message published is delivered, and
// none comes back after its ack.
func TestServerRestartUnderPool(t *testing.T) {
	stop, start := os.Getenv(stopEnv), os.Getenv(startEnv)
	if stop == "" || start == "" {
		if os.Getenv(requireEnv) != "" {
			t.Fatalf("%s is set but %s and %s are not", requireEnv, stopEnv, startEnv)
		}
		t.Skipf("set %s and %s to shell commands that stop and start the test server (bash .ci/run does)", stopEnv, startEnv)
	}
	if testing.Short() {
		t.Skip("stops and starts the server")
	}
	pool := newPool(t)
	ctx := bounded(t)
	// Real time: the server is down for as long as it takes to restart.
	bus, err := pgleasebus.Open(ctx, pool, pgleasebus.WithSchema(freshSchema(t, pool)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	if err := bus.CreateTopic(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	sub, err := pgleasebus.Subscribe(ctx, bus, "jobs", "workers", queue.StringCodec(),
		pgleasebus.WithVisibilityTimeout(2*time.Second), pgleasebus.WithMaxAttempts(queue.UnlimitedAttempts))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := pgleasebus.NewPublisher(bus, queue.StringCodec())
	if err != nil {
		t.Fatal(err)
	}

	const n = 3000
	var (
		mu        sync.Mutex
		delivered = map[string]int{}
		ackedAt   = map[string]bool{}
		dupAfter  int
		progress  = make(chan struct{}, 1)
		hold      bool // handlers wait for gate: their acks go to the stopped server
		gate      = make(chan struct{})
	)
	handler := func(_ context.Context, d queue.Delivery[string]) error {
		mu.Lock()
		delivered[d.Payload]++
		if ackedAt[d.Payload] {
			dupAfter++
		}
		held := hold
		mu.Unlock()
		if held {
			<-gate
		}
		return nil
	}
	p, err := poller.New(sub, handler, poller.WithWorkers(8), poller.WithObserver(func(ev poller.Event[string]) {
		if ev.Outcome == poller.OutcomeAcked {
			mu.Lock()
			ackedAt[ev.Delivery.Payload] = true
			mu.Unlock()
		}
		select { // every outcome, a failed settle among them
		case progress <- struct{}{}:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopPool := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()

	// The publisher sends each message until it is stored; a dedup ID
	// makes a send again of one whose commit the outage hid a no-op.
	published := make(chan error, 1)
	go func() {
		for i := range n {
			for {
				_, err := pub.Publish(ctx, "jobs", fmt.Sprintf("m%d", i), queue.WithDedupID(fmt.Sprintf("m%d", i)))
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					published <- err
					return
				}
				time.Sleep(20 * time.Millisecond) // backoff while the server is down
			}
		}
		published <- nil
	}()
	acks := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ackedAt)
	}
	waitAcks := func(want int) {
		for acks() < want {
			select {
			case <-progress:
			case <-ctx.Done():
				st, err := sub.Stats(context.Background())
				t.Fatalf("%d acked of %d wanted; pool %v; subscription %v, %v", acks(), want, p.Stats(), st, err)
			}
		}
	}
	waitAcks(n / 3)
	mu.Lock()
	hold = true
	mu.Unlock()
	sh := func(cmd string) {
		if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
	}
	sh(stop)
	downAt := acks()
	close(gate) // the handlers held return, and their acks meet the stopped server
	for p.Stats().Errors == 0 {
		select {
		case <-progress:
		case <-ctx.Done():
			t.Fatal("no source call failed while the server was down")
		}
	}
	sh(start)
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	waitAcks(n)
	stopPool()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	lost := 0
	for i := range n {
		if !ackedAt[fmt.Sprintf("m%d", i)] {
			lost++
		}
	}
	again := 0
	for _, c := range delivered {
		again += c - 1
	}
	t.Logf("server stopped after %d acks; the pool's failed calls: %d; messages lost: %d; delivered again (a lease or ack lost in the outage): %d; delivered again after an ack: %d",
		downAt, p.Stats().Errors, lost, again, dupAfter)
	if lost != 0 || dupAfter != 0 {
		t.Fatalf("%d lost, %d delivered again after an ack", lost, dupAfter)
	}
}
