package schedule

import (
	"fmt"
	"time"

	"github.com/leasebus/leasebus/backend"
)

// MinInterval is the shortest interval Every accepts.
const MinInterval = time.Millisecond

// Spec says when a schedule's slots fall: Every and Cron make one. A
// slot is an instant every replica and every restart computes alike,
// which is what lets a slot's dedup ID name it (see Fire.DedupID). The
// zero Spec is invalid. A Spec is a value, safe for concurrent use.
type Spec struct {
	every time.Duration
	cron  *cronSpec
	err   error
}

// Every returns a Spec whose slots are the multiples of d since the Unix
// epoch: Every(time.Hour) fires on the hour, Every(5*time.Minute) at :00,
// :05, and so on, in every process alike. An interval counts absolute
// time, so a daylight-saving change does not move it; for "03:00 local
// time" use Cron. d must be at least MinInterval; a Spec that is not says
// so when it is added (Scheduler.Add) or asked (Err).
func Every(d time.Duration) Spec {
	if d < MinInterval {
		return Spec{err: backend.Invalid("Every(%v): the interval must be at least %v", d, MinInterval)}
	}
	return Spec{every: d}
}

// Cron returns a Spec from a cron expression, read in UTC unless it
// starts with "CRON_TZ=Zone " (or "TZ=Zone "), Zone an IANA name such as
// Europe/Berlin. It accepts:
//
//   - five fields, "minute hour day-of-month month day-of-week", or six,
//     with seconds first;
//   - in each field "*", a value, a range "a-b", a step "*/n", "a-b/n" or
//     "a/n", and comma-separated lists of them; "?" means "*" in the day
//     fields;
//   - month names JAN-DEC and day names SUN-SAT (any case); Sunday is 0 or
//     7;
//   - "L" as the day of month: the last day of the month; "MON#1" in the
//     day of week: the first Monday of the month (n from 1 to 5);
//   - @yearly (@annually), @monthly, @weekly, @daily (@midnight) and
//     @hourly in place of the fields.
//
// When both day fields restrict, a day matching either one is a match, as
// in cron(8): "0 9 1-7 * MON" is every Monday and days 1-7; for the first
// Monday write "0 9 * * MON#1".
//
// # Daylight-saving time
//
// The fields name wall-clock times, and each wall-clock time of a date is
// one slot. A time that occurs twice (clocks set back) fires once, at its
// first occurrence. A time that does not occur (clocks set forward) fires
// at the first instant after the gap: "30 2 * * *" in America/New_York
// fires at 03:00 EDT on the day 02:00 becomes 03:00, and the times a
// schedule names inside one gap share that one fire. cron(8) does the same
// for a job at a fixed time; for one whose hour is a wildcard it runs
// the repeated hour twice, which a Spec does not (use Every for that).
//
// An expression that does not parse, or that matches no date (such as
// "0 0 30 2 *"), makes an invalid Spec, reported by Scheduler.Add and
// Err.
func Cron(expr string) Spec { return CronIn(time.UTC, expr) }

// CronIn is Cron with the expression read in loc (a CRON_TZ= prefix
// still wins).
func CronIn(loc *time.Location, expr string) Spec {
	c, err := parseCron(expr, loc)
	if err != nil {
		return Spec{err: backend.Invalid("cron %q: %v", expr, err)}
	}
	return Spec{cron: c}
}

// Err returns why the Spec is invalid (an error matching
// queue.ErrInvalidArgument), or nil.
func (s Spec) Err() error {
	if s.every == 0 && s.cron == nil && s.err == nil {
		return backend.Invalid("the zero Spec: use Every or Cron")
	}
	return s.err
}

// Next returns the first slot strictly after t, or the zero time when
// the Spec is invalid or (a cron that matches rarely) no slot comes
// within eight years.
func (s Spec) Next(t time.Time) time.Time {
	switch {
	case s.every > 0:
		return time.Unix(0, (floorDiv(t.UnixNano(), int64(s.every))+1)*int64(s.every)).UTC()
	case s.cron != nil:
		return s.cron.next(t)
	}
	return time.Time{}
}

// String returns "every D" or the cron expression as given.
func (s Spec) String() string {
	switch {
	case s.every > 0:
		return fmt.Sprintf("every %v", s.every)
	case s.cron != nil:
		return s.cron.String()
	case s.err != nil:
		return "invalid: " + s.err.Error()
	}
	return "invalid: zero Spec"
}

// slotsThrough returns how many slots fall in (after, upto] and the last
// of them (zero if none), counting an interval's without visiting each.
func (s Spec) slotsThrough(after, upto time.Time) (n int64, last time.Time) {
	if s.every > 0 {
		d := int64(s.every)
		k := floorDiv(upto.UnixNano(), d)
		if n = k - floorDiv(after.UnixNano(), d); n > 0 {
			last = time.Unix(0, k*d).UTC()
		}
		return max(n, 0), last
	}
	for t := s.Next(after); !t.IsZero() && !t.After(upto); t = s.Next(t) {
		n, last = n+1, t
	}
	return n, last
}

// floorDiv is a / b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
