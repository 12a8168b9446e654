package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // a static binary on a bare machine still knows every zone

	"github.com/robfig/cron/v3"
)

// Schedule says when a job's ticks fall. The ticks are a fixed set of
// instants: Next(t) is the first of them after t, whatever t is, so a tick
// has the same scheduled time however the engine arrived at it.
type Schedule struct {
	expr string
	loc  *time.Location

	every time.Duration // @every: elapsed time, anchored at the Unix epoch

	// spec holds the cron fields as bit sets. Its Location is UTC: the
	// fields are matched on a naive wall clock and Next maps wall times to
	// instants itself (see Next for why).
	spec *cron.SpecSchedule
	// fixedHour is true unless the hour field is *. Such jobs follow
	// wall-clock rules across DST changes (a skipped time runs when the
	// gap ends, a repeated time runs once); jobs with hour * run every real
	// hour, as Vixie cron does.
	fixedHour bool
}

// cronStar is the bit robfig/cron sets in a field written as *; it does
// not export it.
const cronStar = 1 << 63

// parser accepts 5 fields, an optional leading seconds field, and the
// descriptors (@hourly, @daily, …; @every is parsed here).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseReference is where Parse looks for a first tick, to reject
// expressions that never fire (such as Feb 30). Fixed, so Parse is pure.
var parseReference = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Parse parses a cron expression read in an IANA time zone ("" is UTC).
// It accepts 5 fields (minute hour day-of-month month day-of-week), 6 with
// a leading seconds field, and @every DURATION, @hourly, @daily,
// @weekly, @monthly and @yearly.
func Parse(expr, timezone string) (Schedule, error) {
	loc, err := LoadZone(timezone)
	if err != nil {
		return Schedule{}, err
	}
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return Schedule{}, errors.New("empty cron expression")
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return Schedule{}, fmt.Errorf("cron expression %q: give the time zone as the job's timezone, not in the expression", expr)
	}
	if rest, ok := strings.CutPrefix(expr, "@every"); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < time.Second || d%time.Second != 0 {
			return Schedule{}, fmt.Errorf("invalid cron expression %q: @every wants a whole number of seconds, at least 1s, such as 90s or 5m", expr)
		}
		return Schedule{expr: expr, loc: loc, every: d}, nil
	}
	parsed, err := parser.Parse(expr)
	if err != nil {
		return Schedule{}, fmt.Errorf("invalid cron expression %q: %v", expr, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return Schedule{}, fmt.Errorf("invalid cron expression %q", expr)
	}
	spec.Location = time.UTC
	s := Schedule{expr: expr, loc: loc, spec: spec, fixedHour: spec.Hour&cronStar == 0}
	if s.Next(parseReference).IsZero() {
		return Schedule{}, fmt.Errorf("cron expression %q never fires", expr)
	}
	return s, nil
}

// String returns the expression as parsed.
func (s Schedule) String() string { return s.expr }

// Location returns the zone the schedule is read in.
func (s Schedule) Location() *time.Location {
	if s.loc == nil {
		return time.UTC
	}
	return s.loc
}

// Next returns the first tick strictly after after, in the schedule's
// zone, or the zero time if there is none within five years.
func (s Schedule) Next(after time.Time) time.Time {
	switch {
	case s.every > 0:
		// Multiples of the interval since the epoch: the ticks never depend
		// on when the engine started, so (job, scheduled_for) names the same
		// tick after a restart, and @every 5m lands on round minutes.
		sec := int64(s.every / time.Second)
		k := floorDiv(after.Unix(), sec) + 1
		return time.Unix(k*sec, 0).In(s.Location())
	case s.spec != nil:
		return s.nextCron(after)
	}
	return time.Time{}
}

// nextCron walks the zone's offset periods (between DST transitions the
// wall clock is a fixed offset from UTC) and matches the cron fields on the
// naive wall clock of each. robfig/cron's own Next adds hours and days to
// zoned times, which silently drops a tick at a time the clocks skip
// (02:30 on the spring-forward day) and can run a repeated time twice; here
// the transitions are explicit:
//   - fixed-hour jobs: a wall time in a gap runs at the gap's end (the
//     first valid instant after it), once however many ticks the gap
//     swallowed; a repeated wall time runs at its first occurrence only.
//   - hour *: ticks follow real time, so each real hour gets its minutes.
func (s Schedule) nextCron(after time.Time) time.Time {
	limit := after.AddDate(5, 0, 0)
	cur, inclusive := after, false
	for cur.Before(limit) {
		lt := cur.In(s.loc)
		_, off := lt.Zone()
		offset := time.Duration(off) * time.Second
		start, end := lt.ZoneBounds()

		wall := naive(lt)
		if inclusive {
			wall = wall.Add(-time.Nanosecond) // spec.Next is strictly after
		}
		w := s.spec.Next(wall)
		if w.IsZero() {
			return time.Time{}
		}
		at := w.Add(-offset)
		if end.IsZero() || at.Before(end) {
			if s.fixedHour && repeated(s.loc, w, start, offset) {
				cur, inclusive = at, false
				continue
			}
			return at.In(s.loc)
		}
		// No tick before the transition at end. If the clocks jump forward
		// there and w is a wall time they skip, it runs when the gap ends.
		_, off2 := end.In(s.loc).Zone()
		gapEnd := end.Add(time.Duration(off2) * time.Second) // naive wall clock
		if s.fixedHour && off2 > off && w.Before(gapEnd) {
			return end.In(s.loc)
		}
		cur, inclusive = end, true
	}
	return time.Time{}
}

// repeated reports whether the naive wall time w, which falls in the period
// starting at start with this offset, already happened in the period
// before (the clocks fell back at start).
func repeated(loc *time.Location, w, start time.Time, offset time.Duration) bool {
	if start.IsZero() {
		return false
	}
	_, prev := start.Add(-time.Nanosecond).In(loc).Zone()
	prevOffset := time.Duration(prev) * time.Second
	return prevOffset > offset && w.Add(-prevOffset).Before(start)
}

// naive returns t's wall clock as the same numbers in UTC.
func naive(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, sec := t.Clock()
	return time.Date(y, mo, d, h, mi, sec, t.Nanosecond(), time.UTC)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// zones caches loaded locations: time.LoadLocation parses zone data on
// every call, and the engine needs a job's zone on every tick.
var zones sync.Map // string → *time.Location

// LoadZone returns the IANA time zone with this name; "" is UTC. "Local"
// is refused: a job's meaning must not depend on the machine.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if name == "Local" {
		return nil, errors.New(`timezone "Local" depends on the machine: name an IANA zone such as Europe/Berlin`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown timezone %q: want an IANA name such as Europe/Berlin or UTC", name)
	}
	zones.Store(name, loc)
	return loc, nil
}
