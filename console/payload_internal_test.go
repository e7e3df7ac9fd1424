package console

import (
	"strings"
	"testing"
)

// browserSends is what a browser submits for a textarea that holds text
// (the page writes a line break before it, which the HTML parser drops):
// every line break, CR, LF or CRLF, as CRLF.
func browserSends(text string) string {
	return strings.ReplaceAll(lines(text), "\n", "\r\n")
}

func TestEditedPayloads(t *testing.T) {
	type order struct {
		Card string `json:"card"`
		N    int    `json:"n"`
	}
	same := func(s string) string { return s }
	for _, c := range []struct {
		orig, want string
		edit       func(string) string
	}{
		{"\nline one\nline two\n", "\nline one\nline two\n", same},
		{"a\r\nb\r\n", "a\r\nb\r\n", same},
		{`{ "a" : 1 }`, `{ "a" : 1 }`, same},
		{`{"a":1}`, `{"a":2}`, func(s string) string { return strings.Replace(s, "1", "2", 1) }},
		{`{ "a" : 1 }`, "{\n  \"a\": 2\n}", func(s string) string { return strings.Replace(s, "1", "2", 1) }},
		{"a\r\nb", "a\r\nc", func(s string) string { return strings.Replace(s, "b", "c", 1) }},
		{"a\nb", "a\nc", func(s string) string { return strings.Replace(s, "b", "c", 1) }},
		{"mixed\r\nand\n", "mixed\nand\nx", func(s string) string { return s + "x" }},
		{"\xff\xfe", "\xff\xfe", same},
	} {
		shown := ShowPayload(c.orig)
		got, err := edited(c.orig, browserSends(c.edit(shown.Text)), shown.Kind)
		if err != nil || got != c.want {
			t.Errorf("%q: %q, %v; want %q", c.orig, got, err, c.want)
		}
	}
	// A typed payload, shown as its JSON, decodes from the edit.
	o := order{Card: "4000", N: 1}
	shown := ShowPayload(o)
	got, err := edited(o, browserSends(strings.Replace(shown.Text, "4000", "4242", 1)), shown.Kind)
	if err != nil || got != (order{Card: "4242", N: 1}) {
		t.Errorf("order: %+v, %v", got, err)
	}
	if _, err := edited(o, `{"card": 1}`, "json"); err == nil {
		t.Error("a payload that does not decode was taken")
	}
	// NUL and other controls are not text a browser gives back: shown as bytes.
	if k := ShowPayload("a\x00b").Kind; k != "bytes" {
		t.Errorf("a NUL in text shown as %s", k)
	}
}
