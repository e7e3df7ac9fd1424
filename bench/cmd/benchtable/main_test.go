package main

import (
	"strings"
	"testing"

	"github.com/leasebus/leasebus/bench/internal/suite"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/leasebus/leasebus/bench
cpu: AMD EPYC
BenchmarkW1/leasebus-2         	       1	  47105076 ns/op	       387.1 B/msg	         2.011 allocs/msg	     20000 msgs	      2355 ns/msg
BenchmarkW1/leasebus-2         	       1	  40000000 ns/op	       387.1 B/msg	         2.011 allocs/msg	     20000 msgs	      2000 ns/msg
BenchmarkW1/leasebus-2         	       1	  60000000 ns/op	       387.1 B/msg	         2.011 allocs/msg	     20000 msgs	      3000 ns/msg
BenchmarkW1/leasefloor-2       	       1	   4015146 ns/op	       114.1 B/msg	         0.002350 allocs/msg	     20000 msgs	       200.0 ns/msg
BenchmarkW4/leasebus-2         	       1	  66320173 ns/op	       297.2 B/msg	         4.013 allocs/msg	      2000 msgs	      7934 ns/msg	      2885 p50-ns	     22652 p90-ns	     35956 p99-ns
BenchmarkMem/leasebus-2        	       1	      1743 ns/op	       333.0 held-B/msg	    100000 msgs
--- BENCH: BenchmarkMem/leasebus-2
    bench_test.go:115: Go heap in use + stacks
BenchmarkMem/leasefloor-2      	       1	      1844 ns/op	        27.36 held-B/msg	    100000 msgs
--- FAIL: BenchmarkSubs/10/mempubsub
    bench_test.go:75: round 1189, subscription 3: context deadline exceeded
--- FAIL: BenchmarkSubs/10
BenchmarkSubs/10/leasebus-2             	       1	  11787207 ns/op	        13.30 B/msg	         0.1056 allocs/msg	     20000 msgs	       589.4 ns/msg
PASS
`

func TestParse(t *testing.T) {
	res := parse(strings.NewReader(sample))
	if got := len(res.Runs["W1/leasebus"]); got != 3 {
		t.Fatalf("W1/leasebus runs = %d, want 3", got)
	}
	if got := res.Runs["W4/leasebus"][0]["p99-ns"]; got != 35956 {
		t.Errorf("p99 = %v", got)
	}
	if got := res.Logs["Mem/leasebus"]; got != "Go heap in use + stacks" {
		t.Errorf("log = %q", got)
	}
	if got := res.Failed["Subs/10/mempubsub"]; got != "round 1189, subscription 3: context deadline exceeded" {
		t.Errorf("failure = %q", got)
	}
	if got := len(res.Runs["Subs/10/leasebus"]); got != 1 {
		t.Errorf("Subs/10/leasebus runs = %d after a failure line", got)
	}
	if res.Header["cpu"] != "AMD EPYC" {
		t.Errorf("header = %v", res.Header)
	}
}

func TestSummarize(t *testing.T) {
	res := parse(strings.NewReader(sample))
	s, ok := summarize(res.Runs["W1/leasebus"], "ns/msg")
	if !ok || s.median != 2355 || s.n != 3 {
		t.Fatalf("summary = %+v", s)
	}
	if want := (3000.0 - 2355) / 2355 * 100; s.spread != want {
		t.Errorf("spread = %v, want %v", s.spread, want)
	}
	e, _ := summarize([]map[string]float64{{"x": 1}, {"x": 3}}, "x")
	if e.median != 2 {
		t.Errorf("even median = %v", e.median)
	}
}

func TestTable(t *testing.T) {
	md := table(parse(strings.NewReader(sample)), true)
	for _, want := range []string{
		"| " + suite.W1.Title + " | leasebus | 47.1 ms | ±27% | 2355 | 2.01 | 387 | ×11.78 |",
		"|  | leasefloor | 4.02 ms | — | 200 | 0.0024 | 114 | ×1.00 |",
		"p50 2.88 µs · p90 22.7 µs · p99 36 µs",
		"| 333 | ×12.17 | held: Go heap in use + stacks; n=1 |",
		"failed: round 1189",
		"n/a: no leases to expire",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	if n := strings.Count(md, "\n"); n != 2+len(suite.Workloads)*len(suite.Impls) {
		t.Errorf("%d lines", n)
	}
}

func TestName(t *testing.T) {
	for in, want := range map[string]string{
		"BenchmarkW1/leasebus-2":      "W1/leasebus",
		"BenchmarkDepth/1e3/chan-16":  "Depth/1e3/chan",
		"BenchmarkW1/goqite-mem":      "W1/goqite-mem",
		"BenchmarkW1/goqite-mem-2":    "W1/goqite-mem",
		"BenchmarkSubs/100/watermill": "Subs/100/watermill",
	} {
		if got := name(in); got != want {
			t.Errorf("name(%q) = %q, want %q", in, got, want)
		}
	}
}
