package schedule_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

func TestBadInput(t *testing.T) {
	invalid := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", what, err)
		}
	}
	for _, opts := range [][]schedule.Option{
		{schedule.WithClock(nil)}, {schedule.WithStore(nil)}, {{}},
		{schedule.WithRetry(queue.RetryPolicy{NoBackoff: true})},
		{schedule.WithRetry(queue.RetryPolicy{Initial: -1})},
	} {
		_, err := schedule.New(opts...)
		invalid("New", err)
	}
	s, _ := newScheduler(t)
	nop := func(context.Context, schedule.Fire) error { return nil }
	every := schedule.Every(time.Hour)
	for _, name := range []string{"", strings.Repeat("x", schedule.MaxNameLen+1), "a b", "a:b", "é"} {
		invalid("Add("+name+")", s.Add(name, every, nop))
	}
	invalid("invalid spec", s.Add("a", schedule.Cron("nope"), nop))
	invalid("zero spec", s.Add("a", schedule.Spec{}, nop))
	invalid("nil job", s.Add("a", every, nil))
	for _, o := range []schedule.AddOption{
		{}, schedule.WithMissed(9), schedule.WithCatchUpLimit(0), schedule.WithGrace(-1),
		schedule.WithJitter(-1), schedule.WithJitter(time.Hour), schedule.WithSkipIfBusy(nil),
	} {
		invalid("AddOption", s.Add("a", every, nop, o))
	}
	if len(s.Status()) != 0 {
		t.Fatalf("a refused Add added: %+v", s.Status())
	}
	if err := s.Add(strings.Repeat("x", schedule.MaxNameLen), every, nop); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("a", every, nop); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("a", every, nop); !errors.Is(err, schedule.ErrExists) {
		t.Errorf("Add twice: %v", err)
	}
	for what, err := range map[string]error{
		"Pause":  s.Pause("b"),
		"Resume": s.Resume("b"),
		"Remove": s.Remove("b"),
	} {
		if !errors.Is(err, schedule.ErrNotFound) {
			t.Errorf("%s of an unknown schedule: %v", what, err)
		}
	}
	if _, err := s.Trigger(context.Background(), "b"); !errors.Is(err, schedule.ErrNotFound) {
		t.Errorf("Trigger of an unknown schedule: %v", err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	_, err := s.Trigger(nil, "a") //nolint:staticcheck
	invalid("Trigger(nil ctx)", err)
	//lint:ignore SA1012 a nil context is the bad input under test
	invalid("Run(nil ctx)", s.Run(nil)) //nolint:staticcheck
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("a"); !errors.Is(err, schedule.ErrNotFound) {
		t.Errorf("Remove twice: %v", err)
	}
	if err := s.Add("a", every, nop); err != nil { // the name is free again
		t.Fatal(err)
	}
	run(t, s)
	if err := s.Run(context.Background()); !errors.Is(err, schedule.ErrRunning) {
		t.Errorf("a second Run: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s2, _ := newScheduler(t)
	if err := s2.AwaitQuiet(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("AwaitQuiet without Run: %v", err)
	}
	if _, err := schedule.NewFileStore(""); err == nil {
		t.Error("NewFileStore(\"\"): nil error")
	}
}

// TestRemoveStopsFiring: a removed schedule fires no more; the others do.
func TestRemoveStopsFiring(t *testing.T) {
	s, mock := newScheduler(t)
	rec := &recorder{clk: mock}
	for _, name := range []string{"a", "b"} {
		if err := s.Add(name, schedule.Every(time.Hour), rec.job); err != nil {
			t.Fatal(err)
		}
	}
	run(t, s)
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	advance(t, s, mock, time.Hour)
	if got := rec.take(); len(got) != 1 || got[0].Schedule != "b" {
		t.Fatalf("fires %+v", got)
	}
}

// TestInsideSynctest runs a scheduler on the real clock inside a
// testing/synctest bubble: three hours pass at once.
func TestInsideSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := broker.New[string]()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.CreateTopic("jobs"); err != nil {
			t.Fatal(err)
		}
		sub, err := b.Subscribe("jobs", "workers")
		if err != nil {
			t.Fatal(err)
		}
		s, err := schedule.New(schedule.WithClock(clock.New()))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add("report", schedule.Every(time.Hour), schedule.Publish(b, "jobs", slotText)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(3*time.Hour + time.Second) // the bubble's clock: no real wait
		synctest.Wait()
		if st := sub.Stats(); st.Visible != 3 {
			t.Errorf("after 3 hours: %d published, want 3", st.Visible)
		}
		if err := s.AwaitQuiet(ctx); err != nil {
			t.Error(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}
