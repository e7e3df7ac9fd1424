package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

// The kill test runs two schedulers, replicas "a" and "b", each a child
// process (this test binary again) with its own Store, over one durable
// broker directory: whichever runs holds the directory, as a standby
// takes over from a leader that died. In turn, each is started on the
// clock where the last one stopped (plus a random outage), runs a
// once-a-minute schedule while its own mock clock moves in random steps,
// and is killed with SIGKILL after a random number of lines of output,
// wherever it is: publishing, saving its Store, between the two. The
// replica starting carries on from its own Store, which may be rounds
// behind, so it fires again slots the other already published. A last
// run goes to a fixed time and exits. Then the topic must hold every slot
// from the first to the last exactly once: the test's own log of slots.
const (
	killEnv      = "SCHEDULE_KILL" // dir,store,start unix seconds,end unix seconds (0: none),seed
	killInterval = time.Minute
	killLimit    = 60               // the catch-up limit; an outage is at most a third of it
	killWindow   = 24 * time.Hour   // the broker's dedup window: it covers the catch-up limit
	killMaxStep  = 3 * time.Minute  // the child's clock moves at most this at once
	killMaxGap   = 20 * time.Minute // the longest outage between two runs
)

func killChild(arg string) {
	parts := strings.Split(arg, ",")
	dir, storePath := parts[0], parts[1]
	start, _ := strconv.ParseInt(parts[2], 10, 64)
	end, _ := strconv.ParseInt(parts[3], 10, 64)
	seed, _ := strconv.ParseUint(parts[4], 10, 64)
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	mock := clock.NewMock()
	mock.Set(time.Unix(start, 0))
	b, err := broker.Open(dir, queue.StringCodec(), broker.WithClock(mock), broker.WithSync(broker.SyncNone), broker.WithDedupWindow(killWindow))
	if err != nil {
		fail(err)
	}
	if err := b.CreateTopic("jobs"); err != nil {
		fail(err)
	}
	if _, err := b.Subscribe("jobs", "workers", broker.WithMaxQueue(1<<20)); err != nil && !errors.Is(err, broker.ErrAlreadySubscribed) {
		fail(err)
	}
	store, err := schedule.NewFileStore(storePath)
	if err != nil {
		fail(err)
	}
	s, err := schedule.New(schedule.WithClock(mock), schedule.WithStore(store))
	if err != nil {
		fail(err)
	}
	publish := schedule.Publish(b, "jobs", func(f schedule.Fire) string { return f.Slot.UTC().Format(time.RFC3339) })
	job := func(ctx context.Context, f schedule.Fire) error {
		err := publish(ctx, f)
		if err == nil {
			fmt.Printf("P %s\n", f.Slot.UTC().Format(time.RFC3339))
		}
		return err
	}
	if err := s.Add("minutely", schedule.Every(killInterval), job, schedule.WithMissed(schedule.MissedEach), schedule.WithCatchUpLimit(killLimit)); err != nil {
		fail(err)
	}
	ctx := context.Background()
	go s.Run(ctx)
	r := rand.New(rand.NewPCG(seed, 7))
	for {
		if err := s.AwaitQuiet(ctx); err != nil {
			fail(err)
		}
		fmt.Printf("T %d\n", mock.Now().Unix())
		if end != 0 && !mock.Now().Before(time.Unix(end, 0)) {
			if st := s.Status()[0]; st.Failures != 0 {
				fail(fmt.Errorf("failures: %+v", st))
			}
			if err := b.Close(); err != nil {
				fail(err)
			}
			fmt.Println("END")
			os.Exit(0)
		}
		step := time.Duration(1 + r.Int64N(int64(killMaxStep)))
		if end != 0 {
			step = min(step, time.Unix(end, 0).Sub(mock.Now()))
		}
		mock.Add(step)
	}
}

func TestTwoSchedulersKilledPublishEachSlotOnce(t *testing.T) {
	if arg := os.Getenv(killEnv); arg != "" {
		killChild(arg)
		return
	}
	rounds := 24
	if testing.Short() {
		rounds = 6
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "queue")
	r := rand.New(rand.NewPCG(2026, 12))
	first := time.Date(2026, 12, 5, 9, 0, 30, 0, time.UTC)
	at := first
	printed := map[string]int{} // publishes each child reported, over all runs
	var finalEnd time.Time      // where the last run, which is not killed, stops its clock
	for i := 0; i <= rounds; i++ {
		replica := string(rune('a' + i%2))
		var end time.Time // the last run's: it stops there
		kill := 5 + r.IntN(80)
		if i == rounds {
			end, kill = at.Add(30*time.Minute), 0
			finalEnd = end
		}
		lines, killed := killSchedulerRun(t, dir, filepath.Join(tmp, replica+".json"), at, end, r.Uint64(), kill)
		if killed != (kill != 0) {
			t.Fatalf("round %d: killed = %v", i, killed)
		}
		last := at
		for _, ln := range lines {
			op, arg, _ := strings.Cut(ln, " ")
			switch op {
			case "T":
				sec, _ := strconv.ParseInt(arg, 10, 64)
				last = time.Unix(sec, 0)
			case "P":
				printed[arg]++
			case "END":
			default:
				t.Fatalf("round %d: child line %q", i, ln)
			}
		}
		at = last.Add(time.Duration(r.Int64N(int64(killMaxGap))))
		t.Logf("round %d (%s): %d lines, clock at %s", i, replica, len(lines), last.Format(time.TimeOnly))
	}

	mock := clock.NewMock()
	mock.Set(at)
	b, err := broker.Open(dir, queue.StringCodec(), broker.WithClock(mock))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := b.Subscription("jobs", "workers")
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, sub)
	if len(got) == 0 {
		t.Fatal("nothing published")
	}
	// A replica catching up from its own Store may publish a slot after
	// later ones the other published: each slot once, not in order.
	outOfOrder := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			outOfOrder++
		}
	}
	slices.Sort(got)
	want := first.Truncate(killInterval).Add(killInterval)
	for _, slot := range got {
		if slot != want.Format(time.RFC3339) {
			t.Fatalf("the topic holds slot %s where %s comes next (each slot once, none missing)", slot, want.Format(time.RFC3339))
		}
		want = want.Add(killInterval)
	}
	if lastSlot, wantLast := want.Add(-killInterval), finalEnd.Truncate(killInterval); !lastSlot.Equal(wantLast) {
		t.Fatalf("the last slot published is %v; the last run went to %v, so its last slot is %v", lastSlot, finalEnd, wantLast)
	}
	again := 0
	for _, n := range printed {
		again += n - 1
	}
	t.Logf("%d slots in the topic, each once (%d after a later one); the children published %d slots again (dropped by dedup)", len(got), outOfOrder, again)
}

// killSchedulerRun runs a child, kills it after kill lines (0: never),
// and returns what it printed and whether it was killed.
func killSchedulerRun(t *testing.T, dir, store string, start, end time.Time, seed uint64, kill int) ([]string, bool) {
	t.Helper()
	endSec := int64(0)
	if !end.IsZero() {
		endSec = end.Unix()
	}
	var after func(string, int) bool
	if kill != 0 {
		after = func(_ string, n int) bool { return n == kill }
	}
	return testkit.KillRun(t, "TestTwoSchedulersKilledPublishEachSlotOnce",
		[]string{fmt.Sprintf("%s=%s,%s,%d,%d,%d", killEnv, dir, store, start.Unix(), endSec, seed)}, after)
}
