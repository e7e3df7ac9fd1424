package broker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/crashcopy"
	"github.com/leasebus/leasebus/queue"
)

// The crash test runs a child process (this test binary again) that
// publishes and consumes on a durable broker with two publishers and two
// consumers at once, printing a line for each call that returned nil, and
// kills it with SIGKILL after a random number of lines. After each kill it
// opens the directory and checks conservation against what the child
// printed:
//
//   - every message whose Publish returned nil and that was not acked is
//     still there: in the queue or dead-lettered;
//   - no message whose Ack returned nil is there, and none is acked twice
//     across all the runs;
//   - nothing is there twice, and nothing that was never published.
//   - every dedup ID the journal remembers has its message there, or its
//     settled outcome: acked, or dropped by the subscription's filter.
//
// Every publish carries a dedup ID, and every fourth one is followed by a
// republish of an earlier item under its ID, with another payload: a
// duplicate must return the original, never queue the new payload. The
// subscription's filter drops the items whose number ends in 3 (and yields
// the processor, which widens the window between a publish's dedup
// reservation and its offer), and the journal compacts at 64 KiB, so kills
// land in compactions that race publishes.
//
// Then it runs a new child on the same directory, many times, for each
// SyncMode. SyncNone promises this much too: a process crash loses nothing
// that was written.
const (
	crashDirEnv   = "LEASEBUS_CRASH_DIR"
	crashModeEnv  = "LEASEBUS_CRASH_MODE"
	crashFirstEnv = "LEASEBUS_CRASH_FIRST"
	crashSelfEnv  = "LEASEBUS_CRASH_SELF" // a payload whose publish compacts, then kills the child
)

// crashOpen opens dir; hook, if not nil, runs in the subscription's filter
// (inside a Publish, after its dedup reservation, before its offer).
func crashOpen(dir string, mode broker.SyncMode, hook func(b *broker.Broker[string], payload string)) (*broker.Broker[string], *broker.Subscription[string], error) {
	b, err := broker.Open(dir, queue.StringCodec(), broker.WithSync(mode), broker.WithDeadLetterLimit(1<<20),
		broker.WithCompactMin(64<<10)) // small, so that kills land in compactions too
	if err != nil {
		return nil, nil, err
	}
	if err := b.CreateTopic("jobs"); err != nil {
		b.Close()
		return nil, nil, err
	}
	s, err := b.Subscribe("jobs", "work", broker.WithMaxAttempts(4), broker.WithVisibilityTimeout(time.Minute),
		broker.WithRetry(queue.RetryPolicy{NoBackoff: true}), broker.WithFilter(func(m queue.Message[string]) bool {
			if hook != nil {
				hook(b, m.Payload)
			}
			runtime.Gosched()
			return !crashFiltered(m.Payload)
		}))
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return b, s, nil
}

// crashFiltered reports whether the subscription's filter drops payload n.
func crashFiltered(n string) bool { return strings.HasSuffix(n, "3") }

// crashDedupID is the dedup ID of payload n.
func crashDedupID(n string) string { return "item-" + n }

// crashChild publishes and consumes until it is killed. Lines: "I n" before
// publishing payload n, "P n" once Publish returned nil, "a n" before
// acking payload n, "A n" once Ack returned nil. A kill between "a" and "A"
// leaves the message acked or not: both are right.
func crashChild(dir string, mode broker.SyncMode, first int, self string) {
	b, s, err := crashOpen(dir, mode, func(b *broker.Broker[string], payload string) {
		if payload == self { // compact with this publish in flight, then die
			if err := b.Compact(); err != nil {
				fmt.Fprintln(os.Stderr, "child: compact:", err)
				os.Exit(6)
			}
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...) // one write(2) per line, unbuffered
		mu.Unlock()
	}
	ctx := context.Background()
	var published sync.Map // payload number -> the ID of its message, once Publish returned nil
	for p := range 2 {
		go func() {
			for n := first + p; ; n += 2 {
				say("I %d", n)
				if m, err := b.Publish(ctx, "jobs", strconv.Itoa(n), broker.WithDedupID(crashDedupID(strconv.Itoa(n)))); err == nil {
					published.Store(n, m.ID)
					say("P %d", n)
				}
				if k := n - 8; k >= first && (n-first)%4 == 0 { // an earlier item, published again
					id := crashDedupID(strconv.Itoa(k))
					m, err := b.Publish(ctx, "jobs", "dup-"+strconv.Itoa(k), broker.WithDedupID(id))
					if orig, ok := published.Load(k); ok && err == nil && m.ID != orig {
						fmt.Fprintf(os.Stderr, "child: republish of %s queued %q as a new message\n", id, m.Payload)
						os.Exit(5)
					}
				}
			}
		}()
	}
	for c := range 2 {
		go func() {
			r := rand.New(rand.NewPCG(uint64(first), uint64(c)))
			for {
				ds, err := s.Poll(ctx, 8)
				if err != nil {
					fmt.Fprintln(os.Stderr, "child: poll:", err)
					os.Exit(4)
				}
				for _, d := range ds {
					switch k := r.IntN(100); {
					case k < 70:
						say("a %s", d.Payload)
						if s.Ack(d.LeaseID) == nil {
							say("A %s", d.Payload)
						}
					case k < 85:
						_ = s.Fail(d.LeaseID, errors.New("boom"))
					case k < 95:
						_ = s.Nack(d.LeaseID, 0)
					default:
						_ = s.Release(d.LeaseID)
					}
				}
			}
		}()
	}
	select {}
}

func TestDurableCrash(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		mode, _ := strconv.Atoi(os.Getenv(crashModeEnv))
		first, _ := strconv.Atoi(os.Getenv(crashFirstEnv))
		crashChild(dir, broker.SyncMode(mode), first, os.Getenv(crashSelfEnv))
		return
	}
	runs := 25
	if testing.Short() {
		runs = 4
	}
	for _, mode := range []broker.SyncMode{broker.SyncAlways, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			r := rand.New(rand.NewPCG(uint64(mode), 1))
			intended := map[string]bool{}
			published := map[string]bool{}
			acking := map[string]bool{} // an ack was tried: it may have taken effect
			acked := map[string]bool{}
			compactions, lastSeg, selfRuns, selfKills := 0, "seg-00000001.log", 0, 0
			for run := range runs {
				first, self := (run+1)*1_000_000, ""
				if run%3 == 1 { // dies compacting inside a publish of its first publisher
					self = strconv.Itoa(first + 2*(3+r.IntN(40)))
				}
				lines := crashRun(t, dir, mode, first, self, 20+r.IntN(2000))
				if self != "" {
					selfRuns++
					if slices.Contains(lines, "I "+self) && !slices.Contains(lines, "P "+self) {
						selfKills++
					}
				}
				for _, ln := range lines {
					op, n, ok := strings.Cut(ln, " ")
					require.True(t, ok, "child line %q", ln)
					switch op {
					case "I":
						intended[n] = true
					case "P":
						published[n] = true
					case "a":
						acking[n] = true
					case "A":
						require.False(t, acked[n], "run %d: payload %s acked twice", run, n)
						acked[n] = true
					default:
						require.Failf(t, "unknown child line", "%q", ln)
					}
				}
				if seg := crashCheck(t, dir, mode, run, intended, published, acking, acked); seg != lastSeg {
					compactions++
					lastSeg = seg
				}
			}
			require.NotEmpty(t, acked)
			require.Positive(t, selfRuns)
			require.Equal(t, selfRuns, selfKills, "every child told to die compacting inside a publish did")
			t.Logf("%d runs: %d publishes returned nil, %d acks; compacted during %d runs; %d killed compacting inside a publish",
				runs, len(published), len(acked), compactions, selfKills)
		})
	}
}

// crashRun starts a child on dir, kills it after it has printed kill lines,
// and returns every line it printed.
func crashRun(t *testing.T, dir string, mode broker.SyncMode, first int, self string, kill int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableCrash$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashModeEnv+"="+strconv.Itoa(int(mode)),
		crashFirstEnv+"="+strconv.Itoa(first), crashSelfEnv+"="+self)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill() // if a check below fails first (a no-op once it is dead)
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		// The child has the directory: another process cannot open it. Only
		// in a run the parent ends: a child that kills itself may already be
		// gone, its lock with it, when the parent reads its first line from
		// the pipe (seen once under load).
		if len(lines) == 1 && self == "" {
			b, err := broker.Open(dir, queue.StringCodec())
			if err == nil {
				b.Close()
			}
			require.ErrorIs(t, err, broker.ErrLocked, "a second process opening the child's directory")
		}
		// A child that is to kill itself is left to do so, whatever kill
		// says: it reaches its payload, publishing in order, so every such
		// run dies compacting inside that publish.
		if len(lines) == kill && self == "" {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "child stderr: %s", stderr.String())
	require.Equal(t, syscall.SIGKILL, ee.ProcessState.Sys().(syscall.WaitStatus).Signal(), "child stderr: %s", stderr.String())
	return lines // whole lines only: each is one write(2) of less than PIPE_BUF
}

// crashCheck opens dir after a kill and checks conservation. It returns the
// journal's live segment: compaction moves it on.
func crashCheck(t *testing.T, dir string, mode broker.SyncMode, run int, intended, published, acking, acked map[string]bool) string {
	t.Helper()
	b, s, err := crashOpen(dir, mode, nil) // the dead child's lock is gone with it
	require.NoError(t, err, "run %d", run)
	// A kill between a compaction's rename and its removal of the old
	// segment leaves two: Open proved the chain and removed the old one.
	segs, _ := filepath.Glob(filepath.Join(dir, "seg-*.log"))
	defer func() { require.NoError(t, b.Close()) }()
	there := map[string]string{}
	note := func(n, where string) {
		require.True(t, intended[n], "run %d: payload %s (%s) was never published", run, n, where)
		require.False(t, acked[n], "run %d: payload %s (%s) is back after its ack", run, n, where)
		require.Empty(t, there[n], "run %d: payload %s is there twice (%s, %s)", run, n, there[n], where)
		there[n] = where
	}
	ds := s.TryPoll(1 << 30) // no delays in this test: everything held is visible after a restart
	for _, d := range ds {
		note(d.Payload, "queue")
	}
	for _, d := range ds {
		require.NoError(t, s.Release(d.LeaseID))
	}
	for _, dl := range b.DeadLetters() {
		note(dl.Message.Payload, "dead letters")
	}
	st := s.Stats()
	require.Zero(t, st.Delayed+st.InFlight+st.HeldBack, "run %d", run)
	for n := range published {
		if !acking[n] && !crashFiltered(n) {
			require.NotEmpty(t, there[n], "run %d: payload %s was published and never acked, and is lost", run, n)
		}
	}
	for n, where := range there {
		require.False(t, crashFiltered(n), "run %d: payload %s, which the filter drops, is in the %s", run, n, where)
	}
	crashCheckDedup(t, dir, run, intended, acking, there)
	require.Len(t, segs, 1, "run %d: one live segment", run)
	return filepath.Base(segs[0])
}

// crashCheckDedup probes, on a copy of dir, every dedup ID the child may
// have published: one the journal remembers (a publish with it returns the
// original message) must have its message there, or its settled outcome.
func crashCheckDedup(t *testing.T, dir string, run int, intended, acking map[string]bool, there map[string]string) {
	t.Helper()
	cp := crashcopy.Of(t, dir)
	b, _, err := crashOpen(cp, broker.SyncNone, nil)
	require.NoError(t, err, "run %d", run)
	defer func() { require.NoError(t, b.Close()) }()
	remembered := 0
	probed := time.Now()
	for n := range intended {
		m, err := b.Publish(context.Background(), "jobs", "probe", broker.WithDedupID(crashDedupID(n)))
		require.NoError(t, err)
		if !m.PublishedAt.Before(probed) {
			continue // not remembered: the probe was queued (on the copy); a duplicate has the original's time
		}
		remembered++
		require.True(t, there[n] != "" || acking[n] || crashFiltered(n),
			"run %d: dedup ID of payload %s is remembered, but its message is neither there, nor acked, nor filtered", run, n)
	}
	require.Positive(t, remembered, "run %d", run)
}
