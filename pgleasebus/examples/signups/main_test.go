package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/pgleasebus"
)

// databaseURL returns the test database (.ci/run starts one), or skips.
func databaseURL(t *testing.T) string {
	url := os.Getenv("LEASEBUS_TEST_POSTGRES")
	if url == "" {
		if os.Getenv("LEASEBUS_REQUIRE_POSTGRES") != "" {
			t.Fatal("LEASEBUS_REQUIRE_POSTGRES is set but LEASEBUS_TEST_POSTGRES is not")
		}
		t.Skip("set LEASEBUS_TEST_POSTGRES to a PostgreSQL URL to run the example (bash .ci/run starts one)")
	}
	return url
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	var overview console.Overview
	err := run(ctx, databaseURL(t), 30, &out, func(ctx context.Context, bus *pgleasebus.Bus) error {
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		return serveConsole(ctx, bus, "127.0.0.1:0", &out, func(url string) {
			defer stop()
			resp, err := http.Get(url + "api/overview")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if err := json.NewDecoder(resp.Body).Decode(&overview); err != nil {
				t.Error(err)
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	for _, want := range []string{
		"signup 3 rolled back: no user, no mail",
		"29 users stored, 29 mails: 28 sent, 9 retries, 1 dead-lettered",
		"dead letter: mail to bounce@invalid after 3 attempts (max-attempts): mailbox does not exist",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if len(overview.Subscriptions) != 1 || overview.DeadLetters.Held != 1 {
		t.Errorf("console overview: %+v", overview)
	}
}
