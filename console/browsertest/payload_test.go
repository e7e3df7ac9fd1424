package browsertest

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
)

// A payload redriven from its dead letter's page comes back byte for byte
// when nobody edits it, in a real browser: a leading line break (which the
// HTML parser drops after <textarea>), LF line breaks (which a browser
// sends as CRLF), CRLF ones, JSON with its own spacing, and bytes that are
// not text (shown and sent as base64). An edit keeps the payload's line
// breaks and, for compact JSON, its compactness.
func TestPayloadsRoundTripThroughTheBrowser(t *testing.T) {
	ctx := browser(t)
	b, err := broker.New[string](broker.WithSubscriptionDefaults(broker.WithMaxAttempts(1)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTopic("jobs"); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe("jobs", "worker")
	if err != nil {
		t.Fatal(err)
	}
	c, err := console.New(b)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name, payload string
		edit          func(string) string // nil: redrive as shown
		want          string
	}{
		{name: "leading and trailing line breaks", payload: "\nline one\nline two\n"},
		{name: "CRLF line breaks", payload: "a\r\nb\r\n"},
		{name: "a lone CR", payload: "a\rb"},
		{name: "JSON with its own spacing", payload: `{ "a" : "x  y" ,"b":[1,  2] }`},
		{name: "compact JSON", payload: `{"a":"x  y","b":[1,2]}`},
		{name: "bytes", payload: "\xff\x00\x01bin"},
		{name: "a NUL in text", payload: "a\x00b"},
		{name: "an edit keeps CRLF", payload: "a\r\nb\r\n", edit: func(s string) string { return s + "c\n" }, want: "a\r\nb\r\nc\r\n"},
		{name: "an edit keeps LF", payload: "\nx\n", edit: func(s string) string { return strings.Replace(s, "x", "y", 1) }, want: "\ny\n"},
		{name: "an edit of compact JSON stays compact", payload: `{"card":"4000","n":1}`,
			edit: func(s string) string { return strings.Replace(s, "4000", "4242", 1) }, want: `{"card":"4242","n":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.Publish(context.Background(), "jobs", tc.payload); err != nil {
				t.Fatal(err)
			}
			ds := sub.TryPoll(1)
			if len(ds) != 1 {
				t.Fatalf("polled %d", len(ds))
			}
			if err := sub.Fail(ds[0].LeaseID, errors.New("bad input")); err != nil {
				t.Fatal(err)
			}
			letters := b.DeadLetters()
			if len(letters) != 1 {
				t.Fatalf("%d dead letters", len(letters))
			}
			ref := console.NewDeadLetterView(letters[0]).Ref
			do(t, ctx, "open the dead letter", chromedp.Navigate(srv.URL+"/dead-letter?ref="+url.QueryEscape(ref)), chromedp.WaitVisible(css("#edit")))
			if tc.edit != nil {
				shown, err := chromedp.Run(ctx, chromedp.Value(css("#edit")))
				if err != nil {
					t.Fatal(err)
				}
				do(t, ctx, "edit", chromedp.SetValue(css("#edit"), tc.edit(shown)))
			}
			do(t, ctx, "redrive with this payload", chromedp.Click(css("#redrive-edited")), chromedp.WaitVisible(css("#done")))
			awaitText(t, ctx, css("#done"), "Redrove 1 dead letter.")
			ds = sub.TryPoll(1)
			if len(ds) != 1 {
				t.Fatalf("after the redrive the subscription holds %d", len(ds))
			}
			want := tc.payload
			if tc.edit != nil {
				want = tc.want
			}
			if ds[0].Payload != want {
				t.Errorf("redriven payload %q, want %q", ds[0].Payload, want)
			}
			if err := sub.Ack(ds[0].LeaseID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
