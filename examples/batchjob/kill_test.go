package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/testkit"
)

// The kill-and-rerun test runs this batch job (this test binary again, as
// a child process) on a durable queue over 100,000 generated lines, kills
// it with SIGKILL at random points — while it enqueues, while it drains —
// and runs it again with the same input, as an operator would, once with
// the clock hours later; then lets it finish, and runs it once more after
// that. The child prints "E n" after each enqueued batch, "D line" after
// processing a line, "A line" after its ack returned nil, and, when it
// finishes, "R items earlier processed failed".
//
// After each run: no line is processed after an earlier run's ack of it
// (nothing acked is queued again); the lines processed again are at most
// those in flight at the kill (the pool's workers); a finished run reports
// no dead letter (no overflow); and by the end every line was processed.
const (
	killDirEnv   = "BATCHJOB_KILL_DIR"
	killClockEnv = "BATCHJOB_KILL_CLOCK" // the mock clock's time, Unix seconds
	killItems    = 100_000
	killWorkers  = 4
)

func killInput() string {
	var b strings.Builder
	for i := range killItems {
		fmt.Fprintf(&b, "SKU%d,1,%d\n", i, 100+i%900)
	}
	return b.String()
}

// killChild runs the job on dir and reports what it does on stdout.
func killChild(dir string, at time.Time) {
	mock := clock.NewMock()
	mock.Set(at)
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...) // one write(2) a line
		mu.Unlock()
	}
	r, err := run(context.Background(), strings.NewReader(killInput()), config{
		workers: killWorkers, state: dir, sync: broker.SyncNone, clock: mock,
		enqueued: func(n int) { say("E %d", n) },
		done:     func(it item, _ int) { say("D %d", it.Line) },
		acked:    func(it item) { say("A %d", it.Line) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	say("R %d %d %d %d", r.Items, r.Earlier, r.Processed, len(r.Failed))
	os.Exit(0)
}

func TestBatchJobKillAndRerun(t *testing.T) {
	if dir := os.Getenv(killDirEnv); dir != "" {
		sec, _ := strconv.ParseInt(os.Getenv(killClockEnv), 10, 64)
		killChild(dir, time.Unix(sec, 0))
		return
	}
	testkit.Long(t, "a batch job killed with SIGKILL again and again")
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(13, 1))
	epoch := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		name string
		at   time.Time
		kill func(ln string, n int) bool // kill after this line (n lines so far)
	}
	atEnqueued := func(k int) func(string, int) bool {
		return func(ln string, _ int) bool { return ln == fmt.Sprintf("E %d", k) }
	}
	afterLines := func(k int) func(string, int) bool {
		return func(_ string, n int) bool { return n == k }
	}
	steps := []step{
		{"killed while enqueuing", epoch, atEnqueued(40_000)},
		{"killed while enqueuing again", epoch.Add(time.Minute), atEnqueued(70_000)},
		{"killed while draining", epoch.Add(2 * time.Minute), afterLines(100 + 40_000 + r.IntN(20_000))},
		{"killed while draining, hours later", epoch.Add(6 * time.Hour), afterLines(100 + 20_000 + r.IntN(20_000))},
		{"finishes", epoch.Add(7 * time.Hour), nil},
		{"run again after it finished, hours later", epoch.Add(30 * time.Hour), nil},
	}
	processed := map[int]int{} // times each line was processed, over all runs
	ackedBefore := map[int]bool{}
	for i, st := range steps {
		lines, killed := killRun(t, dir, st.at, st.kill)
		require(t, killed == (st.kill != nil), "%s: killed = %v", st.name, killed)
		again, acked := 0, map[int]bool{}
		var final string
		for _, ln := range lines {
			op, arg, _ := strings.Cut(ln, " ")
			switch op {
			case "E":
			case "D":
				n, _ := strconv.Atoi(arg)
				require(t, !ackedBefore[n], "%s: line %d processed again after an earlier run acked it", st.name, n)
				if processed[n] > 0 {
					again++
				}
				processed[n]++
			case "A":
				n, _ := strconv.Atoi(arg)
				acked[n] = true
			case "R":
				final = arg
			default:
				t.Fatalf("%s: child line %q", st.name, ln)
			}
		}
		if i > 0 && steps[i-1].kill != nil {
			require(t, again <= killWorkers, "%s: %d lines processed again, more than the %d in flight at the kill", st.name, again, killWorkers)
		} else {
			require(t, again == 0, "%s: %d lines processed again", st.name, again)
		}
		if !killed {
			var items, earlier, done, failed int
			fmt.Sscanf(final, "%d %d %d %d", &items, &earlier, &done, &failed)
			require(t, items == killItems && failed == 0, "%s: report %q: want %d items and no dead letter", st.name, final, killItems)
		}
		if st.name == "run again after it finished, hours later" {
			require(t, final == fmt.Sprintf("%d %d 0 0", killItems, killItems), "%s: report %q: want everything recognised, nothing processed", st.name, final)
		}
		for n := range acked {
			ackedBefore[n] = true
		}
		t.Logf("%s: %d lines from the child, %d processed again", st.name, len(lines), again)
	}
	for n := 1; n <= killItems; n++ {
		require(t, processed[n] > 0, "line %d was never processed", n)
	}
}

// killRun runs the child on dir at clock time at, kills it after the first
// line for which kill reports true (if kill is not nil), and returns every
// line it printed and whether it was killed.
func killRun(t *testing.T, dir string, at time.Time, kill func(string, int) bool) ([]string, bool) {
	t.Helper()
	return testkit.KillRun(t, "TestBatchJobKillAndRerun",
		[]string{killDirEnv + "=" + dir, killClockEnv + "=" + strconv.FormatInt(at.Unix(), 10)}, kill)
}

// require fails the test now unless ok.
func require(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}
