package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"agent/event"
)

// createJob inserts an enabled job named name due at next.
func createJob(t *testing.T, db *DB, id, name string, next time.Time) *Job {
	t.Helper()
	j := &Job{
		ID: id, Name: name, CronExpr: "*/5 * * * *", Timezone: "Europe/Berlin", Enabled: true,
		PromptTemplate: "report {{.JobName}}", PolicyJSON: json.RawMessage(`{"overlap":"queue_one"}`),
		NextRunAt: next,
	}
	if err := db.CreateJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	return j
}

func TestCreateGetJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now
	next := clock.Now().Add(5 * time.Minute)

	j := createJob(t, db, "a1b2c3d4-job", "nightly", next)
	if !j.CreatedAt.Equal(clock.Now()) || !j.UpdatedAt.Equal(clock.Now()) {
		t.Errorf("CreateJob set times %v %v", j.CreatedAt, j.UpdatedAt)
	}
	for _, key := range []string{"a1b2c3d4-job", "nightly", "a1b2"} {
		got, err := db.GetJob(ctx, key)
		if err != nil {
			t.Fatalf("GetJob(%q): %v", key, err)
		}
		if got.ID != j.ID || got.Name != "nightly" || got.CronExpr != j.CronExpr || got.Timezone != j.Timezone ||
			!got.Enabled || got.TargetSessionID != "" || got.PromptTemplate != j.PromptTemplate ||
			string(got.PolicyJSON) != `{"overlap":"queue_one"}` || !got.NextRunAt.Equal(next) ||
			!got.LastRunAt.IsZero() || !got.CreatedAt.Equal(j.CreatedAt) {
			t.Errorf("GetJob(%q) = %+v\nwant %+v", key, got, j)
		}
	}

	createJob(t, db, "a1b2ffff-job", "hourly", next)
	if _, err := db.GetJob(ctx, "a1b2"); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("GetJob ambiguous prefix: err = %v, want ErrAmbiguous", err)
	}
	if _, err := db.GetJob(ctx, "a1b"); !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "2 jobs match (a1b2c3d4-job, a1b2ffff-job)") {
		t.Errorf("GetJob short ambiguous prefix: err = %v, want ErrAmbiguous naming both", err)
	}
	if got, err := db.GetJob(ctx, "a1b2f"); err != nil || got.Name != "hourly" {
		t.Errorf("GetJob(a1b2f) = %v, %v; want hourly", got, err)
	}
	for _, key := range []string{"zzzz", "z"} {
		if _, err := db.GetJob(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetJob(%q): err = %v, want ErrNotFound", key, err)
		}
	}

	err := db.CreateJob(ctx, &Job{ID: "other", Name: "nightly", NextRunAt: next})
	if !errors.Is(err, ErrNameTaken) {
		t.Errorf("CreateJob with a taken name: err = %v, want ErrNameTaken", err)
	}
	if err := db.CreateJob(ctx, &Job{ID: "x", Name: "x"}); err == nil {
		t.Error("CreateJob without next_run_at succeeded")
	}
	if err := db.CreateJob(ctx, &Job{Name: "x", NextRunAt: next}); err == nil {
		t.Error("CreateJob without an id succeeded")
	}
}

func TestUpdateListDeleteJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	clock := newClock()
	db.Now = clock.Now
	next := clock.Now().Add(time.Hour)
	a := createJob(t, db, "job-a", "b-second", next)
	createJob(t, db, "job-b", "a-first", next)

	clock.Advance(time.Minute)
	a.Name, a.CronExpr, a.Timezone = "c-third", "@hourly", "UTC"
	a.TargetSessionID, a.PromptTemplate, a.PolicyJSON = "sess-1", "new prompt", nil
	a.NextRunAt = next.Add(time.Hour)
	if err := db.UpdateJob(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := db.GetJob(ctx, "job-a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "c-third" || got.CronExpr != "@hourly" || got.Timezone != "UTC" || got.TargetSessionID != "sess-1" ||
		got.PromptTemplate != "new prompt" || string(got.PolicyJSON) != "{}" || !got.NextRunAt.Equal(a.NextRunAt) ||
		!got.UpdatedAt.Equal(clock.Now()) || !got.CreatedAt.Before(got.UpdatedAt) {
		t.Errorf("after UpdateJob: %+v", got)
	}
	a.Name = "a-first"
	if err := db.UpdateJob(ctx, a); !errors.Is(err, ErrNameTaken) {
		t.Errorf("UpdateJob to a taken name: err = %v, want ErrNameTaken", err)
	}
	if err := db.UpdateJob(ctx, &Job{ID: "missing", Name: "m", NextRunAt: next}); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateJob missing: err = %v, want ErrNotFound", err)
	}

	jobs, err := db.ListJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].Name != "a-first" || jobs[1].Name != "c-third" {
		t.Errorf("ListJobs = %+v, want a-first, c-third", jobs)
	}

	// Deleting a job deletes its history.
	if _, err := db.ClaimTick(ctx, "job-a", next, 1, event.StatusQueued); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteJob(ctx, "job-a"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteJob(ctx, "job-a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeleteJob: err = %v, want ErrNotFound", err)
	}
	if runs, err := db.JobRuns(ctx, "job-a", 0); err != nil || len(runs) != 0 {
		t.Errorf("runs of a deleted job = %v, %v; want none", runs, err)
	}
}

func TestDueJobsAndNextRunAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	now := newClock().Now()

	if next, err := db.NextRunAt(ctx); err != nil || !next.IsZero() {
		t.Errorf("NextRunAt with no jobs = %v, %v; want zero", next, err)
	}
	createJob(t, db, "late", "late", now.Add(-time.Minute))
	createJob(t, db, "now", "now", now)
	createJob(t, db, "later", "later", now.Add(time.Second))
	createJob(t, db, "paused", "paused", now.Add(-time.Hour))
	if err := db.SetJobEnabled(ctx, "paused", false, time.Time{}); err != nil {
		t.Fatal(err)
	}

	due, err := db.DueJobs(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 2 || due[0].ID != "late" || due[1].ID != "now" {
		t.Errorf("DueJobs = %+v, want late, now", due)
	}
	if next, err := db.NextRunAt(ctx); err != nil || !next.Equal(now.Add(-time.Minute)) {
		t.Errorf("NextRunAt = %v, %v; want %v", next, err, now.Add(-time.Minute))
	}

	// Resuming sets a new next_run_at, so the paused ticks are not due.
	if err := db.SetJobEnabled(ctx, "paused", true, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	j, err := db.GetJob(ctx, "paused")
	if err != nil || !j.Enabled || !j.NextRunAt.Equal(now.Add(time.Hour)) {
		t.Errorf("resumed job = %+v, %v", j, err)
	}
	if err := db.SetJobEnabled(ctx, "missing", false, time.Time{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetJobEnabled missing: err = %v, want ErrNotFound", err)
	}

	// The idle scheduler's two queries use the (enabled, next_run_at) index
	// (as SQLite's EXPLAIN says; PostgreSQL's planner picks by table size).
	for _, q := range []string{
		`SELECT MIN(next_run_at) FROM scheduled_jobs WHERE enabled = 1`,
		`SELECT id FROM scheduled_jobs WHERE enabled = 1 AND next_run_at <= '2026' ORDER BY next_run_at, id`,
	} {
		if db.pg {
			break
		}
		rows, err := db.ro.db.Query("EXPLAIN QUERY PLAN " + q)
		if err != nil {
			t.Fatal(err)
		}
		var plan strings.Builder
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(detail + "; ")
		}
		rows.Close()
		if !strings.Contains(plan.String(), "scheduled_jobs_due") || strings.Contains(plan.String(), "SCAN scheduled_jobs") {
			t.Errorf("plan of %s: %s; want a search of scheduled_jobs_due", q, plan.String())
		}
	}
}

func TestClaimTickOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	tick := newClock().Now()
	createJob(t, db, "job", "job", tick)

	r, err := db.ClaimTick(ctx, "job", tick, 1, event.StatusQueued)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == "" || r.JobID != "job" || !r.ScheduledFor.Equal(tick) || r.Attempt != 1 || r.Status != event.StatusQueued {
		t.Errorf("ClaimTick = %+v", r)
	}
	// A second process claiming the same tick learns it is taken.
	other, err := Open(db.path(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ClaimTick(ctx, "job", tick, 1, event.StatusQueued); !errors.Is(err, ErrTickTaken) {
		t.Errorf("second claim: err = %v, want ErrTickTaken", err)
	}
	// A retry is another attempt of the same tick; the next tick is free.
	if _, err := db.ClaimTick(ctx, "job", tick, 2, event.StatusQueued); err != nil {
		t.Errorf("attempt 2: %v", err)
	}
	if _, err := db.ClaimTick(ctx, "job", tick.Add(time.Minute), 1, event.StatusSkipped); err != nil {
		t.Errorf("next tick: %v", err)
	}
	if _, err := db.ClaimTick(ctx, "job", tick, 3, "bogus"); err == nil {
		t.Error("ClaimTick with an invalid status succeeded")
	}
	if _, err := db.ClaimTick(ctx, "nojob", tick, 1, event.StatusQueued); err == nil || errors.Is(err, ErrTickTaken) {
		t.Errorf("claim for a missing job: err = %v, want a foreign key error", err)
	}
}

// path returns where a test database is, to open it again.
func (db *DB) path(t *testing.T) string {
	t.Helper()
	return db.location
}

func TestSetNextRunAndFireTicks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	t0 := newClock().Now()
	for _, id := range []string{"a", "b", "c", "d"} {
		createJob(t, db, id, id, t0)
	}

	if ok, err := db.SetNextRun(ctx, "a", t0.Add(time.Second), t0.Add(time.Hour)); err != nil || ok {
		t.Errorf("SetNextRun from a stale time = %v, %v; want false", ok, err)
	}
	if ok, err := db.SetNextRun(ctx, "a", t0, t0.Add(time.Minute)); err != nil || !ok {
		t.Errorf("SetNextRun = %v, %v; want true", ok, err)
	}

	// c's tick was claimed before a crash; d was paused meanwhile.
	if _, err := db.ClaimTick(ctx, "c", t0, 1, event.StatusRunning); err != nil {
		t.Fatal(err)
	}
	if err := db.SetJobEnabled(ctx, "d", false, time.Time{}); err != nil {
		t.Fatal(err)
	}
	next := t0.Add(time.Minute)
	fs := []Firing{
		{JobID: "b", From: t0, Next: next, Run: &JobRun{ScheduledFor: t0, Attempt: 1, Status: event.StatusQueued}},
		{JobID: "c", From: t0, Next: next, Run: &JobRun{ScheduledFor: t0, Attempt: 1, Status: event.StatusQueued}},
		{JobID: "d", From: t0, Next: next, Run: &JobRun{ScheduledFor: t0, Attempt: 1, Status: event.StatusQueued}},
		{JobID: "a", From: t0.Add(time.Minute), Next: t0.Add(2 * time.Minute)}, // missed ticks skipped: no claim
	}
	got, err := db.FireTicks(ctx, fs)
	if err != nil {
		t.Fatal(err)
	}
	want := []Fired{{Advanced: true, Claimed: true}, {Advanced: true}, {}, {Advanced: true}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("firing %s: %+v, want %+v", fs[i].JobID, got[i], want[i])
		}
	}
	if fs[0].Run.ID == "" || fs[0].Run.JobID != "b" {
		t.Errorf("claimed run = %+v, want an id and job b", fs[0].Run)
	}
	for id, wantNext := range map[string]time.Time{"a": t0.Add(2 * time.Minute), "b": next, "c": next, "d": t0} {
		j, err := db.GetJob(ctx, id)
		if err != nil || !j.NextRunAt.Equal(wantNext) {
			t.Errorf("job %s next_run_at = %v, %v; want %v", id, j.NextRunAt, err, wantNext)
		}
	}
	if runs, _ := db.JobRuns(ctx, "d", 0); len(runs) != 0 {
		t.Errorf("paused job d got runs %+v", runs)
	}
}

func TestUpdateJobRunAndHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t)
	t0 := newClock().Now()
	createJob(t, db, "job", "job", t0)
	createJob(t, db, "other", "other", t0)

	r1, err := db.ClaimTick(ctx, "job", t0, 1, event.StatusQueued)
	if err != nil {
		t.Fatal(err)
	}
	r1.Status, r1.RunID, r1.StartedAt = event.StatusRunning, "run-1", t0.Add(time.Second)
	if err := db.UpdateJobRun(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if j, _ := db.GetJob(ctx, "job"); !j.LastRunAt.Equal(r1.StartedAt) {
		t.Errorf("last_run_at = %v, want %v", j.LastRunAt, r1.StartedAt)
	}
	r1.Status, r1.CompletedAt, r1.ErrorText = event.StatusFailed, t0.Add(time.Minute), "boom"
	if err := db.UpdateJobRun(ctx, r1); err != nil {
		t.Fatal(err)
	}
	r2, _ := db.ClaimTick(ctx, "job", t0, 2, event.StatusQueued)
	r3, _ := db.ClaimTick(ctx, "job", t0.Add(time.Hour), 1, event.StatusSkipped)
	o1, _ := db.ClaimTick(ctx, "other", t0, 1, event.StatusQueued)

	runs, err := db.JobRuns(ctx, "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || runs[0].ID != r3.ID || runs[1].ID != r2.ID || runs[2].ID != r1.ID {
		t.Fatalf("JobRuns = %+v, want r3, r2, r1", runs)
	}
	if got := runs[2]; got.RunID != "run-1" || got.Status != event.StatusFailed || got.ErrorText != "boom" ||
		!got.StartedAt.Equal(r1.StartedAt) || !got.CompletedAt.Equal(r1.CompletedAt) || !got.ScheduledFor.Equal(t0) {
		t.Errorf("updated run = %+v, want %+v", got, r1)
	}
	if runs, _ := db.JobRuns(ctx, "job", 1); len(runs) != 1 || runs[0].ID != r3.ID {
		t.Errorf("JobRuns limit 1 = %+v", runs)
	}

	active, err := db.RunningJobRuns(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != 2 || (active[0].ID != r2.ID && active[0].ID != o1.ID) {
		t.Errorf("RunningJobRuns(all) = %+v, want r2 and o1", active)
	}
	if active, _ := db.RunningJobRuns(ctx, "other"); len(active) != 1 || active[0].ID != o1.ID {
		t.Errorf("RunningJobRuns(other) = %+v, want o1", active)
	}

	// A parallel run that started earlier but reports later does not move
	// last_run_at back.
	o1.Status, o1.StartedAt = event.StatusRunning, t0.Add(time.Hour)
	o2, _ := db.ClaimTick(ctx, "other", t0.Add(time.Minute), 1, event.StatusQueued)
	o2.Status, o2.StartedAt = event.StatusRunning, t0.Add(time.Minute)
	for _, r := range []JobRun{o1, o2} {
		if err := db.UpdateJobRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if j, _ := db.GetJob(ctx, "other"); !j.LastRunAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("last_run_at = %v, want the latest start %v", j.LastRunAt, t0.Add(time.Hour))
	}

	if err := db.UpdateJobRun(ctx, JobRun{ID: "missing", Status: event.StatusFailed}); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateJobRun missing: err = %v, want ErrNotFound", err)
	}
	if err := db.UpdateJobRun(ctx, JobRun{ID: r2.ID, Status: "done"}); err == nil {
		t.Error("UpdateJobRun with an invalid status succeeded")
	}
}
