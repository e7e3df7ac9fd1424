package otelleasebus

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasebus/leasebus/schedule"
)

var (
	// scheduleKey names a schedule.
	scheduleKey = attribute.Key("leasebus.schedule.name")
	// skipKey is why slots were skipped: missed, busy, paused.
	skipKey = attribute.Key("leasebus.schedule.skip_reason")
)

// The reasons of leasebus.schedule.skipped, in schedule.Status order.
var skipReasons = [...]string{"missed", "busy", "paused"}

// scheduleSets are the attribute sets of one schedule's observations.
type scheduleSets struct {
	base  metric.MeasurementOption
	skips [len(skipReasons)]metric.MeasurementOption
}

// ObserveSchedules reports the schedules of s (s.Status()) as metrics,
// read at every collection, as they are added and removed:
//
//	leasebus.schedule.fired           Counter {slot}   slots fired
//	leasebus.schedule.triggered       Counter {fire}   fires by Trigger
//	leasebus.schedule.skipped         Counter {slot}   by leasebus.schedule.skip_reason: missed, busy, paused
//	leasebus.schedule.failures        Counter {error}  fires (and busy checks, Store saves) that failed
//	leasebus.schedule.paused          UpDownCounter    1 while paused
//	leasebus.schedule.next_fire.time  Gauge s          Unix time of the next fire; not reported while paused
//	leasebus.schedule.last_fire.time  Gauge s          Unix time the last slot's fire returned; not reported before the first
//
// Each carries messaging.system "leasebus" and leasebus.schedule.name. An
// alert on time() - leasebus_schedule_last_fire_time_seconds finds a
// schedule that stopped firing. A nil s is an invalid argument. Options
// that apply: WithMeterProvider, WithAttributes.
func ObserveSchedules(s *schedule.Scheduler, opts ...Option) (metric.Registration, error) {
	if s == nil {
		return nil, invalid("ObserveSchedules: nil scheduler")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m := c.meter()
	var errs []error
	newCounter := func(name, unit, desc string) metric.Int64ObservableCounter {
		in, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return in
	}
	gauge := func(name, desc string) metric.Float64ObservableGauge {
		in, err := m.Float64ObservableGauge(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return in
	}
	fired := newCounter("leasebus.schedule.fired", "{slot}", "Slots a schedule fired.")
	triggered := newCounter("leasebus.schedule.triggered", "{fire}", "Fires of a schedule by Trigger, outside its slots.")
	skipped := newCounter("leasebus.schedule.skipped", "{slot}", "Slots a schedule did not fire, by leasebus.schedule.skip_reason: missed, busy, paused.")
	failures := newCounter("leasebus.schedule.failures", "{error}", "Fires of a schedule (and busy checks, Store saves) that returned an error; a failed fire is retried.")
	paused, err := m.Int64ObservableUpDownCounter("leasebus.schedule.paused", metric.WithUnit("1"), metric.WithDescription("1 while a schedule is paused, else 0."))
	errs = append(errs, err)
	next := gauge("leasebus.schedule.next_fire.time", "Unix time of a schedule's next fire (its next slot, plus jitter, or its retry); not reported while paused.")
	last := gauge("leasebus.schedule.last_fire.time", "Unix time at which a schedule's last slot fired; not reported before the first.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelleasebus: instruments: %w", err)
	}
	var (
		mu   sync.Mutex // guards sets; callbacks of several readers may run at once
		sets = map[string]*scheduleSets{}
	)
	setsOf := func(name string) *scheduleSets {
		if ss := sets[name]; ss != nil {
			return ss
		}
		base := append([]attribute.KeyValue{systemAttr, scheduleKey.String(name)}, c.attrs...)
		ss := &scheduleSets{base: metric.WithAttributeSet(attribute.NewSet(base...))}
		for i, r := range skipReasons {
			ss.skips[i] = metric.WithAttributeSet(attribute.NewSet(append(base[:len(base):len(base)], skipKey.String(r))...))
		}
		sets[name] = ss
		return ss
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, st := range s.Status() {
			ss := setsOf(st.Name)
			seen[st.Name] = true
			o.ObserveInt64(fired, counter(st.Fired), ss.base)
			o.ObserveInt64(triggered, counter(st.Triggered), ss.base)
			for i, n := range [len(skipReasons)]uint64{st.SkippedMissed, st.SkippedBusy, st.SkippedPaused} {
				o.ObserveInt64(skipped, counter(n), ss.skips[i])
			}
			o.ObserveInt64(failures, counter(st.Failures), ss.base)
			p := int64(0)
			if st.Paused {
				p = 1
			}
			o.ObserveInt64(paused, p, ss.base)
			if !st.NextFire.IsZero() {
				o.ObserveFloat64(next, unixSeconds(st.NextFire.UnixNano()), ss.base)
			}
			if !st.LastFired.IsZero() {
				o.ObserveFloat64(last, unixSeconds(st.LastFired.UnixNano()), ss.base)
			}
		}
		for name := range sets {
			if !seen[name] {
				delete(sets, name)
			}
		}
		return nil
	}, fired, triggered, skipped, failures, paused, next, last)
}

func unixSeconds(ns int64) float64 { return float64(ns) / 1e9 }
