package wmleasebus

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
)

func TestLogHandler(t *testing.T) {
	capture := watermill.NewCaptureLogger()
	l := slog.New(&logHandler{l: capture}).With("run", 1)
	boom := errors.New("boom")
	l.Warn("settling failed", "err", boom, "lease", "L1")
	l.Error("panicked", "err", boom)
	l.Info("note", "err", boom)
	l.Debug("detail")
	l.WithGroup("g").Warn("grouped", "err", boom, slog.Group("h", "x", 2))

	got := capture.Captured()
	check := func(level watermill.LogLevel, i int, msg string, err error, fields watermill.LogFields) {
		t.Helper()
		if len(got[level]) <= i {
			t.Fatalf("level %d: %d messages, want more than %d", level, len(got[level]), i)
		}
		c := got[level][i]
		if c.Msg != msg || c.Err != err || len(c.Fields) != len(fields) {
			t.Fatalf("got %q %v %v, want %q %v %v", c.Msg, c.Err, c.Fields, msg, err, fields)
		}
		for k, v := range fields {
			if c.Fields[k] != v {
				t.Fatalf("%q: field %q is %v, want %v", msg, k, c.Fields[k], v)
			}
		}
	}
	check(watermill.ErrorLogLevel, 0, "settling failed", boom, watermill.LogFields{"run": int64(1), "lease": "L1"})
	check(watermill.ErrorLogLevel, 1, "panicked", boom, watermill.LogFields{"run": int64(1)})
	check(watermill.InfoLogLevel, 0, "note", nil, watermill.LogFields{"run": int64(1), "err": boom})
	check(watermill.DebugLogLevel, 0, "detail", nil, watermill.LogFields{"run": int64(1)})
	check(watermill.ErrorLogLevel, 2, "grouped", nil, watermill.LogFields{"run": int64(1), "g.err": boom, "g.h.x": int64(2)})
}
