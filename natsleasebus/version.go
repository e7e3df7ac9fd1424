package natsleasebus

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// The oldest nats-server each feature of the bus needs.
var (
	// Subscribe's consumers filter on two subjects: the topic's and the
	// subscription's own (released and redriven messages).
	minServer = serverVersion{2, 10, 0}
	// WithDelays: message schedules, and per-message TTLs on the
	// schedules' stream.
	minServerDelays = serverVersion{2, 12, 0}
)

// serverVersion is a nats-server release, major.minor.patch.
type serverVersion [3]int

func (v serverVersion) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

func (v serverVersion) atLeast(w serverVersion) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] > w[i]
		}
	}
	return true
}

// parseServerVersion reads "2.10.3" (or "v2.10.3", "2.12.0-beta.1": what
// follows the patch number is ignored); ok is false for anything else.
func parseServerVersion(s string) (v serverVersion, ok bool) {
	s = strings.TrimPrefix(s, "v")
	parts := strings.SplitN(s, ".", 3)
	if len(parts) != 3 {
		return v, false
	}
	if i := strings.IndexFunc(parts[2], func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		parts[2] = parts[2][:i]
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// checkServer refuses a server too old for what the bus will ask of it,
// naming the version it needs and the feature that needs it. A server
// whose version the client does not know (not connected yet) or cannot
// read is let through: the first request that fails says why.
func checkServer(nc *nats.Conn, delays bool) error {
	if nc == nil {
		return nil
	}
	have, ok := parseServerVersion(nc.ConnectedServerVersion())
	if !ok {
		return nil
	}
	if !have.atLeast(minServer) {
		return fmt.Errorf("nats-server %v is too old: natsleasebus needs %v or newer (a subscription's consumer filters on two subjects): %w", have, minServer, ErrUnsupported)
	}
	if delays && !have.atLeast(minServerDelays) {
		return fmt.Errorf("nats-server %v is too old for WithDelays: it needs %v or newer (message schedules): %w", have, minServerDelays, ErrUnsupported)
	}
	return nil
}
