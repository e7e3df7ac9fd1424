package leasebus_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
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
//
// Then it runs a new child on the same directory, many times, for each
// SyncMode. SyncNone promises this much too: a process crash loses nothing
// that was written.
const (
	crashDirEnv   = "LEASEBUS_CRASH_DIR"
	crashModeEnv  = "LEASEBUS_CRASH_MODE"
	crashFirstEnv = "LEASEBUS_CRASH_FIRST"
)

func crashOpen(dir string, mode broker.SyncMode) (*broker.Broker[string], *broker.Subscription[string], error) {
	b, err := broker.Open(dir, broker.StringCodec{}, broker.WithSync(mode), broker.WithDeadLetterLimit(1<<20),
		broker.WithCompactMin(64<<10)) // small, so that kills land in compactions too
	if err != nil {
		return nil, nil, err
	}
	if err := b.CreateTopic("jobs"); err != nil {
		b.Close()
		return nil, nil, err
	}
	s, err := b.Subscribe("jobs", "work", broker.WithMaxAttempts(4), broker.WithVisibilityTimeout(time.Minute),
		broker.WithRetry(queue.RetryPolicy{NoBackoff: true}))
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return b, s, nil
}

// crashChild publishes and consumes until it is killed. Lines: "I n" before
// publishing payload n, "P n" once Publish returned nil, "a n" before
// acking payload n, "A n" once Ack returned nil. A kill between "a" and "A"
// leaves the message acked or not: both are right.
func crashChild(dir string, mode broker.SyncMode, first int) {
	b, s, err := crashOpen(dir, mode)
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
	for p := range 2 {
		go func() {
			for n := first + p; ; n += 2 {
				say("I %d", n)
				if _, err := b.Publish(ctx, "jobs", strconv.Itoa(n)); err == nil {
					say("P %d", n)
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
		crashChild(dir, broker.SyncMode(mode), first)
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
			compactions, lastSeg := 0, "seg-00000001.log"
			for run := range runs {
				lines := crashRun(t, dir, mode, (run+1)*1_000_000, 20+r.IntN(2000))
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
						t.Fatalf("child line %q", ln)
					}
				}
				if seg := crashCheck(t, dir, mode, run, intended, published, acking, acked); seg != lastSeg {
					compactions++
					lastSeg = seg
				}
			}
			require.NotEmpty(t, acked)
			t.Logf("%d runs: %d publishes returned nil, %d acks; compacted during %d runs", runs, len(published), len(acked), compactions)
		})
	}
}

// crashRun starts a child on dir, kills it after it has printed kill lines,
// and returns every line it printed.
func crashRun(t *testing.T, dir string, mode broker.SyncMode, first, kill int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableCrash$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashModeEnv+"="+strconv.Itoa(int(mode)), crashFirstEnv+"="+strconv.Itoa(first))
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
		if len(lines) == 1 { // the child has the directory: another process cannot open it
			b, err := broker.Open(dir, broker.StringCodec{})
			if err == nil {
				b.Close()
			}
			require.ErrorIs(t, err, broker.ErrLocked, "a second process opening the child's directory")
		}
		if len(lines) == kill {
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
// journal's segment as the child left it: compaction moves it on.
func crashCheck(t *testing.T, dir string, mode broker.SyncMode, run int, intended, published, acking, acked map[string]bool) string {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "seg-*.log"))
	b, s, err := crashOpen(dir, mode) // the dead child's lock is gone with it
	require.NoError(t, err, "run %d", run)
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
		if !acking[n] {
			require.NotEmpty(t, there[n], "run %d: payload %s was published and never acked, and is lost", run, n)
		}
	}
	require.Len(t, segs, 1, "run %d: one live segment", run)
	return filepath.Base(segs[0])
}
