package poller

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

func TestDeduper(t *testing.T) {
	d, err := NewDeduper(2)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	calls := 0
	ok := func() error { calls++; return nil }
	fail := func() error { calls++; return errors.New("boom") }

	if ran, err := d.Do(a, fail); !ran || err == nil {
		t.Errorf("failed first run: %v %v", ran, err)
	}
	if d.seen(a) {
		t.Error("a failure was recorded")
	}
	if ran, err := d.Do(a, ok); !ran || err != nil {
		t.Errorf("retry: %v %v", ran, err)
	}
	if ran, err := d.Do(a, ok); ran || err != nil {
		t.Errorf("duplicate ran: %v %v", ran, err)
	}
	d.Do(b, ok)
	d.Do(c, ok) // evicts a
	if d.seen(a) || !d.seen(c) || d.Len() != 2 {
		t.Errorf("eviction: seen(a)=%v seen(c)=%v len=%d", d.seen(a), d.seen(c), d.Len())
	}
	if calls != 4 {
		t.Errorf("calls = %d", calls)
	}

	inner := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Do(a, func() error { close(inner); <-release; return nil })
	}()
	<-inner
	if _, err := d.Do(a, ok); !errors.Is(err, ErrInProgress) {
		t.Errorf("concurrent duplicate: %v", err)
	}
	close(release)
	<-done

	if _, err := NewDeduper(0); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("NewDeduper(0) = %v", err)
	}
	if _, err := d.Do(a, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("Do(nil) = %v", err)
	}
}
