package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestWorkerPoolDeliversEverything(t *testing.T) {
	cfg := config{Webhooks: 120, Workers: 4, Visibility: 200 * time.Millisecond, Work: time.Millisecond, Slow: 500 * time.Millisecond, FlakyPct: 10}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var progress strings.Builder // not a terminal: a line per report
	s, err := run(ctx, cfg, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if out := progress.String(); strings.Contains(out, "\r") || !strings.HasSuffix(out, "\n") ||
		!strings.Contains(out, fmt.Sprintf("delivered %4d/%d", cfg.Webhooks, cfg.Webhooks)) {
		t.Errorf("progress into a non-terminal: want lines, one per report, the last with every webhook delivered; got %q", out)
	}
	flaky := 0
	for i := range cfg.Webhooks {
		if hash(i)%100 < uint32(cfg.FlakyPct) { // the poison one too, after its redrive
			flaky++
		}
	}
	// One slow delivery (webhook 50) outlives the visibility timeout: the
	// pool holds its lease, so nothing is lost or delivered twice.
	want := summary{Published: 120, Delivered: 120, Retried: flaky, DeadLettered: 1, Redriven: 1, Audited: 120, Slow: 1}
	got := s
	got.Elapsed = 0
	if got != want {
		t.Errorf("summary = %+v, want %+v", got, want)
	}
	var out strings.Builder
	printSummary(&out, s)
	if !strings.Contains(out.String(), "dead-lettered") || !strings.Contains(out.String(), " 120 ") {
		t.Errorf("summary table:\n%s", out.String())
	}
}

func TestWorkerPoolStopsOnCancel(t *testing.T) {
	cfg := config{Webhooks: 50, Workers: 2, Visibility: time.Second, Work: time.Hour, Slow: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Ctrl-C before anything is delivered: run drains and says why
	if _, err := run(ctx, cfg, io.Discard); err != context.Canceled {
		t.Fatalf("run = %v, want context.Canceled", err)
	}
}
