package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// cronSpec is a parsed cron expression: a set of local wall-clock times in
// one location. Each field is a bit set of the values it allows.
type cronSpec struct {
	expr string
	loc  *time.Location

	second, minute, hour uint64 // bits 0-59, 0-59, 0-23
	dom                  uint64 // bits 1-31
	month                uint64 // bits 1-12
	dow                  uint64 // bits 0-6, Sunday = 0
	lastDOM              bool   // "L" in the day-of-month field
	nthDOW               []nth  // "MON#1" in the day-of-week field
	domStar, dowStar     bool   // the field was "*" or "?": it restricts nothing
}

// nth is one "weekday#n" of a day-of-week field: the n-th such weekday of
// the month, n in 1-5.
type nth struct{ weekday, n int }

// descriptors are the @-names a cron expression may be.
var descriptors = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

var monthNames = map[string]int{"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6, "JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12}
var dayNames = map[string]int{"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}

// parseCron parses expr in loc. A leading "CRON_TZ=Zone " or "TZ=Zone "
// names the location instead.
func parseCron(expr string, loc *time.Location) (*cronSpec, error) {
	fields := strings.Fields(expr)
	if len(fields) > 0 {
		if zone, ok := strings.CutPrefix(fields[0], "CRON_TZ="); ok || strings.HasPrefix(fields[0], "TZ=") {
			if !ok {
				zone = strings.TrimPrefix(fields[0], "TZ=")
			}
			l, err := time.LoadLocation(zone)
			if err != nil {
				return nil, fmt.Errorf("time zone %q: %v", zone, err)
			}
			loc, fields = l, fields[1:]
		}
	}
	if loc == nil {
		return nil, fmt.Errorf("nil location")
	}
	if len(fields) == 1 && strings.HasPrefix(fields[0], "@") {
		d, ok := descriptors[strings.ToLower(fields[0])]
		if !ok {
			return nil, fmt.Errorf("unknown descriptor %q (want @yearly, @monthly, @weekly, @daily or @hourly; for a fixed interval use Every)", fields[0])
		}
		fields = strings.Fields(d)
	}
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return nil, fmt.Errorf("%d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with seconds first)", len(fields))
	}
	c := &cronSpec{expr: expr, loc: loc}
	var err error
	if c.second, _, err = parseField(fields[0], 0, 59, nil, "second"); err != nil {
		return nil, err
	}
	if c.minute, _, err = parseField(fields[1], 0, 59, nil, "minute"); err != nil {
		return nil, err
	}
	if c.hour, _, err = parseField(fields[2], 0, 23, nil, "hour"); err != nil {
		return nil, err
	}
	if fields[3] == "L" {
		c.lastDOM = true
	} else if c.dom, c.domStar, err = parseField(fields[3], 1, 31, nil, "day of month"); err != nil {
		return nil, err
	}
	if c.month, _, err = parseField(fields[4], 1, 12, monthNames, "month"); err != nil {
		return nil, err
	}
	if err = c.parseDOW(fields[5]); err != nil {
		return nil, err
	}
	if c.next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).In(loc)).IsZero() {
		return nil, fmt.Errorf("%q matches no date", expr)
	}
	return c, nil
}

// parseDOW parses the day-of-week field, where 7 is Sunday too and an item
// may be "weekday#n".
func (c *cronSpec) parseDOW(f string) error {
	var rest []string
	for item := range strings.SplitSeq(f, ",") {
		day, n, ok := strings.Cut(item, "#")
		if !ok {
			rest = append(rest, item)
			continue
		}
		w, err := value(day, 0, 7, dayNames, "day of week")
		if err != nil {
			return err
		}
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 || k > 5 {
			return fmt.Errorf("day of week %q: the n of weekday#n must be 1-5", item)
		}
		c.nthDOW = append(c.nthDOW, nth{w % 7, k})
	}
	if len(rest) > 0 {
		bits, star, err := parseField(strings.Join(rest, ","), 0, 7, dayNames, "day of week")
		if err != nil {
			return err
		}
		if bits&(1<<7) != 0 {
			bits = bits&^(1<<7) | 1
		}
		c.dow, c.dowStar = bits, star && len(c.nthDOW) == 0
	}
	return nil
}

// parseField parses a comma-separated list of "*", "?", "v", "a-b", each
// with an optional "/step", into a bit set over [lo, hi]; star reports a
// lone "*" or "?".
func parseField(f string, lo, hi int, names map[string]int, what string) (bits uint64, star bool, err error) {
	if f == "*" || f == "?" {
		star = true
	}
	for item := range strings.SplitSeq(f, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			step, err = strconv.Atoi(stepText)
			if err != nil || step < 1 || step > hi-lo+1 {
				return 0, false, fmt.Errorf("%s %q: step must be 1-%d", what, item, hi-lo+1)
			}
		}
		a, b := lo, hi
		switch {
		case rng == "*" || rng == "?":
		case strings.Contains(rng, "-"):
			x, y, _ := strings.Cut(rng, "-")
			if a, err = value(x, lo, hi, names, what); err != nil {
				return 0, false, err
			}
			if b, err = value(y, lo, hi, names, what); err != nil {
				return 0, false, err
			}
			if a > b {
				return 0, false, fmt.Errorf("%s %q: range runs backwards", what, item)
			}
		default:
			if a, err = value(rng, lo, hi, names, what); err != nil {
				return 0, false, err
			}
			if hasStep {
				b = hi // "5/15": from 5 to the end, every 15
			} else {
				b = a
			}
		}
		for v := a; v <= b; v += step {
			bits |= 1 << v
		}
	}
	return bits, star, nil
}

// value parses one value of a field: a number in [lo, hi] or a name.
func value(s string, lo, hi int, names map[string]int, what string) (int, error) {
	if v, ok := names[strings.ToUpper(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%s %q: want %d-%d", what, s, lo, hi)
	}
	return v, nil
}

// String returns the expression as given.
func (c *cronSpec) String() string { return c.expr }

// dayMatches reports whether the cron allows the civil date. When both
// day fields restrict, a day matching either is allowed (cron's rule).
func (c *cronSpec) dayMatches(y int, m time.Month, d int) bool {
	date := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	last := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
	domOK := c.dom&(1<<d) != 0 || (c.lastDOM && d == last)
	wd := int(date.Weekday())
	dowOK := c.dow&(1<<wd) != 0
	for _, k := range c.nthDOW {
		if k.weekday == wd && (d-1)/7+1 == k.n {
			dowOK = true
		}
	}
	domStar := c.domStar && !c.lastDOM
	switch {
	case domStar && c.dowStar:
		return true
	case domStar:
		return dowOK
	case c.dowStar:
		return domOK
	default:
		return domOK || dowOK
	}
}

// next returns the first slot strictly after t, or the zero time if none
// comes within eight years. Matching is on wall-clock time in c.loc; a
// wall-clock time is a slot once: a time the day repeats (clocks set back)
// fires at its first occurrence, and a time the day skips (clocks set
// forward) fires at the first instant after the gap, one slot however
// many skipped times the expression names.
func (c *cronSpec) next(t time.Time) time.Time {
	lt := t.In(c.loc)
	// Civil arithmetic runs on a UTC time.Time holding the wall clock, so
	// that adding a day or an hour never meets a time-zone change.
	w := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), 0, time.UTC).Add(time.Second)
	limit := w.AddDate(8, 0, 0)
	for w.Before(limit) {
		switch {
		case c.month&(1<<int(w.Month())) == 0:
			w = time.Date(w.Year(), w.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !c.dayMatches(w.Year(), w.Month(), w.Day()):
			w = time.Date(w.Year(), w.Month(), w.Day()+1, 0, 0, 0, 0, time.UTC)
		case c.hour&(1<<w.Hour()) == 0:
			w = w.Truncate(time.Hour).Add(time.Hour)
		case c.minute&(1<<w.Minute()) == 0:
			w = w.Truncate(time.Minute).Add(time.Minute)
		case c.second&(1<<w.Second()) == 0:
			w = w.Add(time.Second)
		default:
			if at := resolve(w, c.loc); at.After(t) {
				return at
			}
			w = w.Add(time.Second)
		}
	}
	return time.Time{}
}

// resolve returns the instant at which loc's wall clock first reads the
// civil time w (a UTC time.Time holding it); for a time loc's clocks skip,
// the first instant after the gap.
func resolve(w time.Time, loc *time.Location) time.Time {
	t := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, loc)
	if !wall(t).Equal(w) { // a time the clocks skip: Go read it in one of the zones around the gap
		start, end := t.ZoneBounds()
		if wall(t).After(w) {
			return start // t lies after the gap, which ends where t's zone starts
		}
		return end
	}
	// A time the clocks repeat reads the same in the zone before t's: take
	// the earlier instant.
	start, _ := t.ZoneBounds()
	if !start.IsZero() {
		_, off := t.Zone()
		_, prev := start.Add(-time.Nanosecond).Zone()
		if alt := t.Add(time.Duration(off-prev) * time.Second); alt.Before(start) && wall(alt.In(loc)).Equal(w) {
			return alt
		}
	}
	return t
}

// wall returns t's wall-clock reading as a UTC time.Time.
func wall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}
