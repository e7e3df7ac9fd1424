package sqsserver

import (
	"testing"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// What a queue keeps of its receives is bounded by the messages it holds:
// receiving and deleting many messages, well inside the retention period,
// leaves next to nothing behind.
func TestReceivesBounded(t *testing.T) {
	q := &sqsQueue{st: settings{retention: 345_600}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10_000 {
		d := delivery{LeaseID: lease.NewID(1, uint64(i)<<32, 1)}
		q.record(d, now)
		q.forget(d.LeaseID.Seq())
		now = now.Add(time.Millisecond)
	}
	if n := len(q.rcv.order); n > 200 {
		t.Fatalf("%d first receives kept for 0 messages held", n)
	}
	// Those of messages still held are kept, with their first receive.
	held := delivery{LeaseID: lease.NewID(1, 1<<40|7, 1)}
	first := q.record(held, now)
	for i := range 1000 {
		d := delivery{LeaseID: lease.NewID(1, uint64(i)<<32, 2)}
		q.record(d, now)
		q.forget(d.LeaseID.Seq())
	}
	again := delivery{LeaseID: lease.NewID(1, 1<<40|7, 2)}
	if got := q.record(again, now.Add(time.Minute)); !got.Equal(first) {
		t.Fatalf("first receive %v, want %v", got, first)
	}
}
