package pgleasebus

import (
	"context"
	"sync"
	"time"
)

// notifier limits the NOTIFYs a bus's publishes send: a NOTIFY makes its
// transaction's commit wait for every other notifying commit in the
// database (Postgres serializes them on one lock), so a busy topic's
// publishes each notifying would commit one at a time. A publish notifies
// its topic unless this bus notified it less than the interval before (in
// real time: it is a rate, not a deadline); the publishes that do not are
// announced by one NOTIFY at the interval's end. That one reaches every
// Poll after an autocommit publish, which has committed when it returns;
// a publish in the caller's transaction that commits later than that is
// found by the Polls at their next look (WithPollInterval).
type notifier struct {
	b     *Bus
	every time.Duration

	mu       sync.Mutex
	last     map[string]time.Time // by topic: when a NOTIFY was last sent
	trailing map[string]bool      // topics with a NOTIFY due at their interval's end
	wg       sync.WaitGroup       // the trailing NOTIFYs' goroutines
}

func newNotifier(b *Bus, every time.Duration) *notifier {
	return &notifier{b: b, every: every, last: map[string]time.Time{}, trailing: map[string]bool{}}
}

// channel returns the channel a publish to topic notifies in its
// statement, or "" for none (a NOTIFY at the interval's end then covers
// it).
func (n *notifier) channel(topic string) string {
	if n.b.cfg.noListen {
		return "" // no process listens
	}
	if n.every <= 0 {
		return n.b.cfg.schema
	}
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if last, ok := n.last[topic]; !ok || now.Sub(last) >= n.every {
		n.last[topic] = now
		return n.b.cfg.schema
	}
	if !n.trailing[topic] {
		n.trailing[topic] = true
		n.wg.Add(1)
		go n.trail(topic, n.last[topic].Add(n.every).Sub(now))
	}
	return ""
}

// trail sends one NOTIFY for topic after d, for the publishes since the
// last one.
func (n *notifier) trail(topic string, d time.Duration) {
	defer n.wg.Done()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-n.b.closed:
		return
	}
	n.mu.Lock()
	delete(n.trailing, topic)
	n.last[topic] = time.Now()
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = n.b.pool.Exec(ctx, "SELECT pg_notify($1, $2)", n.b.cfg.schema, topic) // lost: the Polls' next look finds what it announced
}
