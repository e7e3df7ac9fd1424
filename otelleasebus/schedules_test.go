package otelleasebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/otelleasebus"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

func TestObserveSchedules(t *testing.T) {
	tel := newTelemetry(t)
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := schedule.New(schedule.WithClock(mock))
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, schedule.Fire) error { return nil }
	if err := s.Add("hourly", schedule.Every(time.Hour), ok); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("broken", schedule.Every(time.Hour), func(context.Context, schedule.Fire) error { return errors.New("down") }, schedule.WithPaused()); err != nil {
		t.Fatal(err)
	}
	reg, err := otelleasebus.ObserveSchedules(s, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := s.AwaitQuiet(ctx); err != nil {
		t.Fatal(err)
	}
	mock.Add(time.Hour)
	if err := s.AwaitQuiet(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Trigger(ctx, "broken"); err == nil {
		t.Fatal("broken fired")
	}
	got := tel.collect(t)
	named := func(name string, more ...string) string {
		return sortedJoin(append([]string{"leasebus.schedule.name=" + name, "messaging.system=leasebus"}, more...))
	}
	want := map[string]string{
		"leasebus.schedule.fired{" + named("hourly") + "}":          "1",
		"leasebus.schedule.triggered{" + named("hourly") + "}":      "0",
		"leasebus.schedule.failures{" + named("hourly") + "}":       "0",
		"leasebus.schedule.paused{" + named("hourly") + "}":         "0",
		"leasebus.schedule.next_fire.time{" + named("hourly") + "}": "1.7672328e+09",
		"leasebus.schedule.last_fire.time{" + named("hourly") + "}": "1.7672292e+09",
		"leasebus.schedule.fired{" + named("broken") + "}":          "0",
		"leasebus.schedule.triggered{" + named("broken") + "}":      "0",
		"leasebus.schedule.failures{" + named("broken") + "}":       "1",
		"leasebus.schedule.paused{" + named("broken") + "}":         "1",
	}
	for _, name := range []string{"hourly", "broken"} {
		for _, r := range []string{"missed", "busy", "paused"} {
			want["leasebus.schedule.skipped{"+named(name, "leasebus.schedule.skip_reason="+r)+"}"] = "0"
		}
	}
	equalPoints(t, got, want)

	if err := s.Remove("broken"); err != nil {
		t.Fatal(err)
	}
	got = tel.collect(t)
	for k := range got {
		if k == "leasebus.schedule.paused{"+named("broken")+"}" {
			t.Errorf("a removed schedule is still reported: %s", k)
		}
	}
	if _, err := otelleasebus.ObserveSchedules(nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("ObserveSchedules(nil): %v", err)
	}
}
