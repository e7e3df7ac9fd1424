package browsertest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasebus/leasebus/console"
)

// demo is the console demo running as its own process.
type demo struct {
	url   string
	lines chan string // what it prints, line by line; closed when it exits
	seen  []string    // the lines read from it so far
}

// startDemo builds and starts examples/console on a free port, with no
// orders arriving by themselves (unless flags say otherwise: the last
// -every wins), and returns once it serves.
func startDemo(t *testing.T, flags ...string) *demo {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "console-demo")
	build := exec.Command("go", "build", "-o", bin, "./examples/console")
	build.Dir = filepath.Join("..", "..") // the core module's root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0", "-every", "0", "-history", "1s"}, flags...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	d := &demo{lines: make(chan string, 1024)}
	go func() {
		defer close(d.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
	}()
	first := d.await(t, "console: ")
	d.url = strings.TrimSuffix(strings.TrimPrefix(first, "console: "), "/")
	return d
}

// await returns the first line the demo printed, or prints, that
// contains want.
func (d *demo) await(t *testing.T, want string) string {
	t.Helper()
	for _, line := range d.seen {
		if strings.Contains(line, want) {
			return line
		}
	}
	for line := range d.lines {
		t.Logf("demo: %s", line)
		d.seen = append(d.seen, line)
		if strings.Contains(line, want) {
			return line
		}
	}
	t.Fatalf("the demo exited before printing %q", want)
	return ""
}

func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LEASEBUS_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("LEASEBUS_BROWSER") == "required" {
		t.Fatal("no Chromium found, and LEASEBUS_BROWSER=required (install Debian's chromium package)")
	}
	t.Skip("no Chromium found: install Debian's chromium package to run the browser test")
	return ""
}

// browser starts a headless Chromium for the test, with the flags a
// machine without an outside network needs.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// A bound on the whole test, so that a hung browser fails it rather
	// than CI's limit; no step waits on it.
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	return ctx
}

// shot saves a screenshot of the whole page as name.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := os.Getenv("LEASEBUS_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// textJS is a JavaScript expression for the trimmed text of the element
// sel selects in the current document ("" when there is none). Reading
// through the page's own DOM, not DevTools node IDs, keeps a read right
// after a navigation from seeing the document before it.
func textJS(sel css) string {
	return fmt.Sprintf(`((e) => e ? e.textContent.trim() : "")(document.querySelector(%q))`, string(sel))
}

// textOf returns an element's text, trimmed.
func textOf(t *testing.T, ctx context.Context, sel css) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](textJS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// awaitText waits until the element sel selects says want: after a form
// posts and the page it returns to loads. It fails with what it says.
func awaitText(t *testing.T, ctx context.Context, sel css, want string) {
	t.Helper()
	expr := fmt.Sprintf("%s === %q", textJS(sel), want)
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr))
		if err == nil {
			return
		}
		// A poll that began on the page the form left ends with a
		// DevTools error (-32000: target navigated, context gone) when it
		// navigates: poll the new one.
		if strings.Contains(err.Error(), "-32000") && ctx.Err() == nil {
			continue
		}
		t.Fatalf("%s: %q, want %q (%v)", sel, textOf(t, ctx, sel), want, err)
	}
}

// do runs steps, failing the test with what step says on an error.
func do(t *testing.T, ctx context.Context, step string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: the browser did not finish in time: %v", step, err)
		}
		t.Fatalf("%s: %v", step, err)
	}
}

type css = chromedp.CSS
type xpath = chromedp.Search

func TestAPersonFixesADeadLetterInTheConsole(t *testing.T) {
	ctx := browser(t)
	d := startDemo(t)
	d.await(t, "order 1009 dead-lettered: card expired")
	d.await(t, "order 1004 dead-lettered: card declined")

	// The overview: every subscription, and billing's two dead letters.
	do(t, ctx, "overview", chromedp.Navigate(d.url+"/"), chromedp.WaitVisible(css("#subscriptions")))
	subs := textOf(t, ctx, css("#subscriptions"))
	for _, want := range []string{"billing", "shipping", "audit", "pattern"} {
		if !strings.Contains(subs, want) {
			t.Errorf("overview: %q missing from %q", want, subs)
		}
	}
	if letters := textOf(t, ctx, css(`tr[data-name="billing"] [data-f="letters"]`)); !strings.HasPrefix(letters, "2 held") {
		t.Errorf("billing's dead letters: %q, want 2 held", letters)
	}
	// The live update has run twice once a rate shows a number; until then
	// a rate says it is measuring.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('tr[data-name="billing"] [data-f="publishRate"]').textContent !== "…"`)); err != nil {
		t.Fatalf("the overview never updated itself: %v", err)
	}
	// The live clock reads as the page printed it: milliseconds, UTC.
	if now := textOf(t, ctx, css("#now")); !regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$`).MatchString(now) {
		t.Errorf("the overview's clock after a live update: %q, want 2006-01-02 15:04:05.000", now)
	}
	shot(t, ctx, "overview.png")

	// Why did it die? Follow the dead letters to the declined card.
	do(t, ctx, "find the dead letters",
		chromedp.Click(css(`tr[data-name="billing"] [data-f="letters"] a`)),
		chromedp.WaitVisible(css("#letters")))
	if total := textOf(t, ctx, css("#total")); total != "2 matches." {
		t.Fatalf("dead letters of billing: %q", total)
	}
	shot(t, ctx, "dead-letters.png")
	do(t, ctx, "open the declined one",
		chromedp.Click(xpath(`//tr[td[contains(., "card declined")]]//a[@class="letter"]`)),
		chromedp.WaitVisible(css("#edit")))
	if e := textOf(t, ctx, css("#last-error")); e != "card declined" {
		t.Fatalf("last error %q", e)
	}
	payload, err := chromedp.Run(ctx, chromedp.Value(css("#edit")))
	if err != nil {
		t.Fatal(err)
	}
	shot(t, ctx, "dead-letter.png")
	const declined, good = "4000-0000-0000-0002", "4242-4242-4242-4242"
	if !strings.Contains(payload, declined) {
		t.Fatalf("the payload to edit does not hold the declined card: %q", payload)
	}

	// Fix the card, redrive, and watch billing ack it.
	do(t, ctx, "redrive with the fixed card",
		chromedp.SetValue(css("#edit"), strings.Replace(payload, declined, good, 1)),
		chromedp.Click(css("#redrive-edited")),
		chromedp.WaitVisible(css("#done")))
	awaitText(t, ctx, css("#done"), "Redrove 1 dead letter.")
	// Billing acks every good order, and now the fixed one.
	for _, n := range []int{1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1010, 1011, 1012} {
		d.await(t, fmt.Sprintf("order %d charged", n))
	}
	do(t, ctx, "billing's page", chromedp.Navigate(d.url+"/subscription?topic=orders&name=billing"), chromedp.WaitVisible(css("#acked")))
	if acked := textOf(t, ctx, css("#acked")); acked != "11" {
		t.Errorf("billing acked %s, want 11 (10 good orders and the fixed one)", acked)
	}
	shot(t, ctx, "billing.png")

	// Discard the expired card's letter by selecting it.
	do(t, ctx, "discard the other",
		chromedp.Navigate(d.url+"/dead-letters"),
		chromedp.Click(xpath(`//tr[td[contains(., "card expired")]]//input[@type="checkbox"]`)),
		chromedp.Click(css("#discard-selected")),
		chromedp.WaitVisible(css("#done")))
	awaitText(t, ctx, css("#done"), "Discarded 1 dead letter.")
	awaitText(t, ctx, css("#total"), "0 matches.")

	// Pause shipping, resume it, then purge it.
	do(t, ctx, "pause shipping",
		chromedp.Navigate(d.url+"/subscription?topic=orders&name=shipping"),
		chromedp.Click(css("#pause")),
		chromedp.WaitVisible(css("#paused")))
	awaitText(t, ctx, css("#done"), "Paused.")
	awaitText(t, ctx, css("#paused"), "paused")
	shot(t, ctx, "shipping-paused.png")
	do(t, ctx, "resume shipping", chromedp.Click(css("#resume")), chromedp.WaitVisible(css("#pause")))
	awaitText(t, ctx, css("#done"), "Resumed.")
	depth := textOf(t, ctx, css("#depth"))
	do(t, ctx, "purge shipping",
		chromedp.Click(css("#purge-confirm")),
		chromedp.Click(css("#purge")),
		chromedp.WaitVisible(css("#done")))
	awaitText(t, ctx, css("#done"), "Purged "+depth+" messages.")
	awaitText(t, ctx, css("#depth"), "0")

	// The schedules: the daily report's next slot, then a fire by hand,
	// which publishes one report now.
	do(t, ctx, "schedules",
		chromedp.Click(xpath(`//nav/a[. = "Schedules"]`)),
		chromedp.WaitVisible(css("#schedules")))
	row := css(`tr[data-schedule="daily-sales-report"]`)
	if next := textOf(t, ctx, row+` [data-f="next"]`); !regexp.MustCompile(`^\d{4}-\d{2}-\d{2} 06:00:00\.000$`).MatchString(next) {
		t.Errorf("the report's next slot: %q, want 06:00 UTC", next)
	}
	do(t, ctx, "fire the report now",
		chromedp.Click(row+` button.trigger`),
		chromedp.WaitVisible(css("#done")))
	awaitText(t, ctx, css("#done"), "Fired schedule daily-sales-report now.")
	awaitText(t, ctx, row+` [data-f="fired"]`, "0 + 1")
	shot(t, ctx, "schedules.png")

	// What the pages showed is what the console's JSON says.
	resp, err := http.Get(d.url + "/api/overview")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o console.Overview
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		t.Fatal(err)
	}
	got := map[string]console.SubscriptionRow{}
	for _, s := range o.Subscriptions {
		got[s.Name] = s
	}
	if b, s := got["billing"], got["shipping"]; b.Acked != 11 || b.DeadLettersHeld != 0 || s.Paused || s.Depth != 0 || o.DeadLetters.Discarded != 1 {
		t.Errorf("api/overview: billing %+v, shipping %+v, store %+v", b, s, o.DeadLetters)
	}
	if r := got["reporting"]; r.Depth != 1 {
		t.Errorf("api/overview: reporting %+v, want the report fired by hand", r)
	}
}

// apiGet decodes the console's JSON at path into v.
func apiGet(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// An on-call engineer's round: why a letter died (each attempt), which
// handler is stuck, how billing did over time, then a message a ticket
// names: found by its ID, its payload edited, made visible, and another
// deleted.
func TestOnCallFindsActsAndLooksBack(t *testing.T) {
	ctx := browser(t)
	d := startDemo(t, "-every", "150ms") // orders arrive: the charts have something to show
	d.await(t, "order 1004 dead-lettered: card declined")

	// Each attempt of the declined card's letter.
	do(t, ctx, "the declined card's letter",
		chromedp.Navigate(d.url+"/dead-letters?error=declined"),
		chromedp.Click(css(`a.letter`)),
		chromedp.WaitVisible(css("#attempts")))
	attempts := textOf(t, ctx, css("#attempts tbody"))
	if n := strings.Count(attempts, "card declined"); n != 3 {
		t.Errorf("attempts: %q, want three with card declined", attempts)
	}
	if n := strings.Count(attempts, "failed"); n != 3 {
		t.Errorf("attempts: %q, want three failed", attempts)
	}
	shot(t, ctx, "dead-letter-attempts.png")

	// The workers: the label printer's one worker is busy on the label.
	do(t, ctx, "workers",
		chromedp.Click(xpath(`//nav/a[. = "Workers"]`)),
		chromedp.WaitVisible(css(`section[data-pool="label-printer"]`)))
	awaitText(t, ctx, css(`section[data-pool="label-printer"] [data-f="busy"]`), "1 / 1")
	stuck := textOf(t, ctx, css(`section[data-pool="label-printer"] tbody tr`))
	if !strings.Contains(stuck, "labels") {
		t.Errorf("the printer's handler: %q, want its label's message", stuck)
	}
	shot(t, ctx, "workers.png")

	// Cancel the stuck label, its message deleted: the handler's context
	// ends, it returns, and the printer is idle.
	do(t, ctx, "cancel the stuck label",
		chromedp.SetValue(css(`section[data-pool="label-printer"] form.cancel select`), "delete"),
		chromedp.Click(css(`section[data-pool="label-printer"] form.cancel button`)),
		chromedp.WaitVisible(css("#done")))
	if msg := textOf(t, ctx, css("#done")); !strings.Contains(msg, "Cancelled the job") || !strings.Contains(msg, "delete") {
		t.Errorf("after the cancel: %q", msg)
	}
	for {
		var w console.WorkersView
		apiGet(t, d.url+"/api/workers", &w)
		if i := slices.IndexFunc(w.Pools, func(p console.PoolRow) bool { return p.Name == "label-printer" }); i >= 0 && w.Pools[i].Busy == 0 && w.Pools[i].Stats.Acked == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the label printer's job never ended")
		}
		runtime.Gosched()
	}
	do(t, ctx, "the printer idle",
		chromedp.Navigate(d.url+"/workers"),
		chromedp.WaitVisible(css(`section[data-pool="label-printer"]`)))
	awaitText(t, ctx, css(`section[data-pool="label-printer"] [data-f="busy"]`), "0 / 1")

	// The history: billing's chart has points (a point a second here).
	for {
		var h console.HistoryView
		apiGet(t, d.url+"/api/history?topic=orders&name=billing", &h)
		if len(h.Series) == 1 && len(h.Series[0].Points) >= 6 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("billing's history never had six points")
		}
		runtime.Gosched()
	}
	do(t, ctx, "billing's page", chromedp.Navigate(d.url+"/subscription?topic=orders&name=billing"), chromedp.WaitVisible(css("#history")))
	points, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelector("#history polyline.published").getAttribute("points").trim().split(" ").length`))
	if err != nil {
		t.Fatal(err)
	}
	if points < 6 {
		t.Errorf("billing's chart has %d points, want at least 6", points)
	}
	shot(t, ctx, "history.png")

	// A ticket names order 2001, scheduled for later: find it by its ID.
	var sub console.SubscriptionView
	apiGet(t, d.url+"/api/subscription?topic=orders&name=shipping&state=delayed", &sub)
	if len(sub.Messages) != 3 {
		t.Fatalf("shipping's delayed orders: %+v", sub.Messages)
	}
	first, second := sub.Messages[0].ID.String(), sub.Messages[1].ID.String()
	do(t, ctx, "search for it",
		chromedp.SetValue(css("#search-q"), first),
		chromedp.Submit(css("#search-q")),
		chromedp.WaitVisible(css("#found-held")))
	found := textOf(t, ctx, css("#found-held tbody"))
	for _, want := range []string{"orders / shipping", "orders / billing", "delayed"} {
		if !strings.Contains(found, want) {
			t.Errorf("search for %s: %q, want %q", first, found, want)
		}
	}
	shot(t, ctx, "search.png")

	// Its page: edit the amount, then make it visible now.
	do(t, ctx, "open shipping's copy",
		chromedp.Click(xpath(`//tr[td[contains(., "orders / shipping")]]//a`)),
		chromedp.WaitVisible(css("#edit")))
	payload, err := chromedp.Run(ctx, chromedp.Value(css("#edit")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(payload, `"amount": 99`) {
		t.Fatalf("order 2001's payload: %q", payload)
	}
	do(t, ctx, "edit its amount",
		chromedp.SetValue(css("#edit"), strings.Replace(payload, `"amount": 99`, `"amount": 89`, 1)),
		chromedp.Click(css("#save-payload")),
		chromedp.WaitVisible(css("#done")))
	awaitText(t, ctx, css("#done"), "Edited the payload: the next delivery carries it.")
	shot(t, ctx, "message.png")
	do(t, ctx, "make it visible", chromedp.Click(css("#make-visible")), chromedp.WaitVisible(css("#done")))
	awaitText(t, ctx, css("#done"), "Made 1 message visible.")
	awaitText(t, ctx, css("#state"), "visible")
	var m console.MessageView
	if status := apiGet(t, d.url+"/api/message?topic=orders&name=shipping&id="+first, &m); status != http.StatusOK {
		t.Fatalf("api/message: %d", status)
	}
	if m.Message.State != "visible" || !strings.Contains(m.Message.Payload.Text, `"amount": 89`) {
		t.Errorf("the broker holds %+v, want it visible with amount 89", m.Message)
	}
	var billing console.MessageView
	apiGet(t, d.url+"/api/message?topic=orders&name=billing&id="+first, &billing)
	if !strings.Contains(billing.Message.Payload.Text, `"amount": 99`) {
		t.Errorf("billing's copy changed: %+v", billing.Message)
	}

	// Delete the next one from its page.
	do(t, ctx, "delete order 2002",
		chromedp.Navigate(d.url+"/message?topic=orders&name=shipping&id="+second),
		chromedp.Click(css("#delete-confirm")),
		chromedp.Click(css("#delete")),
		chromedp.WaitVisible(css("#done")))
	awaitText(t, ctx, css("#done"), "Deleted 1 message.")
	if status := apiGet(t, d.url+"/api/message?topic=orders&name=shipping&id="+second, &m); status != http.StatusNotFound {
		t.Errorf("api/message of the deleted one: %d, want 404", status)
	}
}
