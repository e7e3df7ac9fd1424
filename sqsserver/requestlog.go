package sqsserver

import (
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// WithLogger logs one line per SQS request to l, at level Info: the
// protocol ("json" or "query"), the action, the HTTP status, the error
// type of a refused request, the request ID and how long it took (on the
// real clock, whatever the server's). The control endpoints and the
// console are not logged. An SNS delivery that is lost (see
// Server.NotificationsLost) is logged too, at level Warn. Default: nothing
// is logged. nil is invalid.
func WithLogger(l *slog.Logger) Option {
	return Option{func(cfg *config) error {
		if l == nil {
			return errors.New("sqsserver: WithLogger: nil logger")
		}
		cfg.logger = l
		return nil
	}}
}

// requestLog is the ResponseWriter of a request being logged: what the
// serving code learns (the action, the error) it notes here.
type requestLog struct {
	http.ResponseWriter
	status   int
	protocol string
	action   string
	errType  string
	reqID    string
}

func (rl *requestLog) WriteHeader(status int) {
	if rl.status == 0 {
		rl.status = status
	}
	rl.ResponseWriter.WriteHeader(status)
}

func (rl *requestLog) Write(b []byte) (int, error) {
	if rl.status == 0 {
		rl.status = http.StatusOK
	}
	return rl.ResponseWriter.Write(b)
}

// noteAction records the action a request names, if it is being logged.
func noteAction(w http.ResponseWriter, protocol, action string) {
	if rl, ok := w.(*requestLog); ok {
		rl.protocol, rl.action = protocol, action
	}
}

// noteError records the error a request is answered with, if logged.
func noteError(w http.ResponseWriter, e *Error) {
	if rl, ok := w.(*requestLog); ok {
		rl.errType = e.Type
	}
}

// logged serves a request through serve, then logs it.
func (s *Server) logged(w http.ResponseWriter, r *http.Request, reqID string, serve func(http.ResponseWriter)) {
	if s.cfg.logger == nil {
		serve(w)
		return
	}
	start := time.Now()
	rl := &requestLog{ResponseWriter: w, reqID: reqID}
	serve(rl)
	attrs := []slog.Attr{
		slog.String("protocol", rl.protocol), slog.String("action", rl.action), slog.Int("status", rl.status),
	}
	if rl.errType != "" {
		attrs = append(attrs, slog.String("error", rl.errType))
	}
	attrs = append(attrs, slog.String("request_id", reqID), slog.Duration("took", time.Since(start)))
	s.cfg.logger.LogAttrs(r.Context(), slog.LevelInfo, "sqs request", attrs...)
}
