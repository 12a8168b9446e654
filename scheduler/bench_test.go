package scheduler

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"agent/event"
	"agent/store"
)

// noopDispatcher ends every run at once and records each tick it was
// asked to start, with how late Dispatcher.Start came after it.
type noopDispatcher struct {
	mu      sync.Mutex
	started []startedTick
	runs    map[string]time.Time // run id → the tick's scheduled time
}

// startedTick is one Dispatcher.Start.
type startedTick struct {
	jobID        string
	scheduledFor time.Time
	late         time.Duration
}

func (d *noopDispatcher) Start(ctx context.Context, job Job, tick Tick) (string, <-chan Result, error) {
	late := time.Since(tick.ScheduledFor)
	d.mu.Lock()
	d.started = append(d.started, startedTick{jobID: job.ID, scheduledFor: tick.ScheduledFor, late: late})
	runID := fmt.Sprintf("run-%d", len(d.started))
	if d.runs == nil {
		d.runs = make(map[string]time.Time)
	}
	d.runs[runID] = tick.ScheduledFor
	d.mu.Unlock()
	done := make(chan Result, 1)
	done <- Result{Status: event.StatusCompleted}
	close(done)
	return runID, done, nil
}

func (d *noopDispatcher) Cancel(string) {}

// scheduledFor returns the scheduled time of the tick a run was started for.
func (d *noopDispatcher) scheduledFor(runID string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runs[runID]
}

func (d *noopDispatcher) starts() []startedTick {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.started)
}

// benchSchedules are the jobs' schedules, round-robin. All fire on
// minute boundaries and half of them every minute, so every boundary is a
// burst of at least 5,000 ticks and the time between boundaries is idle.
var benchSchedules = []string{
	"@every 1m", "* * * * *", "0 * * * * *", "*/1 * * * *",
	"@every 2m", "*/5 * * * *", "@hourly", "0 9 * * *",
}

// cpuTime is the process's user+system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEngine10kJobs runs the engine on the real clock with 10,000
// enabled jobs and a no-op dispatcher. It reports the process CPU used
// while no tick is due (idle-cpu-%) and, for the burst at a minute
// boundary, how late Dispatcher.Start came after each tick (p50/p99/max).
// Every job's first tick is at or after that boundary, so nothing fires
// before it, and it checks that the engine started each tick due at the
// boundary exactly once. It takes up to a minute and a half: run it with
// -benchtime=1x.
func BenchmarkEngine10kJobs(b *testing.B) {
	const jobs = 10000
	ctx := context.Background()

	for b.Loop() {
		// A store of its own for each iteration: no tick an earlier
		// iteration claimed, or left due, can fire in this one.
		db, boundary, want := setUpBurst(b, jobs)
		disp := &noopDispatcher{}
		var completed atomic.Int64 // of the ticks due at the boundary
		eng, err := New(Config{
			Store: db, Dispatcher: disp, MaxConcurrentRuns: jobs,
			Events: func(ev event.Event) {
				if ev.Type == EventJobCompleted && disp.scheduledFor(ev.RunID).Equal(boundary) {
					completed.Add(1)
				}
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		// Idle: from after the first look at the store until shortly before
		// the boundary. No job is due before it.
		if err := eng.Start(ctx); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
		cpu0, wall0 := cpuTime(b), time.Now()
		time.Sleep(time.Until(boundary.Add(-time.Second)))
		idleCPU, idleWall := cpuTime(b)-cpu0, time.Since(wall0)
		if n := len(disp.starts()); n != 0 {
			b.Fatalf("dispatched %d ticks before the boundary at %s, want none", n, boundary.Format(time.TimeOnly))
		}

		// Burst: every job due at the boundary is dispatched and completes.
		cpu1 := cpuTime(b)
		deadline := time.Now().Add(2 * time.Minute)
		for completed.Load() < int64(want) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		burstWall := time.Since(boundary)
		burstCPU := cpuTime(b) - cpu1
		eng.Stop()
		db.Close()

		// Each tick (job, scheduled_for) runs at most once; the ticks due at
		// the boundary are the burst, later ones (a slow burst lets the
		// next minute begin) are not counted.
		var lat []time.Duration
		seen := make(map[startedTick]bool)
		later := 0
		for _, s := range disp.starts() {
			key := startedTick{jobID: s.jobID, scheduledFor: s.scheduledFor.UTC()}
			if seen[key] {
				b.Fatalf("tick %s of job %s dispatched twice", key.scheduledFor.Format(time.TimeOnly), key.jobID)
			}
			seen[key] = true
			if s.scheduledFor.Equal(boundary) {
				lat = append(lat, s.late)
			} else {
				later++
			}
		}
		b.Logf("dispatched %d ticks due at %s, want %d (%d completed); %d ticks of later minutes",
			len(lat), boundary.Format(time.TimeOnly), want, completed.Load(), later)
		if len(lat) != want || completed.Load() != int64(want) {
			b.Fatalf("dispatched %d and completed %d ticks due at the boundary, want %d", len(lat), completed.Load(), want)
		}
		slices.Sort(lat)
		pct := func(p float64) float64 {
			return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond)
		}
		b.ReportMetric(100*float64(idleCPU)/float64(idleWall), "idle-cpu-%")
		b.ReportMetric(float64(idleWall)/float64(time.Second), "idle-window-s")
		b.ReportMetric(float64(want), "burst-ticks")
		b.ReportMetric(float64(len(lat)), "dispatched-ticks")
		b.ReportMetric(pct(0.50), "dispatch-p50-ms")
		b.ReportMetric(pct(0.99), "dispatch-p99-ms")
		b.ReportMetric(pct(1), "dispatch-max-ms")
		b.ReportMetric(float64(burstWall)/float64(time.Second), "burst-done-s")
		b.ReportMetric(float64(burstCPU)/float64(time.Second), "burst-cpu-s")
		b.Logf("%d jobs: idle %.3f%% CPU over %s; burst of %d ticks: dispatch lateness p50 %.1fms p99 %.1fms max %.1fms; all recorded after %s using %s CPU",
			jobs, 100*float64(idleCPU)/float64(idleWall), idleWall.Round(time.Millisecond), len(lat),
			pct(0.5), pct(0.99), pct(1), burstWall.Round(time.Millisecond), burstCPU.Round(time.Millisecond))
	}
}

// setUpBurst opens a new store with n jobs whose first ticks are at or
// after the returned minute boundary, and returns how many are due at it.
// The boundary leaves room for the setup and an idle window before it;
// if the setup ran late (a loaded machine), it starts over for a later
// boundary rather than let ticks fall due during the idle window.
func setUpBurst(b *testing.B, n int) (*store.DB, time.Time, int) {
	b.Helper()
	const lead, minLead = 15 * time.Second, 5 * time.Second
	for range 3 {
		boundary := time.Now().Truncate(time.Minute).Add(time.Minute)
		if time.Until(boundary) < lead {
			boundary = boundary.Add(time.Minute)
		}
		path := filepath.Join(b.TempDir(), "agent.db")
		db, err := store.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		due := insertJobs(b, path, n, boundary)
		if rows, err := db.DueJobs(context.Background(), boundary); err != nil || len(rows) != due {
			b.Fatalf("%d jobs due at the boundary, want %d (err %v)", len(rows), due, err)
		}
		if time.Until(boundary) >= minLead {
			return db, boundary, due
		}
		db.Close()
	}
	b.Fatalf("setting up %d jobs takes longer than %s", n, lead-minLead)
	return nil, time.Time{}, 0
}

// insertJobs writes n jobs in one transaction, bypassing CreateJob's
// commit per job to keep the setup short. Each job's next_run_at is its
// first tick at or after boundary, as if it had been created just before
// it; insertJobs returns how many are due at boundary.
func insertJobs(b *testing.B, path string, n int, boundary time.Time) (due int) {
	b.Helper()
	raw, err := sql.Open("sqlite3", path+"?_busy_timeout=5000")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	tx, err := raw.Begin()
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	const layout = "2006-01-02T15:04:05.000000Z"
	ts := time.Now().UTC().Format(layout)
	for i := range n {
		expr := benchSchedules[i%len(benchSchedules)]
		first := mustParse(b, expr, "UTC").Next(boundary.Add(-time.Nanosecond))
		if first.Equal(boundary) {
			due++
		}
		next := first.UTC().Format(layout)
		if _, err := tx.Exec(`INSERT INTO scheduled_jobs (id, name, cron_expr, timezone, enabled,
			prompt_template, policy_json, created_at, updated_at, next_run_at)
			VALUES (?, ?, ?, 'UTC', 1, 'tick {{.JobName}}', '{}', ?, ?, ?)`,
			fmt.Sprintf("job-%05d", i), fmt.Sprintf("job %d", i), expr, ts, ts, next); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return due
}
