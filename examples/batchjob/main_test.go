package main

import (
	"context"
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
	r, err := run(context.Background(), f, 4)
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
	r, err := run(context.Background(), strings.NewReader(in), 2)
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
	r, err := run(context.Background(), strings.NewReader("# nothing\n"), 1)
	if err != nil || r.Items != 0 {
		t.Fatalf("run = %+v, %v", r, err)
	}
}
