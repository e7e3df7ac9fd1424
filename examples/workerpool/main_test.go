package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/console"
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

// lineWriter sends each line written to it on a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexAny(w.buf, "\r\n")
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

func TestWorkerPoolWithTheConsole(t *testing.T) {
	cfg := config{Webhooks: 60, Workers: 4, Visibility: 200 * time.Millisecond, Work: time.Millisecond, Slow: 300 * time.Millisecond, FlakyPct: 10, Console: "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &lineWriter{lines: make(chan string, 1024)}
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, cfg, w)
		done <- err
	}()
	var url string
	for line := range w.lines {
		if u, ok := strings.CutPrefix(line, "console: "); ok {
			url = u
		}
		if line == "done: the console stays up until Ctrl-C" {
			break
		}
	}
	if url == "" {
		t.Fatal("no console address printed")
	}
	resp, err := http.Get(url + "api/overview")
	if err != nil {
		t.Fatal(err)
	}
	var o console.Overview
	err = json.NewDecoder(resp.Body).Decode(&o)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{}
	for _, s := range o.Subscriptions {
		acked[s.Name] = s.Acked
	}
	if acked["deliver"] != 60 || o.DeadLetters.Held != 0 {
		t.Errorf("after the run the console shows deliver acked %d (want 60), %d dead letters held (want 0)", acked["deliver"], o.DeadLetters.Held)
	}
	cancel() // Ctrl-C
	if err := <-done; err != nil {
		t.Fatalf("run = %v after the console's Ctrl-C, want nil", err)
	}
}
