package sqsserver

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/leasebus/leasebus/console"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
)

// Option configures a Server in New: an opaque value, made by the With
// functions.
type Option struct{ apply func(*config) error }

type config struct {
	clock      clock.Clock
	dir        string
	sync       broker.SyncMode
	syncSet    bool
	region     string
	account    string
	baseURL    string
	accessKeys map[string]bool
	key        []byte
	console    []console.Option // WithConsole's; nil: no console
	logger     *slog.Logger     // WithLogger's; nil: no request log
}

// WithClock sets the clock of every time the server reads and every timer
// it arms: visibility timeouts, delays, long polls, retention, timestamps.
// Give it a *clock.Mock and the control endpoint (/leasebus/clock) moves
// it. Default: the real clock. nil is invalid.
func WithClock(c clock.Clock) Option {
	return Option{func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("sqsserver: WithClock: nil clock")
		}
		cfg.clock = c
		return nil
	}}
}

// WithConsole serves leasebus's console (package console) on the server's
// own port under /leasebus/console/: each queue shows as a topic with one
// subscription, its messages (the payload's "b" is the body) can be peeked
// at, and a queue can be paused (a receive then waits), resumed and
// purged. opts are the console's (console.WithReadOnly, say); its prefix
// is the server's. A queue's dead-letter queue (RedrivePolicy) is a queue
// of its own there: the console's dead letters are only messages past
// their retention. Default: no console.
func WithConsole(opts ...console.Option) Option {
	return Option{func(cfg *config) error {
		cfg.console = append([]console.Option{console.WithTitle("leasebus-sqs")}, opts...)
		return nil
	}}
}

// WithDir makes the server durable: its messages live in a leasebus journal
// (broker.Open) in dir/journal, its queues, their attributes and tags and
// the receipt-handle key in dir/queues.json, written atomically on every
// change. A server opened again on dir has every queue, attribute and
// message back (messages in flight come back visible, their receive
// counted). dir is created if missing; one server at a time may hold it.
// Default: in memory.
func WithDir(dir string) Option {
	return Option{func(cfg *config) error {
		if dir == "" {
			return fmt.Errorf("sqsserver: WithDir: empty directory")
		}
		cfg.dir = dir
		return nil
	}}
}

// WithSync sets a durable server's sync mode (broker.SyncAlways by
// default: a send returns once it is on disk). Only with WithDir.
func WithSync(m broker.SyncMode) Option {
	return Option{func(cfg *config) error {
		cfg.sync, cfg.syncSet = m, true
		return nil
	}}
}

var (
	regionRE  = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)
	accountRE = regexp.MustCompile(`^[0-9]{12}$`)
)

// WithRegion sets the region the server's queue ARNs name (default
// us-east-1). The server answers whatever region a client signs for.
func WithRegion(region string) Option {
	return Option{func(cfg *config) error {
		if !regionRE.MatchString(region) {
			return fmt.Errorf("sqsserver: WithRegion: %q is not a region name", region)
		}
		cfg.region = region
		return nil
	}}
}

// WithAccountID sets the 12-digit account ID in queue URLs and ARNs
// (default 000000000000).
func WithAccountID(id string) Option {
	return Option{func(cfg *config) error {
		if !accountRE.MatchString(id) {
			return fmt.Errorf("sqsserver: WithAccountID: %q is not 12 digits", id)
		}
		cfg.account = id
		return nil
	}}
}

// WithBaseURL sets the scheme and host of the queue URLs the server hands
// out, e.g. "http://localhost:9324". Default: "http://" and the Host of
// each request, so a URL works for the client that asked. Whatever host a
// URL names, the server finds the queue by its last path segment.
func WithBaseURL(u string) Option {
	return Option{func(cfg *config) error {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("sqsserver: WithBaseURL: %q is not an http(s) URL", u)
		}
		cfg.baseURL = strings.TrimRight(u, "/")
		return nil
	}}
}

// WithAccessKeys makes the server accept only requests signed (SigV4) with
// one of these access key IDs; others get InvalidClientTokenId (403), and
// unsigned ones MissingAuthenticationToken (403). The signature itself is
// not verified: this is a test server, the check catches a client
// configured for the wrong account. Default: any credentials, and none.
func WithAccessKeys(ids ...string) Option {
	return Option{func(cfg *config) error {
		if len(ids) == 0 {
			return fmt.Errorf("sqsserver: WithAccessKeys: no key")
		}
		cfg.accessKeys = make(map[string]bool, len(ids))
		for _, id := range ids {
			if id == "" {
				return fmt.Errorf("sqsserver: WithAccessKeys: empty key ID")
			}
			cfg.accessKeys[id] = true
		}
		return nil
	}}
}

// WithReceiptKey sets the key that authenticates receipt handles (at least
// 16 bytes). Default: a random key, which a durable server keeps in its
// directory so that handles stay valid across a restart.
func WithReceiptKey(key []byte) Option {
	return Option{func(cfg *config) error {
		if len(key) < 16 {
			return fmt.Errorf("sqsserver: WithReceiptKey: %d bytes, at least 16", len(key))
		}
		cfg.key = append([]byte(nil), key...)
		return nil
	}}
}
