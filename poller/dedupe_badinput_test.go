package poller_test

// Bad input to the Deduper.

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func TestBadInputDeduper(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt} {
		d, err := callSafelyDeduper(n)
		if !errors.Is(err, queue.ErrInvalidArgument) || d != nil {
			t.Errorf("NewDeduper(%d) = %v, %v; want ErrInvalidArgument", n, d, err)
		}
	}
	d, err := poller.NewDeduper(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Do(uuid.Nil, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("Do(nil func) = %v", err)
	}
	// A panic in fn propagates and leaves the id unrecorded, not running.
	id := uuid.New()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Do swallowed fn's panic")
			}
		}()
		d.Do(id, func() error { panic("boom") })
	}()
	if d.Len() != 0 {
		t.Error("a panicking fn was recorded")
	}
	if ran, err := d.Do(id, func() error { return nil }); !ran || err != nil {
		t.Errorf("Do after a panic = %v, %v; want it to run", ran, err)
	}
	if ran, err := d.Do(uuid.Nil, func() error { return nil }); !ran || err != nil {
		t.Errorf("Do(uuid.Nil) = %v, %v; want it to run once", ran, err)
	}
}

func callSafelyDeduper(n int) (d *poller.Deduper, err error) {
	err = testkit.CallSafely(func() error {
		var e error
		d, e = poller.NewDeduper(n)
		return e
	})
	return d, err
}

// NewDeduper documents capacity < 1 as its only invalid input; a huge
// capacity is a valid bound on memory, not a preallocation order.
func TestBadInputDeduperHugeCapacity(t *testing.T) {
	d, err := callSafelyDeduper(math.MaxInt)
	if testkit.Panicked(err) {
		t.Fatalf("BUG deduper-huge-capacity-panics: poller.NewDeduper(math.MaxInt) panics (%s): it preallocates the ring and the map; want a working Deduper or an ErrInvalidArgument",
			strings.SplitN(err.Error(), "\n", 2)[0])
	}
	if err == nil {
		if ran, err := d.Do(uuid.New(), func() error { return nil }); !ran || err != nil {
			t.Errorf("Do = %v, %v", ran, err)
		}
	} else if !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("NewDeduper(MaxInt) = %v", err)
	}
}
