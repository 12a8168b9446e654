package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"agent/event"

	"github.com/google/uuid"
)

// ErrTickTaken is returned by ClaimTick when the (job, scheduled_for,
// attempt) row already exists: another claim, possibly by a process that
// has since died, took this tick.
var ErrTickTaken = errors.New("tick already taken")

// ErrNameTaken is returned when a job name is already used by another job.
var ErrNameTaken = errors.New("job name already taken")

// Job is one row of scheduled_jobs. The schedule and policy are opaque
// here; the scheduler parses them.
type Job struct {
	ID              string
	Name            string // unique
	CronExpr        string
	Timezone        string // IANA zone the cron expression is read in
	Enabled         bool
	TargetSessionID string // "" means a new session per run
	PromptTemplate  string
	PolicyJSON      json.RawMessage // the scheduler's policy; empty is stored as {}

	CreatedAt time.Time
	UpdatedAt time.Time
	LastRunAt time.Time // when a run of the job last started; zero if never
	NextRunAt time.Time // the tick the job waits for
}

// JobRun is one row of job_runs: one attempt of one tick of a job.
type JobRun struct {
	ID           string
	JobID        string
	RunID        string // "" until dispatched
	ScheduledFor time.Time
	StartedAt    time.Time
	CompletedAt  time.Time
	// Status is event.StatusQueued (claimed, waiting for a slot, a retry or
	// the run before it), StatusRunning (dispatched: RunID names the run),
	// StatusWaiting (the run waits for a person or a time, and holds no
	// process), StatusCompleted, StatusFailed (the run failed, timed out or was
	// interrupted), StatusCancelled (the run was cancelled, or the
	// scheduler stopped first) or StatusSkipped (the overlap policy
	// skipped the tick).
	Status    string
	Attempt   int
	ErrorText string
}

// Firing is what the scheduler decided for one due job: move next_run_at
// from From to Next and, if Run is not nil, claim that tick.
type Firing struct {
	JobID string
	From  time.Time // the next_run_at the decision was based on
	Next  time.Time
	Run   *JobRun // the claim; its ID is generated if empty
}

// Fired is the outcome of one Firing.
type Fired struct {
	// Advanced is false when the job was changed, paused or deleted since
	// it was read: nothing was written for it.
	Advanced bool
	// Claimed is true when Run was inserted, false when the tick was
	// already taken (or there was nothing to claim).
	Claimed bool
}

// CreateJob inserts j, whose ID the caller chooses, and sets its times
// (but not NextRunAt, which the caller computes from the schedule).
func (db *DB) CreateJob(ctx context.Context, j *Job) error {
	if j.ID == "" || j.Name == "" {
		return errors.New("create job: id and name are required")
	}
	if j.NextRunAt.IsZero() {
		return fmt.Errorf("create job %s: next run time is required", j.Name)
	}
	now := db.now()
	j.CreatedAt, j.UpdatedAt, j.LastRunAt = now, now, time.Time{}

	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create job %s: %w", j.Name, err)
	}
	defer tx.Rollback()
	if err := checkJobName(ctx, tx, j.Name, j.ID); err != nil {
		return fmt.Errorf("create job %s: %w", j.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO scheduled_jobs (
			id, name, cron_expr, timezone, enabled, target_session_id, prompt_template,
			policy_json, created_at, updated_at, last_run_at, next_run_at
		) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)`,
		j.ID, j.Name, j.CronExpr, j.Timezone, j.Enabled, nullString(j.TargetSessionID), j.PromptTemplate,
		policyText(j.PolicyJSON), formatTime(now), formatTime(now), formatTime(j.NextRunAt),
	); err != nil {
		return fmt.Errorf("create job %s: %w", j.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("create job %s: %w", j.Name, err)
	}
	return nil
}

// UpdateJob writes j's user-settable fields (name, schedule, enabled,
// session, prompt, policy) and next_run_at, and sets UpdatedAt.
func (db *DB) UpdateJob(ctx context.Context, j *Job) error {
	if j.Name == "" || j.NextRunAt.IsZero() {
		return fmt.Errorf("update job %s: name and next run time are required", j.ID)
	}
	now := db.now()
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	defer tx.Rollback()
	if err := checkJobName(ctx, tx, j.Name, j.ID); err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	res, err := tx.ExecContext(ctx, `
		UPDATE scheduled_jobs SET name = ?, cron_expr = ?, timezone = ?, enabled = ?,
			target_session_id = ?, prompt_template = ?, policy_json = ?, next_run_at = ?, updated_at = ?
		WHERE id = ?`,
		j.Name, j.CronExpr, j.Timezone, j.Enabled, nullString(j.TargetSessionID), j.PromptTemplate,
		policyText(j.PolicyJSON), formatTime(j.NextRunAt), formatTime(now), j.ID)
	if err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	if err := oneRow(res); err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("update job %s: %w", j.ID, err)
	}
	j.UpdatedAt = now
	return nil
}

// SetJobEnabled pauses or resumes a job. Resuming also sets next_run_at,
// so the ticks that passed while it was paused are not run.
func (db *DB) SetJobEnabled(ctx context.Context, id string, enabled bool, next time.Time) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("set job %s enabled: %w", id, err)
	}
	defer tx.Rollback()
	var res sql.Result
	if enabled {
		if next.IsZero() {
			return fmt.Errorf("set job %s enabled: next run time is required", id)
		}
		res, err = tx.ExecContext(ctx,
			`UPDATE scheduled_jobs SET enabled = 1, next_run_at = ?, updated_at = ? WHERE id = ?`,
			formatTime(next), formatTime(db.now()), id)
	} else {
		res, err = tx.ExecContext(ctx,
			`UPDATE scheduled_jobs SET enabled = 0, updated_at = ? WHERE id = ?`, formatTime(db.now()), id)
	}
	if err != nil {
		return fmt.Errorf("set job %s enabled: %w", id, err)
	}
	if err := oneRow(res); err != nil {
		return fmt.Errorf("set job %s enabled: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("set job %s enabled: %w", id, err)
	}
	return nil
}

// GetJob returns the job with this id or name, or the one job whose id
// starts with it, like GetRun.
func (db *DB) GetJob(ctx context.Context, idOrName string) (*Job, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", idOrName, err)
	}
	defer tx.Rollback()
	j, err := getJob(ctx, tx, idOrName)
	if err != nil {
		return nil, err
	}
	return j, tx.Commit()
}

// ListJobs returns every job, by name.
func (db *DB) ListJobs(ctx context.Context) ([]Job, error) {
	return db.queryJobs(ctx, "list jobs", `SELECT `+jobColumns+` FROM scheduled_jobs ORDER BY name`)
}

// DueJobs returns the enabled jobs whose next_run_at is at or before now,
// earliest first. It reads the (enabled, next_run_at) index only as far as
// now.
func (db *DB) DueJobs(ctx context.Context, now time.Time) ([]Job, error) {
	return db.queryJobs(ctx, "due jobs", `SELECT `+jobColumns+` FROM scheduled_jobs
		WHERE enabled = 1 AND next_run_at <= ? ORDER BY next_run_at, id`, formatTime(now))
}

// NextRunAt returns the earliest next_run_at of the enabled jobs, or the
// zero time if there are none: the scheduler sleeps until then.
func (db *DB) NextRunAt(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := db.ro.QueryRowContext(ctx,
		`SELECT MIN(next_run_at) FROM scheduled_jobs WHERE enabled = 1`).Scan(timeValue{&t})
	if err != nil {
		return time.Time{}, fmt.Errorf("next run time: %w", err)
	}
	return t, nil
}

// DeleteJob deletes a job and its run history.
func (db *DB) DeleteJob(ctx context.Context, id string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM scheduled_jobs WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	if err := oneRow(res); err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	return nil
}

// SetNextRun moves an enabled job's next_run_at from from to next. It
// returns false, changing nothing, if the job is no longer enabled at
// from: someone paused, updated or deleted it meanwhile.
func (db *DB) SetNextRun(ctx context.Context, id string, from, next time.Time) (bool, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("set next run of job %s: %w", id, err)
	}
	defer tx.Rollback()
	ok, err := advanceJob(ctx, txExec{tx, advanceJobSQL}, id, from, next)
	if err != nil {
		return false, fmt.Errorf("set next run of job %s: %w", id, err)
	}
	return ok, tx.Commit()
}

// ClaimTick inserts the job_runs row for this attempt of the tick
// (jobID, scheduledFor) with the given status, or returns ErrTickTaken if
// it exists: the caller must then not run it.
func (db *DB) ClaimTick(ctx context.Context, jobID string, scheduledFor time.Time, attempt int, status string) (JobRun, error) {
	r := JobRun{JobID: jobID, ScheduledFor: scheduledFor, Attempt: attempt, Status: status}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return JobRun{}, fmt.Errorf("claim tick %s of job %s: %w", formatTime(scheduledFor), jobID, err)
	}
	defer tx.Rollback()
	claimed, err := claimTick(ctx, txExec{tx, claimTickSQL}, &r)
	if err != nil {
		return JobRun{}, fmt.Errorf("claim tick %s of job %s: %w", formatTime(scheduledFor), jobID, err)
	}
	if !claimed {
		return JobRun{}, fmt.Errorf("claim tick %s attempt %d of job %s: %w", formatTime(scheduledFor), attempt, jobID, ErrTickTaken)
	}
	if err := tx.Commit(); err != nil {
		return JobRun{}, fmt.Errorf("claim tick %s of job %s: %w", formatTime(scheduledFor), jobID, err)
	}
	return r, nil
}

// FireTicks applies the scheduler's decisions for a batch of due jobs in
// one transaction: one commit for many ticks keeps dispatch prompt when
// many jobs share a minute. A firing whose job changed meanwhile is left
// out (Advanced false), so a paused job never gets a new claim.
func (db *DB) FireTicks(ctx context.Context, fs []Firing) ([]Fired, error) {
	out := make([]Fired, len(fs))
	if len(fs) == 0 {
		return out, nil
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("fire ticks: %w", err)
	}
	defer tx.Rollback()
	advance, err := tx.PrepareContext(ctx, advanceJobSQL)
	if err != nil {
		return nil, fmt.Errorf("fire ticks: %w", err)
	}
	defer advance.Close()
	insert, err := tx.PrepareContext(ctx, claimTickSQL)
	if err != nil {
		return nil, fmt.Errorf("fire ticks: %w", err)
	}
	defer insert.Close()
	for i, f := range fs {
		ok, err := advanceJob(ctx, advance, f.JobID, f.From, f.Next)
		if err != nil {
			return nil, fmt.Errorf("fire ticks: job %s: %w", f.JobID, err)
		}
		out[i].Advanced = ok
		if !ok || f.Run == nil {
			continue
		}
		f.Run.JobID = f.JobID
		claimed, err := claimTick(ctx, insert, f.Run)
		if err != nil {
			return nil, fmt.Errorf("fire ticks: job %s: %w", f.JobID, err)
		}
		out[i].Claimed = claimed
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("fire ticks: %w", err)
	}
	return out, nil
}

// UpdateJobRun writes r's run id, status, times and error. A run that
// starts also moves its job's last_run_at forward.
func (db *DB) UpdateJobRun(ctx context.Context, r JobRun) error {
	if !validJobRunStatus(r.Status) {
		return fmt.Errorf("update job run %s: invalid status %q", r.ID, r.Status)
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("update job run %s: %w", r.ID, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `
		UPDATE job_runs SET run_id = ?, status = ?, started_at = ?, completed_at = ?, error_text = ?
		WHERE id = ?`,
		r.RunID, r.Status, nullTime(r.StartedAt), nullTime(r.CompletedAt), nullString(r.ErrorText), r.ID)
	if err != nil {
		return fmt.Errorf("update job run %s: %w", r.ID, err)
	}
	if err := oneRow(res); err != nil {
		return fmt.Errorf("update job run %s: %w", r.ID, err)
	}
	if r.Status == event.StatusRunning && !r.StartedAt.IsZero() {
		// MAX: parallel runs may report their starts out of order.
		if _, err := tx.ExecContext(ctx,
			`UPDATE scheduled_jobs SET last_run_at = `+tx.greatest(`COALESCE(last_run_at, '')`, `?`)+` WHERE id = ?`,
			formatTime(r.StartedAt), r.JobID); err != nil {
			return fmt.Errorf("update job run %s: %w", r.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("update job run %s: %w", r.ID, err)
	}
	return nil
}

// JobRuns returns up to limit runs of a job, newest tick first and, within
// a tick, the latest attempt first; limit <= 0 means all.
func (db *DB) JobRuns(ctx context.Context, jobID string, limit int) ([]JobRun, error) {
	if limit <= 0 {
		limit = noLimit
	}
	return db.queryJobRuns(ctx, "runs of job "+jobID, `SELECT `+jobRunColumns+` FROM job_runs
		WHERE job_id = ? ORDER BY scheduled_for DESC, attempt DESC LIMIT ?`, jobID, limit)
}

// RunningJobRuns returns the queued, running and waiting job runs of a
// job, or of all jobs when jobID is "", oldest tick first.
func (db *DB) RunningJobRuns(ctx context.Context, jobID string) ([]JobRun, error) {
	return db.queryJobRuns(ctx, "running job runs", `SELECT `+jobRunColumns+` FROM job_runs
		WHERE status IN ('queued', 'running', 'waiting') AND (? = '' OR job_id = ?)
		ORDER BY scheduled_for, attempt`, jobID, jobID)
}

func validJobRunStatus(s string) bool {
	switch s {
	case event.StatusQueued, event.StatusRunning, event.StatusCompleted, event.StatusFailed, event.StatusCancelled, event.StatusSkipped,
		event.StatusWaiting:
		return true
	}
	return false
}

func policyText(p json.RawMessage) string {
	if len(p) == 0 {
		return "{}"
	}
	return string(p)
}

// checkJobName fails with ErrNameTaken if another job has this name.
func checkJobName(ctx context.Context, tx *txn, name, id string) error {
	var other string
	err := tx.QueryRowContext(ctx, `SELECT id FROM scheduled_jobs WHERE name = ? AND id != ?`, name, id).Scan(&other)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%q is used by job %s: %w", name, other, ErrNameTaken)
}

// execer is a *txn or a statement prepared on one.
type execer interface {
	ExecContext(ctx context.Context, args ...any) (sql.Result, error)
}

// txExec runs query on tx as an execer.
type txExec struct {
	tx    *txn
	query string
}

func (t txExec) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, t.query, args...)
}

const advanceJobSQL = `
	UPDATE scheduled_jobs SET next_run_at = ?
	WHERE id = ? AND enabled = 1 AND next_run_at = ?`

func advanceJob(ctx context.Context, stmt execer, id string, from, next time.Time) (bool, error) {
	res, err := stmt.ExecContext(ctx, formatTime(next), id, formatTime(from))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// claimTick inserts r unless its (job, scheduled_for, attempt) exists, and
// reports whether it did. It fills in r.ID if empty.
const claimTickSQL = `
	INSERT INTO job_runs (id, job_id, run_id, scheduled_for, started_at, completed_at, status, attempt, error_text)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (job_id, scheduled_for, attempt) DO NOTHING`

func claimTick(ctx context.Context, stmt execer, r *JobRun) (bool, error) {
	if !validJobRunStatus(r.Status) {
		return false, fmt.Errorf("invalid job run status %q", r.Status)
	}
	if r.Attempt < 1 {
		return false, fmt.Errorf("invalid attempt %d", r.Attempt)
	}
	if r.ID == "" {
		r.ID = uuid.NewString()
	}
	r.ScheduledFor = r.ScheduledFor.UTC().Truncate(time.Microsecond)
	res, err := stmt.ExecContext(ctx,
		r.ID, r.JobID, r.RunID, formatTime(r.ScheduledFor), nullTime(r.StartedAt), nullTime(r.CompletedAt),
		r.Status, r.Attempt, nullString(r.ErrorText))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

const jobColumns = `
	id, name, cron_expr, timezone, enabled, COALESCE(target_session_id, ''), prompt_template,
	policy_json, created_at, updated_at, last_run_at, next_run_at`

func scanJob(row scanner) (*Job, error) {
	var j Job
	var policy string
	err := row.Scan(&j.ID, &j.Name, &j.CronExpr, &j.Timezone, &j.Enabled, &j.TargetSessionID, &j.PromptTemplate,
		&policy, timeValue{&j.CreatedAt}, timeValue{&j.UpdatedAt}, timeValue{&j.LastRunAt}, timeValue{&j.NextRunAt})
	if err != nil {
		return nil, err
	}
	j.PolicyJSON = json.RawMessage(policy)
	return &j, nil
}

const jobRunColumns = `
	id, job_id, run_id, scheduled_for, started_at, completed_at, status, attempt, COALESCE(error_text, '')`

func scanJobRun(row scanner) (JobRun, error) {
	var r JobRun
	err := row.Scan(&r.ID, &r.JobID, &r.RunID, timeValue{&r.ScheduledFor}, timeValue{&r.StartedAt},
		timeValue{&r.CompletedAt}, &r.Status, &r.Attempt, &r.ErrorText)
	return r, err
}

// getJob resolves idOrName as an id, then a name, then an id prefix.
func getJob(ctx context.Context, tx *txn, idOrName string) (*Job, error) {
	for _, where := range []string{`id = ?`, `name = ?`} {
		j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM scheduled_jobs WHERE `+where, idOrName))
		if err == nil {
			return j, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("get job %s: %w", idOrName, err)
		}
	}
	full, err := prefixMatch(ctx, tx, "job", "scheduled_jobs", idOrName)
	if err != nil {
		return nil, err
	}
	j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM scheduled_jobs WHERE id = ?`, full))
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", idOrName, err)
	}
	return j, nil
}

func (db *DB) queryJobs(ctx context.Context, what, query string, args ...any) ([]Job, error) {
	return readAll(ctx, db, what, func(r scanner) (Job, error) {
		j, err := scanJob(r)
		if err != nil {
			return Job{}, err
		}
		return *j, nil
	}, query, args...)
}

func (db *DB) queryJobRuns(ctx context.Context, what, query string, args ...any) ([]JobRun, error) {
	return readAll(ctx, db, what, scanJobRun, query, args...)
}
