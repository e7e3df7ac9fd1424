package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/natsleasebus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, "", 20, &out, nil); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	for _, want := range []string{"20 jobs: 19 acked", "6 retries, 1 dead-lettered", "dead letter: job 13 after 3 attempts (max-attempts): mailbox does not exist"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// After the run, the console over the bus shows the subscription and the
// dead-lettered job, and redrives it with an edited payload.
func TestRunThenConsole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, "", 13, &out, func(ctx context.Context, bus *natsleasebus.Bus) error {
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		return serveConsole(ctx, bus, "127.0.0.1:0", &out, func(url string) {
			defer stop()
			var o console.Overview
			getJSON(t, url+"api/overview", &o)
			if len(o.Subscriptions) != 1 || o.Subscriptions[0].DeadLettersHeld != 1 {
				t.Errorf("overview: %+v (job 13 dead-lettered)", o.Subscriptions)
			}
			var l console.DeadLetterList
			getJSON(t, url+"api/dead-letters?error=mailbox", &l)
			if len(l.Letters) != 1 {
				t.Fatalf("dead letters: %+v", l)
			}
			resp, err := http.PostForm(url+"api/actions/redrive-edited", neturl.Values{
				"ref": {l.Letters[0].Ref}, "kind": {"json"}, "payload": {`{"id":13,"email":"user13@example.org"}`}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("redrive-edited: %s", resp.Status)
			}
			getJSON(t, url+"api/overview", &o)
			if row := o.Subscriptions[0]; row.DeadLettersHeld != 0 || row.Visible != 1 {
				t.Errorf("after the redrive: %+v", row)
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "console at http://127.0.0.1:") {
		t.Errorf("output: %s", out.String())
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
