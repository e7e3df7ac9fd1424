package schedule_test

import (
	"errors"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, on a machine without a zoneinfo database

	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// nexts returns the first n slots of spec after from.
func nexts(spec schedule.Spec, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = spec.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

func TestCronNext(t *testing.T) {
	utc := func(s string) time.Time {
		t, err := time.Parse("2006-01-02 15:04:05", s)
		if err != nil {
			panic(err)
		}
		return t
	}
	from := utc("2026-01-30 10:17:30") // a Friday
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"*/15 * * * *", []string{"2026-01-30 10:30:00", "2026-01-30 10:45:00", "2026-01-30 11:00:00"}},
		{"0 3 * * *", []string{"2026-01-31 03:00:00", "2026-02-01 03:00:00"}},
		{"@daily", []string{"2026-01-31 00:00:00", "2026-02-01 00:00:00"}},
		{"@hourly", []string{"2026-01-30 11:00:00", "2026-01-30 12:00:00"}},
		{"@weekly", []string{"2026-02-01 00:00:00", "2026-02-08 00:00:00"}},
		{"@monthly", []string{"2026-02-01 00:00:00", "2026-03-01 00:00:00"}},
		{"@yearly", []string{"2027-01-01 00:00:00", "2028-01-01 00:00:00"}},
		{"30 * * * * *", []string{"2026-01-30 10:18:30", "2026-01-30 10:19:30"}},
		{"*/20 17 10 * * *", []string{"2026-01-30 10:17:40", "2026-01-31 10:17:00"}},
		{"0 9 * * MON#1", []string{"2026-02-02 09:00:00", "2026-03-02 09:00:00", "2026-04-06 09:00:00"}},
		{"0 9 * * mon-fri", []string{"2026-02-02 09:00:00", "2026-02-03 09:00:00"}},
		{"0 0 L * *", []string{"2026-01-31 00:00:00", "2026-02-28 00:00:00", "2026-03-31 00:00:00"}},
		{"0 0 29 2 *", []string{"2028-02-29 00:00:00", "2032-02-29 00:00:00"}},
		{"0 12 13 * FRI", []string{"2026-01-30 12:00:00", "2026-02-06 12:00:00", "2026-02-13 12:00:00"}}, // either day field (cron(8))
		{"0 0 * * 7", []string{"2026-02-01 00:00:00"}},
		{"0 0 1 JAN,jul ?", []string{"2026-07-01 00:00:00", "2027-01-01 00:00:00"}},
		{"5/20 10 * * *", []string{"2026-01-30 10:25:00", "2026-01-30 10:45:00", "2026-01-31 10:05:00"}},
		{"0 22-23/1,2 * * *", []string{"2026-01-30 22:00:00", "2026-01-30 23:00:00", "2026-01-31 02:00:00"}},
	} {
		spec := schedule.Cron(tc.expr)
		if err := spec.Err(); err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		got := nexts(spec, from, len(tc.want))
		for i, w := range tc.want {
			if i >= len(got) || !got[i].Equal(utc(w)) {
				t.Errorf("%q: slots %v, want %v", tc.expr, got, tc.want)
				break
			}
		}
	}
}

func TestCronRefusals(t *testing.T) {
	for _, expr := range []string{
		"", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 13 *", "* * * * 8", "*/0 * * * *", "*/61 * * * *", "5-1 * * * *", "a * * * *",
		"@every 5m", "@often", "0 0 30 2 *", "0 0 * * MON#6", "0 0 * * MON#x",
		"CRON_TZ=Mars/Olympus 0 0 * * *", "1,,2 * * * *",
	} {
		err := schedule.Cron(expr).Err()
		if !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("Cron(%q).Err() = %v, want ErrInvalidArgument", expr, err)
		}
	}
	for _, d := range []time.Duration{-time.Second, 0, time.Microsecond} {
		if err := schedule.Every(d).Err(); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("Every(%v).Err() = %v", d, err)
		}
	}
	var zero schedule.Spec
	if err := zero.Err(); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("zero Spec: Err() = %v", err)
	}
	if !zero.Next(time.Now()).IsZero() || !schedule.Cron("x").Next(time.Now()).IsZero() {
		t.Error("an invalid Spec has a next slot")
	}
}

func TestEveryIsAlignedToTheUnixEpoch(t *testing.T) {
	spec := schedule.Every(7 * time.Minute)
	from := time.Date(2026, 3, 8, 1, 2, 3, 4, time.UTC)
	got := nexts(spec, from, 3)
	for i, g := range got {
		if g.Unix()%(7*60) != 0 || g.Nanosecond() != 0 {
			t.Errorf("slot %d = %v: not a multiple of 7m since the Unix epoch", i, g)
		}
		if i > 0 && g.Sub(got[i-1]) != 7*time.Minute {
			t.Errorf("slot %d = %v: %v after the one before", i, g, g.Sub(got[i-1]))
		}
	}
	if !got[0].After(from) || got[0].Sub(from) > 7*time.Minute {
		t.Errorf("first slot %v after %v", got[0], from)
	}
	// Strictly after: a slot is not its own next.
	if n := spec.Next(got[0]); !n.Equal(got[1]) {
		t.Errorf("Next(slot) = %v, want %v", n, got[1])
	}
	// Before the epoch too.
	if n := schedule.Every(time.Hour).Next(time.Unix(-90*60, 0)); !n.Equal(time.Unix(-3600, 0)) {
		t.Errorf("before the epoch: %v", n)
	}
}

// TestCronDST checks both daylight-saving transitions of two zones, one
// each side of the Atlantic: a wall-clock time the day skips fires at the
// first instant after the gap, once; one it repeats fires at its first
// occurrence, once; and a fixed interval is not moved.
func TestCronDST(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	berlin := mustLoad(t, "Europe/Berlin")
	at := func(loc *time.Location, s string) time.Time { // an instant, written as UTC
		t, err := time.Parse("2006-01-02 15:04", s)
		if err != nil {
			panic(err)
		}
		return t
	}
	for _, tc := range []struct {
		name string
		spec schedule.Spec
		from string // UTC
		want []string
	}{
		// New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC).
		{"NY spring: 02:30 does not exist, fires at 03:00 EDT", schedule.CronIn(ny, "30 2 * * *"),
			"2026-03-07 00:00", []string{"2026-03-07 07:30", "2026-03-08 07:00", "2026-03-09 06:30"}},
		{"NY spring: every 15 minutes, the gap is one fire", schedule.CronIn(ny, "*/15 * * * *"),
			"2026-03-08 06:40", []string{"2026-03-08 06:45", "2026-03-08 07:00", "2026-03-08 07:15"}},
		{"NY spring: 03:00 and the gap's times share the fire", schedule.CronIn(ny, "0 2,3 * * *"),
			"2026-03-08 06:00", []string{"2026-03-08 07:00", "2026-03-09 06:00"}},
		// New York, 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00 UTC).
		{"NY fall: 01:30 twice, fires at the first", schedule.CronIn(ny, "30 1 * * *"),
			"2026-10-31 00:00", []string{"2026-10-31 05:30", "2026-11-01 05:30", "2026-11-02 06:30"}},
		{"NY fall: every 30 minutes does not repeat the hour", schedule.CronIn(ny, "0,30 * * * *"),
			"2026-11-01 05:10", []string{"2026-11-01 05:30", "2026-11-01 07:00", "2026-11-01 07:30"}},
		{"NY fall: from inside the second pass", schedule.CronIn(ny, "0,30 * * * *"),
			"2026-11-01 06:10", []string{"2026-11-01 07:00"}},
		// Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
		{"Berlin spring: 02:30 fires at 03:00 CEST", schedule.Cron("CRON_TZ=Europe/Berlin 30 2 * * *"),
			"2026-03-28 00:00", []string{"2026-03-28 01:30", "2026-03-29 01:00", "2026-03-30 00:30"}},
		// Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC).
		{"Berlin fall: 02:30 twice, fires at the first", schedule.CronIn(berlin, "30 2 * * *"),
			"2026-10-24 00:00", []string{"2026-10-24 00:30", "2026-10-25 00:30", "2026-10-26 01:30"}},
		{"Berlin fall: hourly", schedule.CronIn(berlin, "0 * * * *"),
			"2026-10-24 23:30", []string{"2026-10-25 00:00", "2026-10-25 02:00", "2026-10-25 03:00"}},
		{"an interval ignores the change", schedule.Every(time.Hour),
			"2026-03-08 05:30", []string{"2026-03-08 06:00", "2026-03-08 07:00", "2026-03-08 08:00"}},
	} {
		got := nexts(tc.spec, at(time.UTC, tc.from), len(tc.want))
		for i, w := range tc.want {
			if i >= len(got) || !got[i].Equal(at(time.UTC, w)) {
				t.Errorf("%s: slots %v, want (UTC) %v", tc.name, got, tc.want)
				break
			}
		}
	}
	// A slot is shown in the schedule's zone.
	if s := schedule.CronIn(berlin, "0 12 * * *").Next(at(time.UTC, "2026-06-01 00:00")); s.Location() != berlin || s.Hour() != 12 {
		t.Errorf("slot %v: want 12:00 in Europe/Berlin", s)
	}
}
