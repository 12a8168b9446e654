package scheduler_test

import (
	"testing"
	"time"

	"agent/scheduler"
)

// fuzzZones are the zones a fuzzed expression is read in: no DST, the two
// common DST rules, a half-hour DST shift, a 45-minute offset and a zone
// whose DST changes happen at midnight.
var fuzzZones = []string{"", "UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "Asia/Kolkata", "America/Santiago"}

// fuzzFrom are the instants Next starts from: the year start, just before
// the US spring-forward gap, inside the EU fall-back hour, and a leap day.
var fuzzFrom = []time.Time{
	time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
	time.Date(2024, 3, 10, 6, 59, 30, 0, time.UTC),
	time.Date(2024, 10, 27, 0, 30, 0, 500, time.UTC),
	time.Date(2028, 2, 29, 23, 59, 59, 999999999, time.UTC),
}

// FuzzParse feeds arbitrary cron expressions to scheduler.Parse in a few
// zones. Invariants:
//   - it never panics; an error for one zone is an error for every zone
//     (the zones are all valid, so only the expression can be wrong);
//   - an accepted schedule keeps its zone and its expression;
//   - from a few fixed instants, Next is strictly later, on a whole
//     second, in the schedule's zone; Next of that tick is later still;
//   - Next(t) is the first tick after t: from just before the tick, or
//     from halfway to it, Next gives the same tick.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"*/5 * * * *",
		"0 9 * * 1-5",
		"30 2 * * *", // in the spring-forward gap in New York and Berlin
		"30 1 * * *", // repeated at fall back in New York
		"0 0 29 2 *",
		"15 10 1,15 * MON",
		"0 30 * * * *",
		"@every 90s",
		"@every 1h30m",
		"@hourly",
		"@daily",
		"@weekly",
		"@monthly",
		"@yearly",
		"0 0 30 2 *", // never fires: rejected
		"TZ=Europe/Berlin 0 9 * * *",
		"@every 1.5s",
		"61 * * * *",
		"",
	} {
		f.Add(s, uint8(0))
	}
	f.Add("0 2 * * SUN", uint8(3))
	f.Add("*/7 2-3 * 3,10 *", uint8(2))
	f.Add("45 1 * 4 *", uint8(4))
	f.Add("0 0 * 9 *", uint8(7))
	f.Fuzz(func(t *testing.T, expr string, zone uint8) {
		if len(expr) > 256 {
			t.Skip("long expressions only slow the fuzzer down")
		}
		name := fuzzZones[int(zone)%len(fuzzZones)]
		s, err := scheduler.Parse(expr, name)
		if err != nil {
			if _, uerr := scheduler.Parse(expr, "UTC"); uerr == nil {
				t.Fatalf("Parse(%q) fails in %q (%v) but not in UTC", expr, name, err)
			}
			return
		}
		loc, err := scheduler.LoadZone(name)
		if err != nil {
			t.Fatal(err)
		}
		if s.Location() != loc {
			t.Fatalf("schedule zone %v, want %v", s.Location(), loc)
		}
		if s.String() == "" {
			t.Fatalf("accepted %q has no expression", expr)
		}
		for _, from := range fuzzFrom {
			n1 := s.Next(from)
			if n1.IsZero() {
				// Parse proves a tick within five years of 2024-01-01; every
				// expression it accepts fires at least every four years.
				t.Fatalf("%q in %q: no tick after %v", expr, name, from)
			}
			if !n1.After(from) {
				t.Fatalf("%q in %q: Next(%v) = %v, not after it", expr, name, from, n1)
			}
			if n1.Nanosecond() != 0 {
				t.Fatalf("%q in %q: Next(%v) = %v, not on a whole second", expr, name, from, n1)
			}
			if n1.Location() != loc {
				t.Fatalf("%q in %q: Next(%v) is in %v", expr, name, from, n1.Location())
			}
			n2 := s.Next(n1)
			if !n2.After(n1) {
				t.Fatalf("%q in %q: Next(%v) = %v, not after it", expr, name, n1, n2)
			}
			if got := s.Next(n1.Add(-time.Nanosecond)); !got.Equal(n1) {
				t.Fatalf("%q in %q: Next(%v - 1ns) = %v, want %v (from %v)", expr, name, n1, got, n1, from)
			}
			mid := from.Add(n1.Sub(from) / 2)
			if got := s.Next(mid); !got.Equal(n1) {
				t.Fatalf("%q in %q: Next(%v) = %v, want %v (the first tick after %v)", expr, name, mid, got, n1, from)
			}
		}
	})
}
