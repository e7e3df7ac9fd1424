package pgleasebus

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// waiter is how a subscription handle's blocked Polls wait for a change:
// a channel closed and replaced at each wake-up, and the Parkings of the
// Polls parked on it, unparked by the wake-up itself (so that a pool's
// AwaitQuiet never sees a Poll parked after a publish in this process
// returned).
type waiter struct {
	mu       sync.Mutex
	ch       chan struct{}
	parkings map[*backend.Parking]struct{}
	closed   bool
	parked   int           // Polls parked now
	parkCh   chan struct{} // closed and replaced when parked changes
}

func newWaiter() *waiter {
	return &waiter{ch: make(chan struct{}), parkings: map[*backend.Parking]struct{}{}, parkCh: make(chan struct{})}
}

// wake wakes every Poll waiting on w: something may have changed.
func (w *waiter) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeLocked()
}

func (w *waiter) wakeLocked() {
	close(w.ch)
	w.ch = make(chan struct{})
	for pk := range w.parkings {
		pk.Unpark()
	}
	clear(w.parkings)
	if w.parked > 0 {
		w.setParkedLocked(-w.parked)
	}
}

func (w *waiter) setParkedLocked(delta int) {
	w.parked += delta
	close(w.parkCh)
	w.parkCh = make(chan struct{})
}

// close wakes every Poll for good: they find the handle closed.
func (w *waiter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.wakeLocked()
	}
}

// park returns the channel a Poll waits on, having looked at the
// database after the channel before it was replaced: a wake-up that comes
// after the look closes it. With pk, the Poll is marked parked until
// wake time (zero: only a change wakes it).
func (w *waiter) channel() (<-chan struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch, w.closed
}

// parkIf marks the Poll that got ch parked, unless a wake-up closed ch
// since: it reports whether it did.
func (w *waiter) parkIf(ch <-chan struct{}, pk *backend.Parking, wake time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch != w.ch || w.closed {
		return false
	}
	if pk != nil {
		pk.Park(wake)
		w.parkings[pk] = struct{}{}
	}
	w.setParkedLocked(1)
	return true
}

// unpark ends a parked Poll's wait that ended otherwise than by a
// wake-up (its timer, its ctx).
func (w *waiter) unpark(ch <-chan struct{}, pk *backend.Parking) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch != w.ch {
		return // a wake-up ended it, and did the rest
	}
	if pk != nil {
		pk.Unpark()
		delete(w.parkings, pk)
	}
	w.setParkedLocked(-1)
}

// awaitParked waits until n Polls are parked on w.
func (w *waiter) awaitParked(ctx context.Context, n int) error {
	for {
		w.mu.Lock()
		parked, ch, closed := w.parked, w.parkCh, w.closed
		w.mu.Unlock()
		switch {
		case closed:
			return queue.ErrClosed
		case parked >= n:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// register adds a handle's waiter to the bus's, for the wake-ups of its
// topic; unregister removes it.
func (b *Bus) register(topic string, w *waiter) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isShut {
		return false
	}
	if b.handles[topic] == nil {
		b.handles[topic] = map[*waiter]struct{}{}
	}
	b.handles[topic][w] = struct{}{}
	return true
}

func (b *Bus) unregister(topic string, w *waiter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.handles[topic], w)
	if len(b.handles[topic]) == 0 {
		delete(b.handles, topic)
	}
}

// wake wakes this process's Polls of topic's subscriptions; "" wakes all.
func (b *Bus) wake(topic string) {
	b.mu.Lock()
	var ws []*waiter
	for t, set := range b.handles {
		if topic == "" || t == topic {
			for w := range set {
				ws = append(ws, w)
			}
		}
	}
	b.mu.Unlock()
	for _, w := range ws {
		w.wake()
	}
}

// listen LISTENs on the bus's channel on a connection of its own, waking
// the Polls of each topic a NOTIFY names, until Close; a lost connection
// is taken again after a backoff on the bus's clock, waking every Poll
// (a NOTIFY may have come meanwhile).
func (b *Bus) listen() {
	defer b.done.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-b.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	failures := 0
	for ctx.Err() == nil {
		err := b.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		_ = err // a lost connection: its Polls look again, and so do the others'
		failures++
		b.wake("")
		t := backend.After(b.cfg.clk, queue.RetryPolicy{Initial: 100 * time.Millisecond, Max: 10 * time.Second}.Delay(failures))
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

func (b *Bus) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.cfg.schema}.Sanitize()); err != nil {
		return err
	}
	b.wake("") // what was published before the LISTEN
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		b.wake(n.Payload)
	}
}
