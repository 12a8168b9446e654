package scheduler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"agent/event"
	"agent/store"
)

func completeAll(Tick) *Result { return &Result{Status: event.StatusCompleted} }

// Each job fires once per local day at its local time, and on transition
// days at the first valid instant (spring) or at the first 01:30/02:30
// only (fall); dispatch happens exactly at the tick.
func TestEngineFiresAtLocalTimeAcrossDST(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		from, to time.Time
		jobs     map[string]string // zone → expression
		want     map[string][]string
	}{
		{
			name: "spring forward",
			from: time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC), to: time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC),
			jobs: map[string]string{"America/New_York": "30 2 * * *"},
			want: map[string][]string{"America/New_York": {"2026-03-08 03:00 EDT", "2026-03-09 02:30 EDT"}},
		},
		{
			name: "spring forward Berlin",
			from: time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC), to: time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC),
			jobs: map[string]string{"Europe/Berlin": "30 2 * * *"},
			want: map[string][]string{"Europe/Berlin": {"2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST"}},
		},
		{
			name: "fall back",
			from: time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC), to: time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC),
			jobs: map[string]string{"America/New_York": "30 1 * * *"},
			want: map[string][]string{"America/New_York": {"2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"}},
		},
		{
			name: "fall back Berlin",
			from: time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC), to: time.Date(2026, 10, 26, 12, 0, 0, 0, time.UTC),
			jobs: map[string]string{"Europe/Berlin": "30 2 * * *"},
			want: map[string][]string{"Europe/Berlin": {"2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tt.from, func(c *Config) { c.PollInterval = time.Hour })
			h.disp.result = completeAll
			n := 0
			ids := map[string]string{} // zone → job id
			for zone, expr := range tt.jobs {
				// parallel: the fake clock may outrun a run's bookkeeping,
				// which must not make the next day's tick overlap it.
				j := h.create(JobSpec{Name: zone, CronExpr: expr, Timezone: zone, Policy: policy(func(p *Policy) { p.Overlap = OverlapParallel })})
				ids[zone] = j.ID
				n += len(tt.want[zone])
			}
			h.start()
			h.advanceTo(tt.to)
			h.rec.wait(t, EventJobCompleted, n)
			assertOnTime(t, h)
			// Which ticks ran, once each, at what local time: each run
			// starts on a goroutine of its own and the fake clock moves a
			// day on in microseconds, so the order of Dispatcher.Start
			// calls is up to the Go scheduler, not a promise to compare.
			const layout = "2006-01-02 15:04 MST"
			dispatched := map[string][]time.Time{}
			for _, c := range h.disp.starts() {
				dispatched[c.job.Timezone] = append(dispatched[c.job.Timezone], c.tick.ScheduledFor)
			}
			for zone, want := range tt.want {
				ticks := dispatched[zone]
				slices.SortFunc(ticks, time.Time.Compare)
				var got []string
				for _, at := range ticks {
					got = append(got, at.Format(layout)) // in the job's zone
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s ticks dispatched %v, want %v", zone, got, want)
				}
				got = nil
				for _, r := range h.runs(ids[zone]) { // oldest tick first
					got = append(got, r.ScheduledFor.In(mustZone(t, zone)).Format(layout))
					if r.Status != event.StatusCompleted || r.Attempt != 1 {
						t.Errorf("%s run %+v, want attempt 1 completed", zone, r)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s job runs for %v, want %v", zone, got, want)
				}
			}
		})
	}
}

// assertOnTime checks every tick was claimed exactly at its time (the
// loop sleeps until the earliest next_run_at).
func assertOnTime(t *testing.T, h *harness) {
	t.Helper()
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	for _, ev := range h.rec.evs {
		if ev.Type != EventJobTriggered {
			continue
		}
		var d TickData
		if err := ev.Decode(&d); err != nil {
			t.Fatal(err)
		}
		if !ev.TS.Equal(d.ScheduledFor) {
			t.Errorf("tick %v of %s triggered at %v", d.ScheduledFor, d.Name, ev.TS)
		}
	}
}

func TestEngineEveryAndSeconds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0, func(c *Config) { c.MaxConcurrentRuns = 100 }) // 10:00:30
	h.disp.result = completeAll
	par := policy(func(p *Policy) { p.Overlap = OverlapParallel })
	every := h.create(JobSpec{Name: "every", CronExpr: "@every 10s", Policy: par})
	secs := h.create(JobSpec{Name: "secs", CronExpr: "*/20 * * * * *", Policy: par})
	h.start()
	h.advanceTo(t0.Add(time.Minute))

	want := map[string][]string{
		every.ID: {"10:00:40", "10:00:50", "10:01:00", "10:01:10", "10:01:20", "10:01:30"},
		secs.ID:  {"10:00:40", "10:01:00", "10:01:20"},
	}
	h.rec.wait(t, EventJobCompleted, 9)
	assertOnTime(t, h)
	got := map[string][]string{}
	for _, c := range h.disp.starts() {
		got[c.job.ID] = append(got[c.job.ID], c.tick.ScheduledFor.Format("15:04:05"))
	}
	for id := range got {
		slices.Sort(got[id])
	}
	for id, w := range want {
		if !slices.Equal(got[id], w) {
			t.Errorf("job %s ticks %v, want %v", id, got[id], w)
		}
	}
	if j := h.job(every.ID); !j.NextRunAt.Equal(t0.Add(70*time.Second)) || j.LastRunAt.Before(t0.Add(60*time.Second)) {
		t.Errorf("every: next_run_at %v last_run_at %v", j.NextRunAt, j.LastRunAt)
	}
}

// A run longer than the interval: skip_if_running records the ticks it
// skips and says so in events; the next tick after the run ends runs.
func TestOverlapSkipIfRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0)
	j := h.create(JobSpec{Name: "slow", CronExpr: "@every 1m"})
	h.start()
	h.advanceTo(t0.Add(30 * time.Second)) // 10:01
	h.disp.waitStarts(t, 1)
	h.advanceTo(t0.Add(150 * time.Second)) // 10:03
	h.waitStatuses(j.ID, "running", "skipped", "skipped")

	skipped := h.rec.of(EventJobSkippedOverlap)
	if len(skipped) != 2 || skipped[0].ScheduledFor.Format("15:04") != "10:02" || skipped[1].ScheduledFor.Format("15:04") != "10:03" ||
		!strings.Contains(skipped[0].Reason, "skip_if_running") || skipped[0].JobID != j.ID || skipped[0].Name != "slow" {
		t.Errorf("skipped events %+v", skipped)
	}
	if r := h.runs(j.ID)[1]; !strings.Contains(r.ErrorText, "still in progress") {
		t.Errorf("skipped run error_text %q", r.ErrorText)
	}
	if n := len(h.disp.starts()); n != 1 {
		t.Fatalf("%d runs started while the first ran, want 1", n)
	}

	h.disp.finish("run-1", Result{Status: event.StatusCompleted})
	h.rec.wait(t, EventJobCompleted, 1)
	h.advanceTo(t0.Add(210 * time.Second)) // 10:04
	calls := h.disp.waitStarts(t, 2)
	if got := calls[1].tick.ScheduledFor.Format("15:04"); got != "10:04" {
		t.Errorf("next run is for %s, want 10:04", got)
	}
	h.waitStatuses(j.ID, "completed", "skipped", "skipped", "running")
}

// queue_one keeps one tick waiting behind the running one and skips the
// rest; the waiting tick runs when the first ends.
func TestOverlapQueueOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0)
	j := h.create(JobSpec{Name: "queued", CronExpr: "@every 1m", Policy: policy(func(p *Policy) { p.Overlap = OverlapQueueOne })})
	h.start()
	h.advanceTo(t0.Add(210 * time.Second)) // 10:04
	h.waitStatuses(j.ID, "running", "queued", "skipped", "skipped")
	if n := len(h.disp.starts()); n != 1 {
		t.Fatalf("%d runs started, want 1", n)
	}
	if got := h.rec.of(EventJobTriggered); len(got) != 2 {
		t.Errorf("%d job.triggered, want 2 (the running and the queued tick)", len(got))
	}
	if got := h.rec.of(EventJobSkippedOverlap); len(got) != 2 || !strings.Contains(got[0].Reason, "queue_one") {
		t.Errorf("skipped events %+v", got)
	}

	h.disp.finish("run-1", Result{Status: event.StatusCompleted})
	calls := h.disp.waitStarts(t, 2)
	if got := calls[1].tick.ScheduledFor.Format("15:04"); got != "10:02" {
		t.Errorf("queued tick is %s, want 10:02", got)
	}
	if !calls[1].at.Equal(t0.Add(210 * time.Second)) {
		t.Errorf("queued tick dispatched at %v, want when the first ended", calls[1].at)
	}
	h.waitStatuses(j.ID, "completed", "running", "skipped", "skipped")
	// With the queued tick now running, the slot behind it is free again.
	h.advanceTo(t0.Add(270 * time.Second)) // 10:05
	h.waitStatuses(j.ID, "completed", "running", "skipped", "skipped", "queued")
}

// parallel runs overlap, bounded by MaxConcurrentRuns; the tick beyond
// the bound waits as queued and starts, in order, when a slot frees.
func TestOverlapParallelBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0, func(c *Config) { c.MaxConcurrentRuns = 2 })
	j := h.create(JobSpec{Name: "par", CronExpr: "@every 1m", Policy: policy(func(p *Policy) { p.Overlap = OverlapParallel })})
	h.start()
	h.advanceTo(t0.Add(150 * time.Second)) // 10:03
	h.waitStatuses(j.ID, "running", "running", "queued")
	if n := len(h.disp.starts()); n != 2 {
		t.Fatalf("%d runs in flight, want MaxConcurrentRuns=2", n)
	}
	h.advanceTo(t0.Add(210 * time.Second)) // 10:04
	h.waitStatuses(j.ID, "running", "running", "queued", "queued")

	h.disp.finish("run-2", Result{Status: event.StatusCompleted})
	calls := h.disp.waitStarts(t, 3)
	if got := calls[2].tick.ScheduledFor.Format("15:04"); got != "10:03" {
		t.Errorf("third run is for %s, want the oldest queued tick 10:03", got)
	}
	h.waitStatuses(j.ID, "running", "completed", "running", "queued")
}

// MaxConcurrentRuns bounds runs across jobs, and a tick waiting for a slot
// counts as running for its job's overlap policy.
func TestMaxConcurrentRunsAcrossJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0, func(c *Config) { c.MaxConcurrentRuns = 1 })
	a := h.create(JobSpec{Name: "a", CronExpr: "@every 1m"})
	b := h.create(JobSpec{Name: "b", CronExpr: "@every 1m"})
	h.start()
	h.advanceTo(t0.Add(30 * time.Second)) // 10:01
	first := h.disp.waitStarts(t, 1)[0]
	other := a.ID
	if first.job.ID == a.ID {
		other = b.ID
	}
	h.waitStatuses(other, "queued")
	h.advanceTo(t0.Add(90 * time.Second)) // 10:02: both jobs busy, both skip
	h.waitStatuses(first.job.ID, "running", "skipped")
	h.waitStatuses(other, "queued", "skipped")

	h.disp.finish(first.runID, Result{Status: event.StatusCompleted})
	calls := h.disp.waitStarts(t, 2)
	if calls[1].job.ID != other {
		t.Errorf("second run is job %s, want the queued %s", calls[1].job.Name, other)
	}
}

// A gateway restart: the stopped engine's ticks pass, and a new engine on
// the same store applies each job's missed-run policy.
func TestRestartAppliesMissedPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		missed   string
		recovery string // Config.RecoveryPolicy
		wantRun  bool
	}{
		{name: "skip", missed: MissedSkip},
		{name: "run_once_on_recovery", missed: MissedRunOnceOnRecovery, wantRun: true},
		{name: "gateway default skip", recovery: MissedSkip},
		{name: "gateway default run once", recovery: MissedRunOnceOnRecovery, wantRun: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, t0, func(c *Config) { c.RecoveryPolicy = tt.recovery })
			h.disp.result = completeAll
			j := h.create(JobSpec{Name: "hourly", CronExpr: "0 * * * *", Policy: policy(func(p *Policy) { p.Missed = tt.missed })})
			h.start()
			h.stop()
			h.clock.Set(t0.Add(3*time.Hour + 30*time.Minute)) // 13:30:30: 11:00, 12:00 and 13:00 passed

			h.eng = h.newEngine()
			h.start()
			if !tt.wantRun {
				if n := len(h.runs(j.ID)); n != 0 || len(h.disp.starts()) != 0 {
					t.Errorf("%d job runs, %d dispatches after missed ticks, want none", n, len(h.disp.starts()))
				}
			} else {
				calls := h.disp.waitStarts(t, 1)
				h.rec.wait(t, EventJobCompleted, 1)
				if len(calls) != 1 || calls[0].tick.ScheduledFor.Format("15:04") != "13:00" {
					t.Errorf("recovery runs %d, first for %v; want one, for 13:00", len(calls), calls[0].tick.ScheduledFor)
				}
				if tr := h.rec.of(EventJobTriggered); len(tr) != 1 || tr[0].Trigger != TriggerRecovery {
					t.Errorf("triggered events %+v, want one recovery", tr)
				}
				h.waitStatuses(j.ID, "completed")
			}
			if next := h.job(j.ID).NextRunAt; next.Format("15:04") != "14:00" {
				t.Errorf("next_run_at %v, want 14:00", next)
			}
			// Then the schedule goes on as usual.
			h.advanceTo(time.Date(2026, 1, 3, 14, 0, 0, 0, time.UTC))
			h.disp.waitStarts(t, map[bool]int{false: 1, true: 2}[tt.wantRun])
		})
	}
}

// A tick claimed before a crash is never run again: the new engine marks
// the dead process's run interrupted and does not claim the tick again,
// even when it is the latest missed tick of a run_once_on_recovery job.
func TestRestartDoesNotRerunClaimedTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, t0)
	h.disp.result = completeAll
	j := h.create(JobSpec{Name: "hourly", CronExpr: "0 * * * *", Policy: policy(func(p *Policy) { p.Missed = MissedRunOnceOnRecovery })})
	// The dead gateway claimed 13:00 (say through a claim that was not
	// followed by advancing next_run_at) and was running it.
	claimed, err := h.db.ClaimTick(ctx, j.ID, time.Date(2026, 1, 3, 13, 0, 0, 0, time.UTC), 1, event.StatusRunning)
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Set(t0.Add(3*time.Hour + 30*time.Minute))
	h.start()
	h.advanceTo(h.clock.Now().Add(time.Minute))
	if n := len(h.disp.starts()); n != 0 {
		t.Fatalf("%d runs after restart, want 0: the 13:00 tick was already claimed", n)
	}
	runs := h.runs(j.ID)
	if len(runs) != 1 || runs[0].ID != claimed.ID || runs[0].Status != event.StatusFailed ||
		!strings.Contains(runs[0].ErrorText, "interrupted") {
		t.Errorf("runs after restart %+v, want the claimed one, failed as interrupted", runs)
	}
	if next := h.job(j.ID).NextRunAt; next.Format("15:04") != "14:00" {
		t.Errorf("next_run_at %v, want 14:00", next)
	}
}

// A graceful restart with a run in flight: the run is cancelled and
// recorded, and the new engine does not run its tick again.
func TestRestartWithRunInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0)
	j := h.create(JobSpec{Name: "hourly", CronExpr: "0 * * * *", Policy: policy(func(p *Policy) { p.Missed = MissedRunOnceOnRecovery })})
	h.start()
	h.advanceTo(time.Date(2026, 1, 3, 11, 0, 0, 0, time.UTC))
	h.disp.waitStarts(t, 1)
	h.stop()
	if _, cancels, _ := h.disp.snapshot(); !slices.Equal(cancels, []string{"run-1"}) {
		t.Errorf("cancels on stop %v, want run-1", cancels)
	}
	runs := h.runs(j.ID)
	if len(runs) != 1 || runs[0].Status != event.StatusCancelled || !strings.Contains(runs[0].ErrorText, "scheduler stopped") {
		t.Fatalf("runs after stop %+v", runs)
	}
	if f := h.rec.wait(t, EventJobFailed, 1); f[0].Status != event.StatusCancelled || *f[0].WillRetry {
		t.Errorf("job.failed on stop %+v", f[0])
	}

	h.clock.Set(time.Date(2026, 1, 3, 11, 30, 0, 0, time.UTC))
	h.eng = h.newEngine()
	h.start()
	if n := len(h.disp.starts()); n != 1 {
		t.Errorf("%d dispatches after restart, want still 1", n)
	}
}

// The clock jumping past several ticks while the engine runs (a suspended
// laptop, a clock step) is a missed run too.
func TestClockJumpAppliesMissedPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0)
	h.disp.result = completeAll
	skip := h.create(JobSpec{Name: "skip", CronExpr: "0 * * * *"})
	once := h.create(JobSpec{Name: "once", CronExpr: "0 * * * *", Policy: policy(func(p *Policy) { p.Missed = MissedRunOnceOnRecovery })})
	h.start()
	h.jump(3*time.Hour + 30*time.Minute)
	calls := h.disp.waitStarts(t, 1)
	h.rec.wait(t, EventJobCompleted, 1)
	if len(calls) != 1 || calls[0].job.ID != once.ID || calls[0].tick.ScheduledFor.Format("15:04") != "13:00" {
		t.Errorf("runs after the jump: %d, first %s for %v; want one, once for 13:00", len(calls), calls[0].job.Name, calls[0].tick.ScheduledFor)
	}
	if n := len(h.runs(skip.ID)); n != 0 {
		t.Errorf("skip job has %d runs", n)
	}
	// A tick found a little late (within MissedGrace) still runs.
	h.jump(30*time.Minute + 30*time.Second) // 14:00:30
	h.disp.waitStarts(t, 3)
}

// Ticks found late but within MissedGrace coalesce into the latest,
// which runs as scheduled whatever the missed-run policy.
func TestLateTicksCoalesce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0) // 10:00:30
	h.disp.result = completeAll
	j := h.create(JobSpec{Name: "often", CronExpr: "@every 10s"})
	h.start()
	h.jump(25 * time.Second) // 10:00:55: 10:00:40 and 10:00:50 are due
	calls := h.disp.waitStarts(t, 1)
	h.rec.wait(t, EventJobCompleted, 1)
	if len(h.disp.starts()) != 1 || calls[0].tick.ScheduledFor.Format("15:04:05") != "10:00:50" {
		t.Errorf("runs %d, first for %v; want one, for 10:00:50", len(h.disp.starts()), calls[0].tick.ScheduledFor)
	}
	if tr := h.rec.of(EventJobTriggered); tr[0].Trigger != TriggerSchedule {
		t.Errorf("trigger %q, want schedule", tr[0].Trigger)
	}
	if next := h.job(j.ID).NextRunAt; next.Format("15:04:05") != "10:01:00" {
		t.Errorf("next_run_at %v", next)
	}
}

// A schedule row that no longer parses (edited behind the engine's back)
// is paused rather than found due forever.
func TestBrokenJobIsPaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, t0)
	j := h.create(JobSpec{Name: "broken", CronExpr: "@every 1m"})
	row := h.job(j.ID)
	row.CronExpr = "not cron"
	if err := h.db.UpdateJob(ctx, &row); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.advance(time.Minute)
	if got := h.job(j.ID); got.Enabled {
		t.Errorf("broken job still enabled")
	}
	shown, err := h.eng.GetJob(ctx, j.ID)
	if err != nil || shown.CronExpr != "not cron" || shown.Policy.Timeout != DefaultTimeout {
		t.Errorf("GetJob of a broken job = %+v, %v", shown, err)
	}
	if _, err := h.eng.ResumeJob(ctx, j.ID); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("ResumeJob of a broken job: err = %v, want ErrInvalidJob", err)
	}
}

// Failed attempts are retried after Base·2^(n-1) capped at Cap, with
// jitter from Rand; the last failure says will_retry false.
func TestRetryBackoffAndExhaustion(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0) // Rand returns 0.5: delay = 3/4 of nominal
	h.disp.result = func(Tick) *Result { return &Result{Status: event.StatusFailed, Err: "boom"} }
	j := h.create(JobSpec{Name: "flaky", CronExpr: "0 11 * * *", Policy: policy(func(p *Policy) {
		p.Retry = Retry{MaxAttempts: 3, Base: 30 * time.Second, Cap: 45 * time.Second}
	})})
	h.start()
	tick := time.Date(2026, 1, 3, 11, 0, 0, 0, time.UTC)
	h.advanceTo(tick)
	f := h.rec.wait(t, EventJobFailed, 1)
	if !*f[0].WillRetry || f[0].RetryInMS != 22500 || f[0].Attempt != 1 || f[0].MaxAttempts != 3 || f[0].Error != "boom" {
		t.Errorf("first failure %+v, want will_retry in 22.5s", f[0])
	}
	h.advanceTo(tick.Add(22500 * time.Millisecond))
	f = h.rec.wait(t, EventJobFailed, 2)
	if !*f[1].WillRetry || f[1].RetryInMS != 33750 || f[1].Attempt != 2 {
		t.Errorf("second failure %+v, want will_retry in 33.75s (capped at 45s)", f[1])
	}
	h.advanceTo(tick.Add(56250 * time.Millisecond))
	f = h.rec.wait(t, EventJobFailed, 3)
	if *f[2].WillRetry || f[2].Attempt != 3 || f[2].Status != "failed" || f[2].Error != "boom" || f[2].RunID != "run-3" {
		t.Errorf("last failure %+v, want will_retry false", f[2])
	}

	calls := h.disp.starts()
	wantAt := []time.Duration{0, 22500 * time.Millisecond, 56250 * time.Millisecond}
	if len(calls) != 3 {
		t.Fatalf("%d attempts, want 3", len(calls))
	}
	for i, c := range calls {
		if !c.at.Equal(tick.Add(wantAt[i])) || c.tick.Attempt != i+1 || !c.tick.ScheduledFor.Equal(tick) {
			t.Errorf("attempt %d: at %v attempt %d for %v", i+1, c.at, c.tick.Attempt, c.tick.ScheduledFor)
		}
	}
	runs := h.runs(j.ID)
	for i, r := range runs {
		if r.Attempt != i+1 || r.Status != event.StatusFailed || r.ErrorText != "boom" || !r.ScheduledFor.Equal(tick) {
			t.Errorf("run %d: %+v", i, r)
		}
	}
	if len(h.rec.of(EventJobStarted)) != 3 || len(h.rec.of(EventJobTriggered)) != 1 {
		t.Errorf("started %d triggered %d, want 3 and 1", len(h.rec.of(EventJobStarted)), len(h.rec.of(EventJobTriggered)))
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	r := Retry{MaxAttempts: 10, Base: 30 * time.Second, Cap: 10 * time.Minute}
	tests := []struct {
		n    int
		rnd  float64
		want time.Duration
	}{
		{1, 0, 15 * time.Second},
		{1, 1, 30 * time.Second},
		{2, 0.5, 45 * time.Second},
		{3, 0, 60 * time.Second},
		{5, 1, 8 * time.Minute},
		{6, 0, 5 * time.Minute}, // 16m capped at 10m
		{6, 1, 10 * time.Minute},
		{100, 0.5, 7*time.Minute + 30*time.Second},
	}
	for _, tt := range tests {
		if got := r.Delay(tt.n, tt.rnd); got != tt.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", tt.n, tt.rnd, got, tt.want)
		}
	}
}

// A timed-out attempt is cancelled through the Dispatcher, and the retry
// waits until that run's process is really gone (done closed), however
// long that takes: a retry never overlaps the attempt it replaces.
func TestTimeoutWaitsForProcessBeforeRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0)
	h.disp.stubborn = true
	j := h.create(JobSpec{Name: "hung", CronExpr: "0 11 * * *", Policy: policy(func(p *Policy) {
		p.Timeout = time.Minute
		p.Retry = Retry{MaxAttempts: 2, Base: 10 * time.Second, Cap: 10 * time.Second}
	})})
	h.start()
	tick := time.Date(2026, 1, 3, 11, 0, 0, 0, time.UTC)
	h.advanceTo(tick)
	h.rec.wait(t, EventJobStarted, 1) // the timeout is armed
	h.advanceTo(tick.Add(time.Minute))
	if got := h.disp.waitCancels(t, 1); got[0] != "run-1" {
		t.Fatalf("cancelled %v, want run-1", got)
	}

	// The process lingers for 10 minutes: no retry, no failure yet.
	h.advanceTo(tick.Add(11 * time.Minute))
	if n := len(h.disp.starts()); n != 1 {
		t.Fatalf("%d attempts while the timed-out run is alive, want 1", n)
	}
	if n := len(h.rec.of(EventJobFailed)); n != 0 {
		t.Errorf("%d job.failed before the run ended", n)
	}
	h.waitStatuses(j.ID, "running")

	h.disp.finish("run-1", Result{Status: event.StatusCancelled, Err: "killed"})
	f := h.rec.wait(t, EventJobFailed, 1)
	if f[0].Error != "timed out after 1m0s" || !*f[0].WillRetry || f[0].RetryInMS != 7500 {
		t.Errorf("failure %+v, want timed out, retry in 7.5s", f[0])
	}
	h.advanceTo(tick.Add(11*time.Minute + 7500*time.Millisecond))
	calls := h.disp.waitStarts(t, 2)
	h.rec.wait(t, EventJobStarted, 2)
	if want := tick.Add(11*time.Minute + 7500*time.Millisecond); !calls[1].at.Equal(want) {
		t.Errorf("retry at %v, want %v: the backoff counts from when the process was gone", calls[1].at, want)
	}
	h.disp.finish("run-2", Result{Status: event.StatusCompleted})
	h.rec.wait(t, EventJobCompleted, 1)
	runs := h.runs(j.ID)
	if len(runs) != 2 || runs[0].Status != event.StatusFailed || runs[0].ErrorText != "timed out after 1m0s" ||
		runs[1].Status != event.StatusCompleted || runs[1].RunID != "run-2" {
		t.Errorf("runs %+v", runs)
	}
}

func TestPromptRendering(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC), func(c *Config) { c.PollInterval = time.Hour })
	h.disp.result = completeAll
	h.create(JobSpec{
		Name: "nightly-report", CronExpr: "30 2 * * *", Timezone: "Europe/Berlin",
		Prompt: `Report for {{.ScheduledFor.Format "2006-01-02 15:04 MST"}} by {{.JobName}}, attempt {{.Attempt}}`,
		Policy: policy(func(p *Policy) { p.Tools = []string{"read_file", "send_email"} }),
	})
	h.start()
	h.advanceTo(time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC))
	c := h.disp.waitStarts(t, 1)[0]
	if want := "Report for 2026-03-29 03:00 CEST by nightly-report, attempt 1"; c.tick.Prompt != want {
		t.Errorf("prompt %q, want %q", c.tick.Prompt, want)
	}
	if !slices.Equal(c.tick.Tools, []string{"read_file", "send_email"}) || c.tick.Timeout != DefaultTimeout || c.tick.Manual {
		t.Errorf("tick %+v", c.tick)
	}

	got, err := RenderPrompt("{{.JobName}} at {{.ScheduledFor.Hour}}", PromptData{JobName: "x", ScheduledFor: time.Date(2026, 1, 1, 7, 0, 0, 0, time.UTC)})
	if err != nil || got != "x at 7" {
		t.Errorf("RenderPrompt = %q, %v", got, err)
	}
}

func TestRunNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, t0)
	j := h.create(JobSpec{Name: "manual", CronExpr: "0 0 1 1 *", Paused: true})
	if _, err := h.eng.RunNow(ctx, j.ID); !errors.Is(err, ErrNotRunning) {
		t.Errorf("RunNow before Start: err = %v, want ErrNotRunning", err)
	}
	h.start()
	run, err := h.eng.RunNow(ctx, "manual")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != event.StatusQueued || !run.ScheduledFor.Equal(t0) || run.JobID != j.ID {
		t.Errorf("RunNow = %+v", run)
	}
	c := h.disp.waitStarts(t, 1)[0]
	if !c.tick.Manual || c.tick.Prompt != "do manual" {
		t.Errorf("tick %+v", c.tick)
	}
	if tr := h.rec.wait(t, EventJobTriggered, 1); tr[0].Trigger != TriggerManual {
		t.Errorf("triggered %+v", tr[0])
	}

	// The job is running: skip_if_running applies to manual runs too.
	h.clock.Advance(time.Second)
	run, err = h.eng.RunNow(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != event.StatusSkipped || !strings.Contains(run.ErrorText, "still in progress") {
		t.Errorf("second RunNow = %+v, want skipped", run)
	}
	h.rec.wait(t, EventJobSkippedOverlap, 1)
	if _, err := h.eng.RunNow(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RunNow unknown job: err = %v", err)
	}
}

func TestDeleteCancelsRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, t0)
	j := h.create(JobSpec{Name: "doomed", CronExpr: "@every 1m"})
	h.start()
	h.advanceTo(t0.Add(30 * time.Second))
	h.disp.waitStarts(t, 1)
	if err := h.eng.DeleteJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	h.disp.waitCancels(t, 1)
	f := h.rec.wait(t, EventJobFailed, 1)
	if f[0].Status != event.StatusCancelled || !strings.Contains(f[0].Error, "deleted") {
		t.Errorf("job.failed %+v", f[0])
	}
	if _, err := h.eng.GetJob(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob after delete: %v", err)
	}
}

// Stop ends every goroutine and run and leaves no slot taken, with ticks
// running, waiting for a slot and backing off.
func TestStopCleansUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0, func(c *Config) { c.MaxConcurrentRuns = 1 })
	running := h.create(JobSpec{Name: "a", CronExpr: "@every 1m"})
	waiting := h.create(JobSpec{Name: "b", CronExpr: "@every 1m"})
	h.start()
	h.advanceTo(t0.Add(30 * time.Second))
	first := h.disp.waitStarts(t, 1)[0]
	if first.job.ID != running.ID {
		running, waiting = waiting, running
	}
	h.waitStatuses(waiting.ID, "queued")
	h.stop()
	h.waitStatuses(running.ID, "cancelled")
	h.waitStatuses(waiting.ID, "cancelled")
	if n := len(h.eng.jobs); n != 0 {
		t.Errorf("%d jobs still tracked after Stop", n)
	}
	if h.eng.slots.free != 1 || len(h.eng.slots.waiters) != 0 {
		t.Errorf("slots after Stop: free %d waiters %d", h.eng.slots.free, len(h.eng.slots.waiters))
	}
	// Start again works.
	h.eng.Start(context.Background())
	h.eng.Stop()
}

func TestJobManagement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, t0)
	j := h.create(JobSpec{Name: "report", CronExpr: "0 9 * * *", Timezone: "Europe/Berlin", SessionID: "sess-1"})
	if j.ID == "" || !j.Enabled || j.Timezone != "Europe/Berlin" || j.NextRunAt.UTC().Format(time.DateTime) != "2026-01-04 08:00:00" ||
		j.Policy.Overlap != OverlapSkipIfRunning || j.Policy.Timeout != DefaultTimeout || j.CreatedAt.IsZero() {
		t.Errorf("created %+v", j)
	}
	if c := h.rec.of(EventJobCreated); len(c) != 1 {
		t.Errorf("%d job.created events", len(c))
	}

	invalid := []struct {
		spec JobSpec
		want string
	}{
		{JobSpec{Name: "", CronExpr: "* * * * *", Prompt: "x"}, "job name is required"},
		{JobSpec{Name: "x", CronExpr: "* * *", Prompt: "x"}, "expected 5 to 6 fields"},
		{JobSpec{Name: "x", CronExpr: "* * * * *", Timezone: "Nowhere/Land", Prompt: "x"}, `unknown timezone "Nowhere/Land"`},
		{JobSpec{Name: "x", CronExpr: "* * * * *", Prompt: "{{.Nope}}"}, "invalid prompt template"},
		{JobSpec{Name: "x", CronExpr: "* * * * *", Prompt: "{{.JobName"}, "invalid prompt template"},
		{JobSpec{Name: "x", CronExpr: "* * * * *", Prompt: " "}, "prompt is required"},
		{JobSpec{Name: "x", CronExpr: "* * * * *", Prompt: "x", Policy: policy(func(p *Policy) { p.Timeout = 0 })}, "timeout must be positive"},
		{JobSpec{Name: "x", CronExpr: "* * * * *", Prompt: "x", Policy: policy(func(p *Policy) { p.Overlap = "sometimes" })}, `overlap "sometimes"`},
	}
	for _, tt := range invalid {
		_, err := h.eng.CreateJob(ctx, tt.spec)
		if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CreateJob(%+v): err = %v, want invalid job containing %q", tt.spec, err, tt.want)
		}
	}
	if _, err := h.eng.CreateJob(ctx, JobSpec{Name: "report", CronExpr: "@daily", Prompt: "x"}); !errors.Is(err, store.ErrNameTaken) {
		t.Errorf("duplicate name: err = %v", err)
	}

	// A prompt change keeps the next tick; a schedule change moves it.
	prompt := "new {{.JobName}}"
	u, err := h.eng.UpdateJob(ctx, "report", JobUpdate{Prompt: &prompt})
	if err != nil || u.PromptTemplate != prompt || !u.NextRunAt.Equal(j.NextRunAt) {
		t.Errorf("UpdateJob prompt = %+v, %v", u, err)
	}
	expr := "@hourly"
	u, err = h.eng.UpdateJob(ctx, j.ID, JobUpdate{CronExpr: &expr, Policy: policy(func(p *Policy) { p.Retry.MaxAttempts = 3 })})
	if err != nil || u.NextRunAt.UTC().Format("15:04") != "11:00" || u.Policy.Retry.MaxAttempts != 3 {
		t.Errorf("UpdateJob schedule = %+v, %v", u, err)
	}
	bad := "nonsense"
	if _, err := h.eng.UpdateJob(ctx, j.ID, JobUpdate{CronExpr: &bad}); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("UpdateJob with a bad expression: err = %v", err)
	}

	// Paused ticks are not run; resuming starts from the next tick.
	p, err := h.eng.PauseJob(ctx, j.ID)
	if err != nil || p.Enabled {
		t.Fatalf("PauseJob = %+v, %v", p, err)
	}
	h.start()
	h.advanceTo(t0.Add(2*time.Hour + 10*time.Minute)) // 12:10:30, past 11:00 and 12:00
	if n := len(h.disp.starts()); n != 0 {
		t.Errorf("%d runs of a paused job", n)
	}
	r, err := h.eng.ResumeJob(ctx, j.ID)
	if err != nil || !r.Enabled || r.NextRunAt.UTC().Format("15:04") != "13:00" {
		t.Errorf("ResumeJob = %+v, %v", r, err)
	}
	if n := len(h.rec.of(EventJobUpdated)); n != 4 {
		t.Errorf("%d job.updated events, want 4", n)
	}

	jobs, err := h.eng.ListJobs(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].Policy.Retry.MaxAttempts != 3 || jobs[0].TargetSessionID != "sess-1" {
		t.Errorf("ListJobs = %+v, %v", jobs, err)
	}
	if runs, err := h.eng.JobRuns(ctx, "report", 10); err != nil || len(runs) != 0 {
		t.Errorf("JobRuns = %v, %v", runs, err)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	disp := newFakeDispatcher(realClock{})
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Dispatcher: disp}, "store is required"},
		{Config{Store: &store.DB{}}, "dispatcher is required"},
		{Config{Store: &store.DB{}, Dispatcher: disp, RecoveryPolicy: "never"}, `recovery policy "never"`},
		{Config{Store: &store.DB{}, Dispatcher: disp, PollInterval: -time.Second}, "poll interval"},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New: err = %v, want %q", err, tt.want)
		}
	}
	e, err := New(Config{Store: &store.DB{}, Dispatcher: disp})
	if err != nil || e.cfg.PollInterval != 5*time.Second || e.cfg.MaxConcurrentRuns != 2 || e.cfg.RecoveryPolicy != MissedSkip {
		t.Errorf("defaults: %+v, %v", e.cfg, err)
	}
}

// Stopping during a retry's backoff ends the tick with a cancelled
// attempt and a final job.failed, not a dangling will_retry.
func TestStopDuringBackoff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0)
	h.disp.startErr = errors.New("no such session")
	j := h.create(JobSpec{Name: "retry", CronExpr: "@every 1m", Policy: policy(func(p *Policy) { p.Retry.MaxAttempts = 3 })})
	h.start()
	h.advanceTo(t0.Add(30 * time.Second))
	f := h.rec.wait(t, EventJobFailed, 1)
	if !*f[0].WillRetry || f[0].Error != "dispatch: no such session" {
		t.Errorf("first failure %+v", f[0])
	}
	h.stop()
	f = h.rec.wait(t, EventJobFailed, 2)
	if *f[1].WillRetry || f[1].Attempt != 2 || f[1].Status != event.StatusCancelled || !strings.Contains(f[1].Error, "scheduler stopped") {
		t.Errorf("last event %+v, want attempt 2 cancelled", f[1])
	}
	h.waitStatuses(j.ID, "failed", "cancelled")
	if n := len(h.disp.starts()); n != 0 {
		t.Errorf("%d runs started", n)
	}
}

// A queue_one tick waiting for its turn is cancelled cleanly on Stop.
func TestStopWithPendingTick(t *testing.T) {
	t.Parallel()
	h := newHarness(t, t0)
	j := h.create(JobSpec{Name: "q", CronExpr: "@every 1m", Policy: policy(func(p *Policy) { p.Overlap = OverlapQueueOne })})
	h.start()
	h.advanceTo(t0.Add(90 * time.Second))
	h.waitStatuses(j.ID, "running", "queued")
	h.stop()
	h.waitStatuses(j.ID, "cancelled", "cancelled")
	if len(h.eng.jobs) != 0 || h.eng.slots.free != DefaultMaxConcurrentRuns {
		t.Errorf("after Stop: %d jobs tracked, %d slots free", len(h.eng.jobs), h.eng.slots.free)
	}
}

func TestLimiterFIFO(t *testing.T) {
	t.Parallel()
	l := newLimiter(1)
	a := l.enqueue()
	b, c, d := l.enqueue(), l.enqueue(), l.enqueue()
	isClosed := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if !isClosed(a) || isClosed(b) {
		t.Fatal("first caller should hold the slot, the second wait")
	}
	l.abandon(b) // gives up its place
	l.release()  // a done: c is next, not b
	if !isClosed(c) || isClosed(d) {
		t.Fatal("slot did not pass to the next waiter in order")
	}
	l.abandon(c) // abandoning a granted slot passes it on
	if !isClosed(d) {
		t.Fatal("abandoned slot was not passed on")
	}
	l.release()
	if l.free != 1 || len(l.waiters) != 0 {
		t.Errorf("free %d waiters %d, want 1 and 0", l.free, len(l.waiters))
	}
}

// reattachDispatcher hands back runs a previous engine started, as the
// gateway does for the runs it resumes after a crash.
type reattachDispatcher struct {
	*fakeDispatcher
	alive map[string]chan Result
}

func (d *reattachDispatcher) Reattach(runID string) (<-chan Result, bool) {
	ch, ok := d.alive[runID]
	return ch, ok
}

// A run the dead gateway left running and the new one resumed is watched
// as the same attempt: it keeps the job busy for the overlap policy, its
// timeout counts from when it started, and it is recorded when it ends.
func TestStartReattachesRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, t0)
	alive := make(chan Result, 1)
	disp := &reattachDispatcher{fakeDispatcher: h.disp, alive: map[string]chan Result{"old-run": alive}}
	h.cfg.Dispatcher = disp
	h.eng = h.newEngine()
	j := h.create(JobSpec{Name: "long", CronExpr: "0 * * * *", Policy: policy(func(p *Policy) { p.Timeout = 90 * time.Minute })})
	gone := h.create(JobSpec{Name: "gone", CronExpr: "0 11 * * *"})

	// What the dead engine left: 11:00 claimed and running, next_run_at 12:00.
	tick := time.Date(2026, 1, 3, 11, 0, 0, 0, time.UTC)
	var runs []store.JobRun
	for _, id := range []string{j.ID, gone.ID} {
		next := h.job(id).NextRunAt
		fs := []store.Firing{{JobID: id, From: tick, Next: next.Add(time.Hour), Run: &store.JobRun{ScheduledFor: tick, Attempt: 1, Status: event.StatusRunning}}}
		if id == gone.ID {
			fs[0].Next = next.Add(24 * time.Hour)
		}
		if _, err := h.db.FireTicks(ctx, fs); err != nil {
			t.Fatal(err)
		}
		r := *fs[0].Run
		r.RunID, r.StartedAt = "old-run", tick
		if id == gone.ID {
			r.RunID = "lost-run"
		}
		if err := h.db.UpdateJobRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	h.clock.Set(tick.Add(5 * time.Minute))
	h.start()
	h.waitStatuses(gone.ID, "failed")

	h.advanceTo(tick.Add(time.Hour)) // 12:00: the resumed run still holds the job
	h.waitStatuses(j.ID, "running", "skipped")
	h.advanceTo(tick.Add(90 * time.Minute)) // its timeout, from 11:00
	if got := h.disp.waitCancels(t, 1); got[0] != "old-run" {
		t.Errorf("cancelled %v, want old-run", got)
	}
	alive <- Result{Status: event.StatusCancelled}
	close(alive)
	f := h.rec.wait(t, EventJobFailed, 1)
	if f[0].RunID != "old-run" || f[0].Error != "timed out after 1h30m0s" || *f[0].WillRetry || f[0].Trigger != TriggerRecovery {
		t.Errorf("job.failed %+v", f[0])
	}
	h.waitStatuses(j.ID, "failed", "skipped")
	if got := h.runs(j.ID)[0]; got.ID != runs[0].ID || got.RunID != "old-run" || !got.StartedAt.Equal(tick) {
		t.Errorf("adopted run recorded as %+v", got)
	}
	if h.eng.slots.free != DefaultMaxConcurrentRuns {
		t.Errorf("%d slots free after the adopted run ended", h.eng.slots.free)
	}
}
