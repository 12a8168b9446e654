package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"agent/store"
)

// ErrInvalidJob matches every error that rejects a job's fields (name,
// schedule, zone, prompt, policy); the gateway answers it with
// invalid_job. The error's text names the problem.
var ErrInvalidJob = errors.New("invalid job")

type invalidJobError struct{ err error }

func (e invalidJobError) Error() string   { return e.err.Error() }
func (e invalidJobError) Unwrap() []error { return []error{e.err, ErrInvalidJob} }

// CreateJob validates spec and saves it as a new job, due at its first
// tick after now.
func (e *Engine) CreateJob(ctx context.Context, spec JobSpec) (Job, error) {
	policy := DefaultPolicy()
	if spec.Policy != nil {
		policy = *spec.Policy
	}
	j := Job{
		ID: uuid.NewString(), Name: spec.Name, CronExpr: spec.CronExpr, Timezone: spec.Timezone,
		Enabled: !spec.Paused, TargetSessionID: spec.SessionID, PromptTemplate: spec.Prompt, Policy: policy,
	}
	if err := e.check(&j); err != nil {
		return Job{}, err
	}
	j.NextRunAt = j.Schedule.Next(e.clock.Now())
	row, err := j.row()
	if err != nil {
		return Job{}, fmt.Errorf("create job %s: %w", j.Name, err)
	}
	if err := e.store.CreateJob(ctx, &row); err != nil {
		return Job{}, err
	}
	j.CreatedAt, j.UpdatedAt = row.CreatedAt, row.UpdatedAt
	e.publish(e.newEvent(EventJobCreated, j, "", 0))
	e.nudge()
	return j, nil
}

// UpdateJob changes the fields u sets. A new schedule or zone takes
// effect from now: next_run_at becomes its first tick after now.
func (e *Engine) UpdateJob(ctx context.Context, id string, u JobUpdate) (Job, error) {
	row, err := e.store.GetJob(ctx, id)
	if err != nil {
		return Job{}, err
	}
	j := jobView(*row)
	reschedule := false
	if u.Name != nil {
		j.Name = *u.Name
	}
	if u.CronExpr != nil && *u.CronExpr != j.CronExpr {
		j.CronExpr, reschedule = *u.CronExpr, true
	}
	if u.Timezone != nil && *u.Timezone != j.Timezone {
		j.Timezone, reschedule = *u.Timezone, true
	}
	if u.Prompt != nil {
		j.PromptTemplate = *u.Prompt
	}
	if u.SessionID != nil {
		j.TargetSessionID = *u.SessionID
	}
	if u.Policy != nil {
		j.Policy = *u.Policy
	}
	if err := e.check(&j); err != nil {
		return Job{}, err
	}
	if reschedule {
		j.NextRunAt = j.Schedule.Next(e.clock.Now())
	}
	upd, err := j.row()
	if err != nil {
		return Job{}, fmt.Errorf("update job %s: %w", j.Name, err)
	}
	if err := e.store.UpdateJob(ctx, &upd); err != nil {
		return Job{}, err
	}
	j.UpdatedAt = upd.UpdatedAt
	e.publish(e.newEvent(EventJobUpdated, j, "", 0))
	e.nudge()
	return j, nil
}

// PauseJob stops a job's ticks; a run in flight goes on.
func (e *Engine) PauseJob(ctx context.Context, id string) (Job, error) {
	return e.setEnabled(ctx, id, false)
}

// ResumeJob restarts a paused job from its first tick after now: the
// ticks that passed while it was paused are not run.
func (e *Engine) ResumeJob(ctx context.Context, id string) (Job, error) {
	return e.setEnabled(ctx, id, true)
}

func (e *Engine) setEnabled(ctx context.Context, id string, enabled bool) (Job, error) {
	row, err := e.store.GetJob(ctx, id)
	if err != nil {
		return Job{}, err
	}
	j := jobView(*row)
	if enabled {
		if err := e.check(&j); err != nil {
			return Job{}, err
		}
		j.NextRunAt = j.Schedule.Next(e.clock.Now())
	}
	if err := e.store.SetJobEnabled(ctx, j.ID, enabled, j.NextRunAt); err != nil {
		return Job{}, err
	}
	if row, err = e.store.GetJob(ctx, j.ID); err != nil {
		return Job{}, err
	}
	j = jobView(*row)
	e.publish(e.newEvent(EventJobUpdated, j, "", 0))
	e.nudge()
	return j, nil
}

// DeleteJob deletes a job and its history, cancelling its runs in flight.
func (e *Engine) DeleteJob(ctx context.Context, id string) error {
	row, err := e.store.GetJob(ctx, id)
	if err != nil {
		return err
	}
	if err := e.store.DeleteJob(ctx, row.ID); err != nil {
		return err
	}
	e.mu.Lock()
	if js := e.jobs[row.ID]; js != nil {
		for t := range js.ticks {
			t.cancel(errDeleted)
		}
	}
	e.mu.Unlock()
	return nil
}

// GetJob returns a job by id, name or unique id prefix.
func (e *Engine) GetJob(ctx context.Context, id string) (Job, error) {
	row, err := e.store.GetJob(ctx, id)
	if err != nil {
		return Job{}, err
	}
	return jobView(*row), nil
}

// ListJobs returns every job, by name.
func (e *Engine) ListJobs(ctx context.Context) ([]Job, error) {
	rows, err := e.store.ListJobs(ctx)
	if err != nil {
		return nil, err
	}
	jobs := make([]Job, len(rows))
	for i, r := range rows {
		jobs[i] = jobView(r)
	}
	return jobs, nil
}

// JobRuns returns a job's runs, newest tick first; limit <= 0 means all.
func (e *Engine) JobRuns(ctx context.Context, id string, limit int) ([]JobRun, error) {
	row, err := e.store.GetJob(ctx, id)
	if err != nil {
		return nil, err
	}
	rows, err := e.store.JobRuns(ctx, row.ID, limit)
	if err != nil {
		return nil, err
	}
	runs := make([]JobRun, len(rows))
	for i, r := range rows {
		runs[i] = jobRunFromRow(r)
	}
	return runs, nil
}

// check normalises and validates j's user-set fields and parses its
// schedule.
func (e *Engine) check(j *Job) error {
	j.Name = strings.TrimSpace(j.Name)
	j.CronExpr = strings.TrimSpace(j.CronExpr)
	if j.Timezone == "" {
		j.Timezone = "UTC"
	}
	invalid := func(err error) error { return invalidJobError{err} }
	switch {
	case j.Name == "":
		return invalid(errors.New("job name is required"))
	case strings.ContainsAny(j.Name, "\r\n\t"):
		return invalid(fmt.Errorf("job name %q: must be one line", j.Name))
	}
	sched, err := Parse(j.CronExpr, j.Timezone)
	if err != nil {
		return invalid(err)
	}
	j.Schedule = sched
	if err := checkPrompt(j.PromptTemplate); err != nil {
		return invalid(err)
	}
	if err := j.Policy.Validate(); err != nil {
		return invalid(err)
	}
	if e.cfg.CheckTools != nil && len(j.Policy.Tools) > 0 {
		if err := e.cfg.CheckTools(j.Policy.Tools); err != nil {
			return invalid(fmt.Errorf("invalid policy: tools: %w", err))
		}
	}
	return nil
}

// jobView converts a stored job for display, even one that no longer
// parses: its Schedule is then the zero Schedule.
func jobView(r store.Job) Job {
	if j, err := jobFromRow(r); err == nil {
		return j
	}
	policy := DefaultPolicy()
	_ = json.Unmarshal(r.PolicyJSON, &policy) // shown as far as it decodes
	sched, _ := Parse(r.CronExpr, r.Timezone)
	return Job{
		ID: r.ID, Name: r.Name, CronExpr: r.CronExpr, Timezone: r.Timezone, Enabled: r.Enabled,
		TargetSessionID: r.TargetSessionID, PromptTemplate: r.PromptTemplate, Policy: policy,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, LastRunAt: r.LastRunAt, NextRunAt: r.NextRunAt,
		Schedule: sched,
	}
}
