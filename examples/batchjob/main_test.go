package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestBatchJobSample(t *testing.T) {
	f, err := os.Open("orders.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := run(context.Background(), f, config{workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	printReport(&out, r)
	const want = "items 120, processed 120, dead-lettered 0, total $30219.11\n"
	if out.String() != want {
		t.Errorf("report = %q, want %q", out.String(), want)
	}
}

func TestBatchJobReportsMalformedLines(t *testing.T) {
	in := "# header\nA,2,150\n\nB,x,1\nC,1,1000\nD\n"
	r, err := run(context.Background(), strings.NewReader(in), config{workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	printReport(&out, r)
	if r.Items != 4 || r.Processed != 2 || r.Total != 1300 || len(r.Failed) != 2 {
		t.Fatalf("report: %s", out.String())
	}
	for _, line := range []string{"line 4: malformed line", "line 6: malformed line"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, out.String())
		}
	}
}

func TestBatchJobEmptyInput(t *testing.T) {
	r, err := run(context.Background(), strings.NewReader("# nothing\n"), config{workers: 1})
	if err != nil || r.Items != 0 {
		t.Fatalf("run = %+v, %v", r, err)
	}
}

// With -state, a run stopped halfway is finished by the next one: nothing
// is published twice, every line is processed once in all, and a run after
// the job is done has nothing to do.
func TestBatchJobResumes(t *testing.T) {
	dir := t.TempDir()
	runWith := func(ctx context.Context, cfg config) report {
		t.Helper()
		f, err := os.Open("orders.csv")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cfg.workers, cfg.state = 4, dir
		r, err := run(ctx, f, cfg)
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		return r
	}
	ctx, stop := context.WithCancel(context.Background())
	first := runWith(ctx, config{done: func(_ item, n int) {
		if n == 50 {
			stop() // as a kill would, but the pool drains: what it started is done
		}
	}})
	stop()
	second := runWith(context.Background(), config{})
	third := runWith(context.Background(), config{})

	if first.Items != 120 || first.Earlier != 0 || first.Processed < 50 || first.Processed >= 120 {
		t.Fatalf("first run: %+v", first)
	}
	if second.Earlier != 120 || first.Processed+second.Processed != 120 || len(second.Failed) != 0 {
		t.Fatalf("second run: %+v (first processed %d)", second, first.Processed)
	}
	if got := first.Total + second.Total; got != 3021911 {
		t.Errorf("total over both runs = %d cents, want 3021911", got)
	}
	if third.Earlier != 120 || third.Processed != 0 {
		t.Errorf("third run: %+v", third)
	}
	var out strings.Builder
	printReport(&out, second)
	if !strings.Contains(out.String(), "resumed: 120 items were published by an earlier run") {
		t.Errorf("report:\n%s", out.String())
	}
}

// A job with -state that failed on a poison line can finish: rerunning
// unchanged fails the same way (and enqueues nothing twice); fixing the line
// and rerunning puts the corrected line back and processes it; or
// -discard-failed records why and settles it for good.
func TestBatchJobFinishesAfterPoisonItem(t *testing.T) {
	const bad = "# orders\nA,2,150\nB,x,1\nC,1,1000\n"
	const fixed = "# orders\nA,2,150\nB,3,1\nC,1,1000\n"
	runIn := func(dir, input string, discard bool) (report, string) {
		t.Helper()
		r, err := run(context.Background(), strings.NewReader(input), config{workers: 2, state: dir, discard: discard})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		printReport(&out, r)
		return r, out.String()
	}

	t.Run("fix the line", func(t *testing.T) {
		dir := t.TempDir()
		r, out := runIn(dir, bad, false)
		if r.Processed != 2 || len(r.Failed) != 1 || !strings.Contains(out, "line 3: malformed line") || !strings.Contains(out, "to finish") {
			t.Fatalf("first run:\n%s", out)
		}
		r, out = runIn(dir, bad, false)
		if r.Earlier != 3 || r.Processed != 0 || len(r.Failed) != 1 || r.Corrected != 0 {
			t.Fatalf("rerun, unchanged: still failed, nothing enqueued twice:\n%s", out)
		}
		r, out = runIn(dir, fixed, false)
		if r.Corrected != 1 || r.Processed != 1 || len(r.Failed) != 0 || r.Total != 3 {
			t.Fatalf("rerun, fixed: the corrected line is processed:\n%s", out)
		}
		r, out = runIn(dir, fixed, false)
		if r.Corrected != 0 || r.Processed != 0 || len(r.Failed) != 0 {
			t.Fatalf("the job is done:\n%s", out)
		}
	})
	t.Run("discard it", func(t *testing.T) {
		dir := t.TempDir()
		runIn(dir, bad, false)
		r, out := runIn(dir, bad, true)
		if len(r.Failed) != 0 || len(r.Discarded) != 1 || !strings.Contains(out, "discarded: line 3: malformed line") {
			t.Fatalf("rerun with -discard-failed:\n%s", out)
		}
		r, out = runIn(dir, bad, false)
		if len(r.Failed) != 0 || r.Processed != 0 || r.Earlier != 3 {
			t.Fatalf("settled for good: the line is neither retried nor failed again:\n%s", out)
		}
	})
}
