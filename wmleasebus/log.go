package wmleasebus

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// logHandler is a slog.Handler that writes to a watermill LoggerAdapter,
// so that the poller under each Subscribe logs where the Subscriber does.
// Records at Warn and above go to Error (watermill has no Warn), Info to
// Info, below it to Debug; an attribute "err" holding an error becomes
// the error of an Error call.
type logHandler struct {
	l      watermill.LoggerAdapter
	prefix string // the open groups, each followed by "."
	fields watermill.LogFields
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	fields := h.fields.Copy()
	if fields == nil {
		fields = watermill.LogFields{}
	}
	var err error
	r.Attrs(func(a slog.Attr) bool {
		if e, ok := a.Value.Any().(error); ok && a.Key == "err" && h.prefix == "" && err == nil {
			err = e
			return true
		}
		h.add(fields, h.prefix, a)
		return true
	})
	switch {
	case r.Level >= slog.LevelWarn:
		h.l.Error(r.Message, err, fields)
	case r.Level >= slog.LevelInfo:
		if err != nil {
			fields["err"] = err
		}
		h.l.Info(r.Message, fields)
	default:
		if err != nil {
			fields["err"] = err
		}
		h.l.Debug(r.Message, fields)
	}
	return nil
}

func (h *logHandler) add(fields watermill.LogFields, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			h.add(fields, p, g)
		}
		return
	}
	if a.Key == "" {
		return
	}
	fields[prefix+a.Key] = v.Any()
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	fields := h.fields.Copy()
	if fields == nil {
		fields = watermill.LogFields{}
	}
	for _, a := range attrs {
		h.add(fields, h.prefix, a)
	}
	return &logHandler{l: h.l, prefix: h.prefix, fields: fields}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &logHandler{l: h.l, prefix: h.prefix + name + ".", fields: h.fields}
}
