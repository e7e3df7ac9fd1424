package sqsserver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// clockReply is the control endpoint's answer.
type clockReply struct {
	Now   string `json:"now"`  // RFC 3339, nanoseconds
	Mock  bool   `json:"mock"` // whether the clock can be moved
	Error string `json:"error,omitempty"`
}

type parkedReply struct {
	Queue  string `json:"queue"`
	Parked int    `json:"parked"`
	Error  string `json:"error,omitempty"`
}

// serveControl serves the endpoints outside the SQS protocol:
//
//	GET  /leasebus/clock                    the server's time
//	POST /leasebus/clock?advance=<duration> moves a mock clock forward (Go syntax: 30s, 1m30s)
//	POST /leasebus/clock?set=<RFC 3339>     sets a mock clock (never backwards)
//	GET  /leasebus/parked?queue=Q&n=N       waits until N receives on Q are long-polling
//	     /leasebus/console/...              the console, with WithConsole
//
// Each answers JSON. Moving a real clock is 409 Conflict; bad input 400.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	if s.console != nil && (r.URL.Path == consolePrefix || strings.HasPrefix(r.URL.Path, consolePrefix+"/")) {
		s.console.ServeHTTP(w, r)
		return
	}
	switch r.URL.Path {
	case "/leasebus/clock":
		s.serveClock(w, r)
	case "/leasebus/parked":
		s.serveParked(w, r)
	default:
		replyJSON(w, http.StatusNotFound, clockReply{Now: s.now(), Mock: s.mock != nil, Error: "no such control endpoint: " + r.URL.Path})
	}
}

// consolePrefix is where WithConsole's console is served.
const consolePrefix = "/leasebus/console"

func (s *Server) now() string { return s.clock.Now().UTC().Format(time.RFC3339Nano) }

func replyJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) serveClock(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		replyJSON(w, status, clockReply{Now: s.now(), Mock: s.mock != nil, Error: msg})
	}
	switch r.Method {
	case http.MethodGet:
		replyJSON(w, http.StatusOK, clockReply{Now: s.now(), Mock: s.mock != nil})
		return
	case http.MethodPost:
	default:
		fail(http.StatusMethodNotAllowed, "GET or POST")
		return
	}
	q := r.URL.Query()
	adv, set := q.Get("advance"), q.Get("set")
	if (adv == "") == (set == "") {
		fail(http.StatusBadRequest, "give one of advance=<Go duration> or set=<RFC 3339 time>")
		return
	}
	if s.mock == nil {
		fail(http.StatusConflict, "the server runs on the real clock: start it with a mock clock (-mock-clock) to move time")
		return
	}
	if adv != "" {
		d, err := time.ParseDuration(adv)
		if err != nil || d < 0 {
			fail(http.StatusBadRequest, "advance: want a non-negative Go duration such as 30s or 1m30s, got "+strconv.Quote(adv))
			return
		}
		s.mock.Add(d)
	} else {
		t, err := time.Parse(time.RFC3339Nano, set)
		if err != nil {
			fail(http.StatusBadRequest, "set: want an RFC 3339 time such as 2026-01-01T00:00:00Z, got "+strconv.Quote(set))
			return
		}
		if t.Before(s.clock.Now()) {
			fail(http.StatusBadRequest, "set: "+set+" is before the clock's time: the clock never goes back")
			return
		}
		s.mock.Set(t)
	}
	replyJSON(w, http.StatusOK, clockReply{Now: s.now(), Mock: true})
}

func (s *Server) serveParked(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("queue")
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n < 0 {
		replyJSON(w, http.StatusBadRequest, parkedReply{Queue: name, Error: "n: want a count >= 0"})
		return
	}
	if err := s.AwaitParked(r.Context(), name, n); err != nil {
		status := http.StatusNotFound
		if r.Context().Err() != nil {
			status = http.StatusRequestTimeout
		}
		replyJSON(w, status, parkedReply{Queue: name, Error: err.Error()})
		return
	}
	replyJSON(w, http.StatusOK, parkedReply{Queue: name, Parked: n})
}
