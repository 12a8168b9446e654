package scheduler

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustParse(t testing.TB, expr, zone string) Schedule {
	t.Helper()
	s, err := Parse(expr, zone)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ticks returns the first n ticks after from.
func ticks(s Schedule, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// 2026 transitions: New York springs forward on 8 March at 02:00 EST and
// falls back on 1 November at 02:00 EDT; Berlin on 29 March at 02:00 CET
// and on 25 October at 03:00 CEST.
func TestNextAcrossDST(t *testing.T) {
	t.Parallel()
	const layout = "2006-01-02 15:04:05 MST"
	tests := []struct {
		name, zone, expr string
		from             string // local wall time
		want             []string
	}{
		{
			name: "NY spring-forward: 02:30 does not exist, runs at 03:00 EDT",
			zone: "America/New_York", expr: "30 2 * * *", from: "2026-03-07 12:00",
			want: []string{"2026-03-08 03:00:00 EDT", "2026-03-09 02:30:00 EDT"},
		},
		{
			name: "NY fall-back: 01:30 happens twice, runs once",
			zone: "America/New_York", expr: "30 1 * * *", from: "2026-10-31 12:00",
			want: []string{"2026-11-01 01:30:00 EDT", "2026-11-02 01:30:00 EST"},
		},
		{
			name: "Berlin spring-forward: 02:30 does not exist, runs at 03:00 CEST",
			zone: "Europe/Berlin", expr: "30 2 * * *", from: "2026-03-28 12:00",
			want: []string{"2026-03-29 03:00:00 CEST", "2026-03-30 02:30:00 CEST"},
		},
		{
			name: "Berlin fall-back: 02:30 happens twice, runs once",
			zone: "Europe/Berlin", expr: "30 2 * * *", from: "2026-10-24 12:00",
			want: []string{"2026-10-25 02:30:00 CEST", "2026-10-26 02:30:00 CET"},
		},
		{
			name: "a gap swallowing several ticks runs once when it ends",
			zone: "Europe/Berlin", expr: "*/15 2 * * *", from: "2026-03-29 01:50",
			want: []string{"2026-03-29 03:00:00 CEST", "2026-03-30 02:00:00 CEST"},
		},
		{
			name: "a tick at the end of the gap is not doubled",
			zone: "America/New_York", expr: "0 2,3 * * *", from: "2026-03-08 00:00",
			want: []string{"2026-03-08 03:00:00 EDT", "2026-03-09 02:00:00 EDT"},
		},
		{
			name: "every minute of a repeated hour runs once",
			zone: "America/New_York", expr: "*/20 1 * * *", from: "2026-11-01 00:30",
			want: []string{"2026-11-01 01:00:00 EDT", "2026-11-01 01:20:00 EDT", "2026-11-01 01:40:00 EDT", "2026-11-02 01:00:00 EST"},
		},
		{
			name: "hour * follows real time: the skipped hour has no ticks",
			zone: "America/New_York", expr: "30 * * * *", from: "2026-03-08 00:00",
			want: []string{"2026-03-08 00:30:00 EST", "2026-03-08 01:30:00 EST", "2026-03-08 03:30:00 EDT"},
		},
		{
			name: "hour * follows real time: the repeated hour runs again",
			zone: "America/New_York", expr: "30 * * * *", from: "2026-11-01 00:00",
			want: []string{"2026-11-01 00:30:00 EDT", "2026-11-01 01:30:00 EDT", "2026-11-01 01:30:00 EST", "2026-11-01 02:30:00 EST"},
		},
		{
			name: "@hourly across fall-back",
			zone: "Europe/Berlin", expr: "@hourly", from: "2026-10-25 01:30",
			want: []string{"2026-10-25 02:00:00 CEST", "2026-10-25 02:00:00 CET", "2026-10-25 03:00:00 CET"},
		},
		{
			name: "@daily in Berlin is local midnight",
			zone: "Europe/Berlin", expr: "@daily", from: "2026-03-28 12:00",
			want: []string{"2026-03-29 00:00:00 CET", "2026-03-30 00:00:00 CEST"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			loc := mustZone(t, tt.zone)
			from, err := time.ParseInLocation("2006-01-02 15:04", tt.from, loc)
			if err != nil {
				t.Fatal(err)
			}
			got := ticks(mustParse(t, tt.expr, tt.zone), from, len(tt.want))
			var gotText []string
			for _, g := range got {
				gotText = append(gotText, g.Format(layout))
			}
			if strings.Join(gotText, ", ") != strings.Join(tt.want, ", ") {
				t.Errorf("%s in %s from %s:\n got %s\nwant %s", tt.expr, tt.zone, tt.from,
					strings.Join(gotText, ", "), strings.Join(tt.want, ", "))
			}
		})
	}
}

// @hourly across the Berlin fall-back, as instants: an hour apart.
func TestHourlyFallBackInstants(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "@hourly", "Europe/Berlin")
	from := time.Date(2026, 10, 24, 23, 30, 0, 0, time.UTC) // 01:30 CEST
	got := ticks(s, from, 3)
	want := []time.Time{
		time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), // 02:00 CEST
		time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC), // 02:00 CET
		time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC), // 03:00 CET
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("tick %d = %v, want %v", i, got[i].UTC(), want[i])
		}
	}
}

// robfig/cron's own Next drops the spring-forward tick and runs the
// fall-back one twice (v3.0.1): the reason Schedule maps wall times itself.
func TestRobfigNextMishandlesDST(t *testing.T) {
	t.Parallel()
	ny := mustZone(t, "America/New_York")
	s, err := cron.ParseStandard("CRON_TZ=America/New_York 30 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next(time.Date(2026, 3, 7, 12, 0, 0, 0, ny)); got.In(ny).Day() != 9 {
		t.Logf("robfig now runs the spring-forward tick (%v): Schedule's own mapping may be simplified", got.In(ny))
	}
	s, _ = cron.ParseStandard("CRON_TZ=America/New_York 30 1 * * *")
	first := s.Next(time.Date(2026, 10, 31, 12, 0, 0, 0, ny))
	if second := s.Next(first); second.In(ny).Day() != 1 {
		t.Logf("robfig no longer repeats the fall-back tick (%v)", second.In(ny))
	}
	// Ours, for contrast.
	ours := mustParse(t, "30 1 * * *", "America/New_York")
	if second := ours.Next(ours.Next(time.Date(2026, 10, 31, 12, 0, 0, 0, ny))); second.In(ny).Day() != 2 {
		t.Errorf("fall-back tick repeated: %v", second.In(ny))
	}
}

// Next(t) is the first tick after t whatever t is: the ticks are a fixed
// set, so a restart computing from another instant finds the same ticks.
func TestNextIsIndependentOfStart(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct{ expr, zone string }{
		{"30 2 * * *", "America/New_York"},
		{"30 2 * * *", "Europe/Berlin"},
		{"*/7 1-3 * * *", "Europe/Berlin"},
		{"15 * * * *", "America/New_York"},
		{"0 0 */2 * * *", "Australia/Lord_Howe"}, // a 30-minute DST shift
		{"@every 7m", "Europe/Berlin"},
	}
	for _, c := range cases {
		s := mustParse(t, c.expr, c.zone)
		start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		end := start.AddDate(0, 11, 0)
		var all []time.Time
		for x := s.Next(start); x.Before(end); x = s.Next(x) {
			if n := len(all); n > 0 && !x.After(all[n-1]) {
				t.Fatalf("%s: ticks not increasing: %v then %v", c.expr, all[n-1], x)
			}
			all = append(all, x)
		}
		for i := 0; i < 2000; i++ {
			k := rng.IntN(len(all) - 1)
			gap := all[k+1].Sub(all[k])
			at := all[k].Add(time.Duration(rng.Int64N(int64(gap))))
			if got := s.Next(at); !got.Equal(all[k+1]) {
				t.Fatalf("%s in %s: Next(%v) = %v, want %v", c.expr, c.zone, at, got, all[k+1])
			}
		}
	}
}

func TestNextSecondsAndEvery(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 10, 0, 5, 0, time.UTC)
	tests := []struct {
		expr, zone string
		from       time.Time
		want       []time.Time
	}{
		{"*/20 * * * * *", "UTC", base, []time.Time{base.Add(15 * time.Second), base.Add(35 * time.Second), base.Add(55 * time.Second)}},
		{"0 30 9 * * 1-5", "UTC", time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC), // a Friday, after 09:30
			[]time.Time{time.Date(2026, 1, 5, 9, 30, 0, 0, time.UTC)}},
		// @every counts from the Unix epoch: 10:00:05 is 5s past a 90s boundary.
		{"@every 90s", "UTC", base, []time.Time{base.Add(85 * time.Second), base.Add(175 * time.Second)}},
		{"@every 1m", "America/New_York", base.Add(500 * time.Millisecond), []time.Time{base.Add(55 * time.Second), base.Add(115 * time.Second)}},
		{"@every 5m", "UTC", base.Add(-5 * time.Second), []time.Time{base.Add(5*time.Minute - 5*time.Second)}},
		{"@weekly", "UTC", base, []time.Time{time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC)}},
		{"@monthly", "UTC", base, []time.Time{time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)}},
		{"@yearly", "UTC", base, []time.Time{time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"0 0 29 2 *", "UTC", base, []time.Time{time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)}},
	}
	for _, tt := range tests {
		got := ticks(mustParse(t, tt.expr, tt.zone), tt.from, len(tt.want))
		for i := range tt.want {
			if i >= len(got) || !got[i].Equal(tt.want[i]) {
				t.Errorf("%s from %v: ticks %v, want %v", tt.expr, tt.from, got, tt.want)
				break
			}
		}
	}
	s := mustParse(t, "@every 1m", "Europe/Berlin")
	if got := s.Next(base); got.Location().String() != "Europe/Berlin" {
		t.Errorf("Next returned zone %v, want the schedule's", got.Location())
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ expr, zone, want string }{
		{"* * *", "UTC", `invalid cron expression "* * *": expected 5 to 6 fields, found 3`},
		{"61 * * * *", "UTC", "above maximum"},
		{"* * * * * * *", "UTC", "expected 5 to 6 fields, found 7"},
		{"0 0 30 2 *", "UTC", `cron expression "0 0 30 2 *" never fires`},
		{"@fortnightly", "UTC", "unrecognized descriptor"},
		{"@every 0s", "UTC", "@every wants a whole number of seconds"},
		{"@every 1.5s", "UTC", "@every wants a whole number of seconds"},
		{"@every soon", "UTC", "@every wants"},
		{"", "UTC", "empty cron expression"},
		{"TZ=Europe/Berlin * * * * *", "UTC", "give the time zone as the job's timezone"},
		{"* * * * *", "Mars/Olympus_Mons", `unknown timezone "Mars/Olympus_Mons": want an IANA name`},
		{"* * * * *", "Local", `timezone "Local" depends on the machine`},
	}
	for _, tt := range tests {
		_, err := Parse(tt.expr, tt.zone)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q, %q): err = %v, want one line containing %q", tt.expr, tt.zone, err, tt.want)
		}
	}
	for _, zone := range []string{"", "UTC", "Asia/Kolkata", "America/Argentina/Buenos_Aires"} {
		if _, err := Parse("0 9 * * *", zone); err != nil {
			t.Errorf("Parse in %q: %v", zone, err)
		}
	}
}

func BenchmarkNextCron(b *testing.B) {
	s := mustParse(b, "*/5 * * * *", "Europe/Berlin")
	t := time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		t = s.Next(t)
	}
}
