// Command benchtable runs the bench module's benchmarks with go test and
// prints one markdown table: workload × implementation, with the median of
// -count runs, their spread, the per-message numbers and the ratio to the
// lease floor measured in the same run.
//
//	go run ./cmd/benchtable            # full mode, -count 5 (a few minutes)
//	go run ./cmd/benchtable -short     # short mode, -count 3 (about a minute); BENCH_SHORT=1 too
//	go run ./cmd/benchtable -in raw.txt  # only render a saved go test output
//
// Run it from the bench module (or anywhere inside it). The raw go test
// output is saved beside the table (results/raw-MODE.txt by default).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasebus/leasebus/bench/internal/suite"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run() error {
	short := flag.Bool("short", os.Getenv("BENCH_SHORT") != "", "short mode: smaller runs, -count 3 (also BENCH_SHORT=1)")
	count := flag.Int("count", 0, "go test -count (default 5, or 3 with -short)")
	pattern := flag.String("bench", ".", "go test -bench pattern")
	in := flag.String("in", "", "render this saved go test output instead of running the benchmarks")
	rawPath := flag.String("raw", "", "where to save the raw go test output (default results/raw-MODE.txt)")
	out := flag.String("o", "", "also write the markdown to this file")
	flag.Parse()

	dir, err := moduleDir()
	if err != nil {
		return err
	}
	mode := "full"
	if *short {
		mode = "short"
	}
	if *count == 0 {
		*count = 5
		if *short {
			*count = 3
		}
	}

	var raw []byte
	cmdline := ""
	if *in != "" {
		if raw, err = os.ReadFile(*in); err != nil {
			return err
		}
		cmdline = "(rendered from " + *in + ")"
	} else {
		args := []string{"test", "-run", "^$", "-bench", *pattern, "-benchtime", "1x",
			"-count", strconv.Itoa(*count), "-timeout", "60m"}
		if *short {
			args = append(args, "-short")
		}
		args = append(args, "./internal/suite")
		cmdline = "go " + strings.Join(args, " ")
		fmt.Fprintln(os.Stderr, "benchtable: in", dir, "running", cmdline)
		start := time.Now()
		raw, err = goTest(dir, args)
		fmt.Fprintf(os.Stderr, "benchtable: go test took %v\n", time.Since(start).Round(time.Second))
		p := *rawPath
		if p == "" {
			p = filepath.Join(dir, "results", "raw-"+mode+".txt")
		}
		if werr := writeFile(p, raw); werr != nil {
			return werr
		}
		fmt.Fprintln(os.Stderr, "benchtable: raw output in", p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable: go test failed:", err, "(the table shows what ran)")
		}
	}

	res := parse(bytes.NewReader(raw))
	var md strings.Builder
	fmt.Fprintf(&md, "Mode: **%s** · `%s` · %s\n\n", mode, cmdline, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	md.WriteString(machineInfo(dir, res))
	md.WriteString(sizes(*short))
	md.WriteString("\n")
	md.WriteString(table(res, *short))
	fmt.Print(md.String())
	if *out != "" {
		return writeFile(*out, []byte(md.String()))
	}
	return nil
}

// goTest runs go with args in dir, copying its output to stderr as it
// comes, and returns the output.
func goTest(dir string, args []string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var buf bytes.Buffer
	w := io.MultiWriter(&buf, os.Stderr)
	cmd.Stdout = w
	cmd.Stderr = w
	err := cmd.Run()
	return buf.Bytes(), err
}

func writeFile(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

// moduleDir finds the bench module's directory from the working directory up.
func moduleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil &&
			bytes.Contains(b, []byte("module github.com/leasebus/leasebus/bench\n")) {
			return d, nil
		}
		if sub := filepath.Join(d, "bench", "go.mod"); fileExists(sub) && d != filepath.Dir(d) {
			if b, err := os.ReadFile(sub); err == nil && bytes.Contains(b, []byte("module github.com/leasebus/leasebus/bench\n")) {
				return filepath.Join(d, "bench"), nil
			}
		}
		if d == filepath.Dir(d) {
			return "", errors.New("run me inside the bench module (github.com/leasebus/leasebus/bench)")
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Results are the parsed benchmark output.
type Results struct {
	Runs   map[string][]map[string]float64 // "W2/leasebus" → one map (unit → value) per run
	Logs   map[string]string               // "Mem/leasebus" → its first log line
	Failed map[string]string               // "W2/leasebus" → the first line of its failure
	Header map[string]string               // goos, goarch, cpu, pkg
}

// parse reads go test -bench output.
func parse(r io.Reader) *Results {
	res := &Results{Runs: map[string][]map[string]float64{}, Logs: map[string]string{},
		Failed: map[string]string{}, Header: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	pending, pendingKind := "", "" // the benchmark whose log or failure lines follow
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "--- BENCH: "), strings.HasPrefix(trimmed, "--- FAIL: Benchmark"):
			pendingKind = "log"
			if strings.Contains(line, "FAIL") {
				pendingKind = "fail"
			}
			f := strings.Fields(trimmed)
			pending = name(f[2])
			if pendingKind == "fail" {
				res.Failed[pending] = "failed"
			}
			continue
		case pending != "" && strings.HasPrefix(line, "    ") && !strings.HasPrefix(trimmed, "---"):
			msg := trimmed
			if i := strings.Index(msg, ": "); i >= 0 && strings.Contains(msg[:i], ".go:") {
				msg = msg[i+2:]
			}
			if pendingKind == "fail" {
				if res.Failed[pending] == "failed" {
					res.Failed[pending] = msg
				}
			} else if _, ok := res.Logs[pending]; !ok {
				res.Logs[pending] = msg
			}
			continue
		}
		pending = ""
		for _, k := range []string{"goos", "goarch", "cpu", "pkg"} {
			if v, ok := strings.CutPrefix(line, k+": "); ok {
				res.Header[k] = v
			}
		}
		n, m, ok := parseLine(line)
		if ok {
			res.Runs[n] = append(res.Runs[n], m)
		}
	}
	return res
}

// parseLine parses one benchmark result line: its name without
// "Benchmark" and the -GOMAXPROCS suffix, and its metrics by unit.
func parseLine(line string) (string, map[string]float64, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
		return "", nil, false
	}
	if _, err := strconv.Atoi(f[1]); err != nil {
		return "", nil, false
	}
	m := map[string]float64{}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return "", nil, false
		}
		m[f[i+1]] = v
	}
	return name(f[0]), m, true
}

// name strips "Benchmark" and the -N GOMAXPROCS suffix.
func name(s string) string {
	s = strings.TrimPrefix(s, "Benchmark")
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		if _, err := strconv.Atoi(s[i+1:]); err == nil {
			s = s[:i]
		}
	}
	return s
}

// stat is the median of a metric over runs and its spread: the largest
// distance of a run from the median, in percent of the median.
type stat struct {
	median, spread float64
	n              int
}

func summarize(runs []map[string]float64, unit string) (stat, bool) {
	var vs []float64
	for _, r := range runs {
		if v, ok := r[unit]; ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return stat{}, false
	}
	slices.Sort(vs)
	var med float64
	if k := len(vs); k%2 == 1 {
		med = vs[k/2]
	} else {
		med = (vs[k/2-1] + vs[k/2]) / 2
	}
	s := stat{median: med, n: len(vs)}
	if med != 0 {
		s.spread = max(vs[len(vs)-1]-med, med-vs[0]) / med * 100
	}
	return s, true
}

// headline is the metric the ratio to the floor compares.
func headline(k suite.Kind) string {
	switch k {
	case suite.Latency:
		return "p50-ns"
	case suite.Memory:
		return "held-B/msg"
	}
	return "ns/msg"
}

func table(res *Results, short bool) string {
	maxN := 0 // -count: the most runs any row has
	for _, runs := range res.Runs {
		maxN = max(maxN, len(runs))
	}
	var b strings.Builder
	b.WriteString("| workload | implementation | time/run (median) | ± | ns/msg | allocs/msg | B/msg | × floor | notes |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, w := range suite.Workloads {
		floor, hasFloor := summarize(res.Runs[w.Bench+"/"+suite.FloorName], headline(w.Kind))
		for i, impl := range suite.Impls {
			label := ""
			if i == 0 {
				label = w.Title
			}
			key := w.Bench + "/" + impl.Name
			runs := res.Runs[key]
			cells := []string{label, impl.Name}
			switch {
			case len(runs) > 0:
				cells = append(cells, rowCells(w, runs, res.Logs[key], floor, hasFloor, short, maxN)...)
			case impl.Skip(w, short) != "":
				cells = append(cells, "n/a", "", "", "", "", "", "n/a: "+impl.Skip(w, short))
			case res.Failed[key] != "":
				cells = append(cells, "failed", "", "", "", "", "", "failed: "+res.Failed[key])
			case impl.Messages(w, short) == 0:
				cells = append(cells, "—", "", "", "", "", "", "full mode only")
			default:
				cells = append(cells, "—", "", "", "", "", "", "not run")
			}
			b.WriteString("| " + strings.Join(escape(cells), " | ") + " |\n")
		}
	}
	return b.String()
}

func rowCells(w suite.Workload, runs []map[string]float64, log string, floor stat, hasFloor, short bool, maxN int) []string {
	get := func(unit string) (stat, bool) { return summarize(runs, unit) }
	var notes []string
	ratio := ""
	if h, ok := get(headline(w.Kind)); ok && hasFloor && floor.median > 0 {
		ratio = fmt.Sprintf("×%.2f", h.median/floor.median)
	}
	if w.Kind == suite.Memory {
		held, _ := get("held-B/msg")
		if log != "" {
			notes = append(notes, "held: "+log)
		}
		notes = append(notes, countNote(held.n, maxN)...)
		return []string{"—", "", "", "", num(held.median), ratio, strings.Join(notes, "; ")}
	}
	op, _ := get("ns/op")
	nsMsg, _ := get("ns/msg")
	allocs, _ := get("allocs/msg")
	bytes, _ := get("B/msg")
	if msgs, ok := get("msgs"); ok && int(msgs.median) < w.Size(short) {
		notes = append(notes, fmt.Sprintf("%d of %d msgs per run", int(msgs.median), w.Size(short)))
	}
	if w.Kind == suite.Latency {
		p50, _ := get("p50-ns")
		p90, _ := get("p90-ns")
		p99, _ := get("p99-ns")
		notes = append([]string{fmt.Sprintf("p50 %s · p90 %s · p99 %s; ns/msg is the mean",
			dur(p50.median), dur(p90.median), dur(p99.median))}, notes...)
	}
	notes = append(notes, countNote(op.n, maxN)...)
	spread := "—" // one run has none
	if op.n > 1 {
		spread = fmt.Sprintf("±%.0f%%", op.spread)
	}
	return []string{dur(op.median), spread, num(nsMsg.median),
		num(allocs.median), num(bytes.median), ratio, strings.Join(notes, "; ")}
}

// countNote notes a row with fewer runs than -count (see suite.Impl.Runs).
func countNote(n, maxN int) []string {
	if n < maxN {
		return []string{fmt.Sprintf("n=%d", n)}
	}
	return nil
}

func escape(cells []string) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	return out
}

// num formats a per-message number with 3 significant digits.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v >= 0.01:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// dur formats nanoseconds as a duration with 3 significant digits.
func dur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3g s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	}
	return fmt.Sprintf("%.3g ns", ns)
}

// sizes lists the workloads' sizes in this mode: the titles give the full
// mode's.
func sizes(short bool) string {
	if !short {
		return "- sizes: full mode, as in the row titles (implementations that run fewer say so in their notes)\n"
	}
	var parts []string
	for _, w := range suite.Workloads {
		if n := w.Size(true); n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", w.Bench, n))
		} else {
			parts = append(parts, w.Bench+" not run")
		}
	}
	return "- sizes: short mode, messages (deliveries, round trips) per run: " + strings.Join(parts, ", ") +
		"; the row titles give the full mode's\n"
}

// machineInfo describes where the numbers come from.
func machineInfo(dir string, res *Results) string {
	var b strings.Builder
	goVersion := strings.TrimSpace(output(dir, "go", "version"))
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	cpu := res.Header["cpu"]
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	fmt.Fprintf(&b, "- `%s`, %d CPUs (nproc %s), CPU: %s, GOMAXPROCS %d\n", goVersion, runtime.NumCPU(),
		strings.TrimSpace(output(dir, "nproc")), cpu, runtime.GOMAXPROCS(0))
	rev := strings.TrimSpace(output(dir, "git", "-C", "..", "rev-parse", "--short", "HEAD"))
	if rev != "" {
		if strings.TrimSpace(output(dir, "git", "-C", "..", "status", "--porcelain", "--untracked-files=no")) != "" {
			rev += " + uncommitted changes"
		}
		fmt.Fprintf(&b, "- leasebus: the working tree at %s (through go.work)\n", rev)
	}
	mods := output(dir, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}",
		"gocloud.dev", "github.com/ThreeDotsLabs/watermill", "maragu.dev/goqite", "modernc.org/sqlite", "github.com/benbjohnson/clock")
	if mods = strings.TrimSpace(mods); mods != "" {
		b.WriteString("- peers: " + strings.ReplaceAll(mods, "\n", ", ") + "\n")
	}
	return b.String()
}

func output(dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return string(out)
}
