package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/template"
	"time"

	"agent/store"
)

// Job is a scheduled job with its schedule and policy parsed. It marshals
// to the JSON that job.* methods and `agent jobs --json` show.
type Job struct {
	ID              string    `json:"id"`
	Name            string    `json:"name"`
	CronExpr        string    `json:"cron_expr"`
	Timezone        string    `json:"timezone"`
	Enabled         bool      `json:"enabled"`
	TargetSessionID string    `json:"target_session_id,omitempty"`
	PromptTemplate  string    `json:"prompt_template"`
	Policy          Policy    `json:"policy"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	LastRunAt       time.Time `json:"last_run_at,omitzero"`
	NextRunAt       time.Time `json:"next_run_at"`

	Schedule Schedule `json:"-"`
}

// JobRun is one attempt of one tick of a job (a job_runs row).
type JobRun struct {
	ID           string    `json:"id"`
	JobID        string    `json:"job_id"`
	RunID        string    `json:"run_id,omitempty"`
	ScheduledFor time.Time `json:"scheduled_for"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	CompletedAt  time.Time `json:"completed_at,omitzero"`
	Status       string    `json:"status"`
	Attempt      int       `json:"attempt"`
	ErrorText    string    `json:"error_text,omitempty"`
}

// JobSpec is what job.create asks for.
type JobSpec struct {
	Name      string  `json:"name"`
	CronExpr  string  `json:"cron_expr"`
	Timezone  string  `json:"timezone,omitempty"` // IANA zone; default UTC
	Prompt    string  `json:"prompt"`             // a text/template; see PromptData
	SessionID string  `json:"session_id,omitempty"`
	Policy    *Policy `json:"policy,omitempty"` // nil: DefaultPolicy()
	Paused    bool    `json:"paused,omitempty"` // create it disabled
}

// JobUpdate is what job.update changes; nil fields stay as they are.
// Policy replaces the whole policy: read the job, change it, send it back.
type JobUpdate struct {
	Name      *string `json:"name,omitempty"`
	CronExpr  *string `json:"cron_expr,omitempty"`
	Timezone  *string `json:"timezone,omitempty"`
	Prompt    *string `json:"prompt,omitempty"`
	SessionID *string `json:"session_id,omitempty"`
	Policy    *Policy `json:"policy,omitempty"`
}

// PromptData is what a prompt template sees, e.g.
// "Report for {{.ScheduledFor.Format \"2006-01-02\"}} ({{.JobName}})".
type PromptData struct {
	JobID        string
	JobName      string
	ScheduledFor time.Time // in the job's zone
	Attempt      int
}

// RenderPrompt renders a prompt template for one tick.
func RenderPrompt(text string, d PromptData) (string, error) {
	tmpl, err := parsePrompt(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, d); err != nil {
		return "", fmt.Errorf("render prompt: %w", err)
	}
	return b.String(), nil
}

// checkPrompt rejects a template that would fail at every tick.
func checkPrompt(text string) error {
	if strings.TrimSpace(text) == "" {
		return errors.New("prompt is required")
	}
	tmpl, err := parsePrompt(text)
	if err != nil {
		return err
	}
	sample := PromptData{JobID: "job", JobName: "job", ScheduledFor: parseReference, Attempt: 1}
	if err := tmpl.Execute(io.Discard, sample); err != nil {
		return fmt.Errorf("invalid prompt template: %w", err)
	}
	return nil
}

// prompts caches parsed templates: a burst of ticks would otherwise
// parse the same few templates thousands of times. Executing a parsed
// template concurrently is safe.
var prompts struct {
	sync.Mutex
	m map[string]*template.Template
}

func parsePrompt(text string) (*template.Template, error) {
	prompts.Lock()
	defer prompts.Unlock()
	if t, ok := prompts.m[text]; ok {
		return t, nil
	}
	t, err := template.New("prompt").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("invalid prompt template: %w", err)
	}
	if len(prompts.m) >= 4096 || prompts.m == nil {
		prompts.m = make(map[string]*template.Template) // bounded: start over
	}
	prompts.m[text] = t
	return t, nil
}

// jobFromRow parses a stored job.
func jobFromRow(r store.Job) (Job, error) {
	sched, err := Parse(r.CronExpr, r.Timezone)
	if err != nil {
		return Job{}, fmt.Errorf("job %s: %w", r.Name, err)
	}
	policy, err := ParsePolicy(r.PolicyJSON)
	if err != nil {
		return Job{}, fmt.Errorf("job %s: %w", r.Name, err)
	}
	return Job{
		ID: r.ID, Name: r.Name, CronExpr: r.CronExpr, Timezone: r.Timezone, Enabled: r.Enabled,
		TargetSessionID: r.TargetSessionID, PromptTemplate: r.PromptTemplate, Policy: policy,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, LastRunAt: r.LastRunAt, NextRunAt: r.NextRunAt,
		Schedule: sched,
	}, nil
}

// row returns the stored form of j.
func (j Job) row() (store.Job, error) {
	policy, err := json.Marshal(j.Policy)
	if err != nil {
		return store.Job{}, err
	}
	return store.Job{
		ID: j.ID, Name: j.Name, CronExpr: j.CronExpr, Timezone: j.Timezone, Enabled: j.Enabled,
		TargetSessionID: j.TargetSessionID, PromptTemplate: j.PromptTemplate, PolicyJSON: policy,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, LastRunAt: j.LastRunAt, NextRunAt: j.NextRunAt,
	}, nil
}

func jobRunFromRow(r store.JobRun) JobRun {
	return JobRun{
		ID: r.ID, JobID: r.JobID, RunID: r.RunID, ScheduledFor: r.ScheduledFor, StartedAt: r.StartedAt,
		CompletedAt: r.CompletedAt, Status: r.Status, Attempt: r.Attempt, ErrorText: r.ErrorText,
	}
}
