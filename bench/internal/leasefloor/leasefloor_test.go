package leasefloor

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLeaseAckExpire(t *testing.T) {
	now := time.Unix(0, 0)
	q := New[[]byte](func() time.Time { return now }, time.Second)
	for i := range 5 {
		q.Publish([]byte{byte(i)})
	}
	buf := make([]Delivery[[]byte], 3)
	if n := q.TryPoll(buf); n != 3 || buf[0].Payload[0] != 0 || buf[2].Payload[0] != 2 {
		t.Fatalf("TryPoll = %d %v, want the first 3 in order", n, buf)
	}
	if err := q.Ack(buf[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(buf[1].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Ack = %v, want ErrNotFound", err)
	}
	if v, l := q.Len(); v != 2 || l != 2 {
		t.Fatalf("Len = %d visible, %d leased", v, l)
	}
	now = now.Add(time.Second) // leases of 0 and 2 expire: back at the tail
	got := map[byte]bool{}
	for {
		n := q.TryPoll(buf)
		if n == 0 {
			break
		}
		for _, d := range buf[:n] {
			got[d.Payload[0]] = true
			if err := q.Ack(d.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != 4 || got[1] {
		t.Fatalf("after expiry took %v, want 0, 2, 3, 4", got)
	}
	if err := q.Ack(buf[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Ack of an acked lease = %v", err)
	}
}

func TestPollWaits(t *testing.T) {
	q := New[[]byte](time.Now, time.Minute)
	done := make(chan int)
	go func() {
		n, _ := q.Poll(context.Background(), make([]Delivery[[]byte], 10))
		done <- n
	}()
	q.Publish([]byte("x")) // before or after the Poll parks: either way it must return 1
	if n := <-done; n != 1 {
		t.Fatalf("Poll = %d", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.Poll(ctx, make([]Delivery[[]byte], 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll on a cancelled ctx = %v", err)
	}
}

func TestPollWakesOnExpiry(t *testing.T) {
	q := New[[]byte](time.Now, 20*time.Millisecond)
	q.Publish([]byte("x"))
	buf := make([]Delivery[[]byte], 1)
	if n := q.TryPoll(buf); n != 1 {
		t.Fatal("no lease")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := q.Poll(ctx, buf); n != 1 || err != nil {
		t.Fatalf("Poll after expiry = %d, %v", n, err)
	}
}

func TestCompaction(t *testing.T) {
	q := New[[]byte](time.Now, time.Minute)
	buf := make([]Delivery[[]byte], 7)
	next := 0
	for i := range 5000 {
		q.Publish([]byte{byte(i)})
		if i%2 == 1 {
			n := q.TryPoll(buf[:1])
			if n != 1 || buf[0].Payload[0] != byte(next) {
				t.Fatalf("step %d: got %v, want %d", i, buf[0].Payload, byte(next))
			}
			next++
			q.Ack(buf[0].ID)
		}
	}
	if v, l := q.Len(); v != 2500 || l != 0 {
		t.Fatalf("Len = %d, %d", v, l)
	}
}
