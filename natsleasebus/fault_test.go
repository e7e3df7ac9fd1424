package natsleasebus_test

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// faultMode says what a faulty connection does to a frame it intercepts.
type faultMode int

const (
	dropFrame faultMode = iota // never sent: the request times out
	misroute                   // sent to a subject no one serves: the server answers "no responders"
)

// faults is a dialer whose connections can drop or misroute the next n
// messages the client sends to subjects with a prefix (PUB or HPUB frames;
// acks by default), so a test injects a lost or unanswered request
// deterministically, byte for byte, without touching the server.
type faults struct {
	mu      sync.Mutex // guards everything below
	prefix  []byte     // the subjects intercepted
	mode    faultMode
	left    int // messages still to intercept; < 0: every one
	matched int // messages intercepted so far
	conns   []net.Conn
}

// sever closes every connection dialed so far, as a server that dies
// does: the client reconnects.
func (f *faults) sever() {
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// arm intercepts the next n acks (n < 0: all) with mode.
func (f *faults) arm(mode faultMode, n int) { f.armPrefix(ackPrefix, mode, n) }

// armPrefix intercepts the next n messages (n < 0: all) to subjects that
// begin with prefix, with mode.
func (f *faults) armPrefix(prefix []byte, mode faultMode, n int) {
	f.mu.Lock()
	f.prefix, f.mode, f.left, f.matched = prefix, mode, n, 0
	f.mu.Unlock()
}

// hits returns how many acks were intercepted.
func (f *faults) hits() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.matched
}

// take reports whether the message to subject about to go out is to be
// intercepted, and how.
func (f *faults) take(subject []byte) (faultMode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.left == 0 || !bytes.HasPrefix(subject, f.prefix) {
		return 0, false
	}
	if f.left > 0 {
		f.left--
	}
	f.matched++
	return f.mode, true
}

func (f *faults) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, hangGuard)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
	return &faultyConn{Conn: c, f: f}, nil
}

// connectFaulty connects to url through f.
func connectFaulty(tb testing.TB, url string, f *faults) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(url, nats.SetCustomDialer(f), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// faultyConn parses the client's outgoing protocol into frames and passes
// each on, unless it is an ack the faults intercept.
type faultyConn struct {
	net.Conn
	f   *faults
	mu  sync.Mutex // guards buf
	buf []byte     // the start of a frame not complete yet
}

var ackPrefix = []byte("$JS.ACK.")

func (c *faultyConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, p...)
	var out []byte
	for {
		eol := bytes.Index(c.buf, []byte("\r\n"))
		if eol < 0 {
			break
		}
		line := c.buf[:eol]
		fields := bytes.Fields(line)
		end := eol + 2
		isPub := len(fields) >= 3 && (bytes.EqualFold(fields[0], []byte("PUB")) || bytes.EqualFold(fields[0], []byte("HPUB")))
		if isPub {
			size, err := strconv.Atoi(string(fields[len(fields)-1]))
			if err != nil {
				return 0, err
			}
			end += size + 2
			if len(c.buf) < end {
				break // the payload has not all arrived
			}
		}
		frame := c.buf[:end]
		if isPub {
			if mode, hit := c.f.take(fields[1]); hit {
				if mode == dropFrame {
					frame = nil
				} else {
					frame = bytes.Replace(frame, fields[1], append([]byte("_NOONE."), fields[1]...), 1)
				}
			}
		}
		out = append(out, frame...)
		c.buf = c.buf[end:]
	}
	c.buf = append([]byte(nil), c.buf...)
	if len(out) > 0 {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
