package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasebus/leasebus/queue"
)

// previewLen is how many characters of a payload the lists show.
const previewLen = 120

// Payload is a message's payload as the console shows it. Kind says how
// Text reads: "json" (indented), "text" (UTF-8 that is not JSON, with no
// control character but tab, LF and CR) or "bytes" (base64 of anything
// else).
type Payload struct {
	Kind    string `json:"kind"`
	Text    string `json:"text"`
	Preview string `json:"-"`
	Size    int    `json:"size"` // bytes
}

// ShowPayload renders a payload as the console shows it: a []byte or
// string payload as JSON when it is JSON, else as text (UTF-8) or bytes
// (base64); a payload of any other type as its JSON encoding.
func ShowPayload[T any](v T) Payload {
	var raw []byte
	switch p := any(v).(type) {
	case []byte:
		raw = p
	case string:
		raw = []byte(p)
	default:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // the pages escape it; the JSON is never read as HTML
		if err := enc.Encode(v); err != nil {
			return payloadOf("text", fmt.Sprintf("%+v", v), 0)
		}
		raw = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	var out bytes.Buffer
	switch {
	case len(raw) > 0 && json.Valid(raw) && json.Indent(&out, raw, "", "  ") == nil:
		return payloadOf("json", out.String(), len(raw))
	case utf8.Valid(raw) && !hasControl(raw):
		return payloadOf("text", string(raw), len(raw))
	default:
		return payloadOf("bytes", base64.StdEncoding.EncodeToString(raw), len(raw))
	}
}

// hasControl reports whether b holds a control character other than tab,
// LF and CR: text a browser would not give back as it is (it replaces
// NUL), shown as bytes instead.
func hasControl(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f {
			return true
		}
	}
	return false
}

func payloadOf(kind, text string, size int) Payload {
	p := Payload{Kind: kind, Text: text, Size: size, Preview: text}
	if kind == "json" {
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(text)) == nil {
			p.Preview = compact.String()
		}
	}
	if utf8.RuneCountInString(p.Preview) > previewLen {
		r := []rune(p.Preview)
		p.Preview = string(r[:previewLen]) + "…"
	}
	return p
}

// edited returns the payload to redrive a letter whose payload was orig
// with, from the text of the console's form (shown as kind). A browser
// sends a textarea's line breaks as CRLF, whatever it was given: text that
// reads as what the console showed of orig, line breaks aside, is orig
// unedited, and orig comes back byte for byte. An edit is parsed (see
// parse), its CRLFs read as the line breaks orig uses (CRLF if orig's are
// all CRLF, LF otherwise), and a JSON payload that was compact (as
// publishers write JSON) is compacted again; one that was not is kept as
// typed.
func edited[T any](orig T, text, kind string) (T, error) {
	shown := ShowPayload(orig)
	if kind == shown.Kind && lines(text) == lines(shown.Text) {
		return orig, nil
	}
	text = strings.ReplaceAll(text, "\r\n", "\n")
	raw, isText := rawOf(orig)
	if isText && kind != "bytes" && strings.Contains(raw, "\r\n") && strings.Count(raw, "\n") == strings.Count(raw, "\r\n") {
		text = strings.ReplaceAll(text, "\n", "\r\n")
	}
	compact := kind == "json"
	if isText && kind == "json" {
		var c bytes.Buffer
		compact = json.Compact(&c, []byte(raw)) == nil && c.String() == raw
	}
	return parse[T](text, kind, compact)
}

// lines returns text with its line breaks (CRLF, CR or LF) as LF, as a
// browser's textarea reads them.
func lines(text string) string {
	return strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\r", "\n")
}

// rawOf returns a []byte or string payload's bytes, and false for a
// payload of another type (which the console shows as its JSON).
func rawOf[T any](v T) (string, bool) {
	switch p := any(v).(type) {
	case []byte:
		return string(p), true
	case string:
		return p, true
	}
	return "", false
}

// parse turns an edited payload's text back into a T: the text itself for
// []byte and string payloads (bytes, when kind is "bytes", as base64), and
// JSON for any other type, which must decode whole, with no unknown field.
// compact compacts JSON text first (it is shown indented).
func parse[T any](text, kind string, compact bool) (T, error) {
	var v T
	if kind == "json" && compact {
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(text)) == nil {
			text = compact.String()
		}
	}
	switch p := any(&v).(type) {
	case *[]byte:
		if kind == "bytes" {
			b, err := base64.StdEncoding.DecodeString(text)
			if err != nil {
				return v, badRequest("payload: not base64: %v", err)
			}
			*p = b
			return v, nil
		}
		*p = []byte(text)
	case *string:
		if kind == "bytes" {
			b, err := base64.StdEncoding.DecodeString(text)
			if err != nil {
				return v, badRequest("payload: not base64: %v", err)
			}
			text = string(b)
		}
		*p = text
	default:
		dec := json.NewDecoder(bytes.NewReader([]byte(text)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return v, badRequest("payload: not a %T as JSON: %v", v, err)
		}
		if dec.More() {
			return v, badRequest("payload: text after the JSON value")
		}
	}
	return v, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

func attemptsText(n int) string {
	if n == queue.UnlimitedAttempts {
		return "unlimited"
	}
	return itoa(n)
}

func retryText(p queue.RetryPolicy) string {
	if p.NoBackoff {
		return "no backoff"
	}
	// Delay(1) is the first delay, Delay of a large attempt the cap:
	// both with the zero fields' defaults filled in, jitter aside.
	jitter := p.Jitter
	p.Jitter = 0
	s := fmt.Sprintf("from %v, capped at %v", p.Delay(1), p.Delay(1000))
	if jitter > 0 {
		s += fmt.Sprintf(", jitter %g", jitter)
	}
	return s
}

// ago formats a duration for a person: "3.2s", "4m10s", "2h0m".
func ago(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// took formats how long something took, to a precision that suits it:
// "850µs", "12.3ms", "2.4s", "1m30s".
func took(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
