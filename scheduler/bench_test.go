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

// noopDispatcher ends every run at once and records how late each
// Dispatcher.Start came after its tick.
type noopDispatcher struct {
	mu       sync.Mutex
	lateness []time.Duration
}

func (d *noopDispatcher) Start(ctx context.Context, job Job, tick Tick) (string, <-chan Result, error) {
	late := time.Since(tick.ScheduledFor)
	d.mu.Lock()
	d.lateness = append(d.lateness, late)
	n := len(d.lateness)
	d.mu.Unlock()
	done := make(chan Result, 1)
	done <- Result{Status: ResultCompleted}
	close(done)
	return fmt.Sprintf("run-%d", n), done, nil
}

func (d *noopDispatcher) Cancel(string) {}

func (d *noopDispatcher) samples() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.lateness)
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
// while no tick is due (idle-cpu-%) and, for the burst at the next minute
// boundary, how late Dispatcher.Start came after each tick (p50/p99/max).
// It takes up to a minute and a half: run it with -benchtime=1x.
func BenchmarkEngine10kJobs(b *testing.B) {
	const jobs = 10000
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "agent.db")
	db, err := store.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	insertJobs(b, path, jobs, time.Now())

	for b.Loop() {
		disp := &noopDispatcher{}
		var completed atomic.Int64
		eng, err := New(Config{
			Store: db, Dispatcher: disp, MaxConcurrentRuns: jobs,
			Events: func(ev event.Event) {
				if ev.Type == EventJobCompleted {
					completed.Add(1)
				}
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		// Idle: from after the first look at the store until shortly before
		// the next minute boundary.
		boundary := time.Now().Truncate(time.Minute).Add(time.Minute)
		if time.Until(boundary) < 8*time.Second {
			boundary = boundary.Add(time.Minute)
		}
		burst, err := db.DueJobs(ctx, boundary)
		if err != nil {
			b.Fatal(err)
		}
		if err := eng.Start(ctx); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
		cpu0, wall0 := cpuTime(b), time.Now()
		time.Sleep(time.Until(boundary.Add(-time.Second)))
		idleCPU, idleWall := cpuTime(b)-cpu0, time.Since(wall0)

		// Burst: every job due at the boundary is dispatched and completes.
		cpu1 := cpuTime(b)
		deadline := time.Now().Add(2 * time.Minute)
		for completed.Load() < int64(len(burst)) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		burstWall := time.Since(boundary)
		burstCPU := cpuTime(b) - cpu1
		eng.Stop()

		lat := disp.samples()
		if len(lat) != len(burst) {
			b.Fatalf("dispatched %d ticks at the boundary, want %d", len(lat), len(burst))
		}
		slices.Sort(lat)
		pct := func(p float64) float64 {
			return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond)
		}
		b.ReportMetric(100*float64(idleCPU)/float64(idleWall), "idle-cpu-%")
		b.ReportMetric(float64(idleWall)/float64(time.Second), "idle-window-s")
		b.ReportMetric(float64(len(burst)), "burst-ticks")
		b.ReportMetric(pct(0.50), "dispatch-p50-ms")
		b.ReportMetric(pct(0.99), "dispatch-p99-ms")
		b.ReportMetric(pct(1), "dispatch-max-ms")
		b.ReportMetric(float64(burstWall)/float64(time.Second), "burst-done-s")
		b.ReportMetric(float64(burstCPU)/float64(time.Second), "burst-cpu-s")
		b.Logf("%d jobs: idle %.3f%% CPU over %s; burst of %d ticks: dispatch lateness p50 %.1fms p99 %.1fms max %.1fms; all recorded after %s using %s CPU",
			jobs, 100*float64(idleCPU)/float64(idleWall), idleWall.Round(time.Millisecond), len(burst),
			pct(0.5), pct(0.99), pct(1), burstWall.Round(time.Millisecond), burstCPU.Round(time.Millisecond))
	}
}

// insertJobs writes n jobs in one transaction, bypassing CreateJob's
// commit per job to keep the setup short.
func insertJobs(b *testing.B, path string, n int, now time.Time) {
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
	ts := now.UTC().Format(layout)
	for i := range n {
		expr := benchSchedules[i%len(benchSchedules)]
		next := mustParse(b, expr, "UTC").Next(now).UTC().Format(layout)
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
}
