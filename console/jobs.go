package console

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"agent/event"
	"agent/scheduler"
)

// PrintJobs is the table of `agent jobs list`; with scheduling off no
// job has a next run.
func PrintJobs(w io.Writer, jobs []scheduler.Job, schedulingOff bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSCHEDULE\tSTATE\tNEXT RUN\tLAST RUN\tSESSION")
	for _, j := range jobs {
		state, next := "paused", "-"
		switch {
		case j.Enabled && schedulingOff:
			state, next = "enabled", "- (scheduling off)"
		case j.Enabled:
			state, next = "enabled", inZone(j.NextRunAt, j.Timezone)
		}
		last := "never"
		if !j.LastRunAt.IsZero() {
			last = age(j.LastRunAt) + " ago"
		}
		session := "new per run"
		if j.TargetSessionID != "" {
			session = ShortID(j.TargetSessionID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ShortID(j.ID), OneLine(j.Name, 30),
			schedule(j), state, next, last, session)
	}
	return tw.Flush()
}

// PrintJob shows one job, with its next run in its own zone. sandbox
// says how its runs' commands are confined.
func PrintJob(w io.Writer, j scheduler.Job, sandbox string) {
	fmt.Fprintf(w, "job       %s\n", j.ID)
	fmt.Fprintf(w, "name      %s\n", j.Name)
	fmt.Fprintf(w, "schedule  %s\n", schedule(j))
	if j.Enabled {
		fmt.Fprintf(w, "next run  %s (%s)\n", inZone(j.NextRunAt, j.Timezone), until(j.NextRunAt))
	} else {
		fmt.Fprintln(w, "next run  - (paused; 'agent jobs resume' restarts it)")
	}
	fmt.Fprintf(w, "session   %s\n", orDefault(j.TargetSessionID, "a new session per run"))
	fmt.Fprintf(w, "prompt    %s\n", OneLine(j.PromptTemplate, 100))
	p := j.Policy
	tools := "the default tools"
	if len(p.Tools) > 0 {
		tools = strings.Join(p.Tools, ", ")
	}
	retry := "no retry"
	if p.Retry.MaxAttempts > 1 {
		retry = fmt.Sprintf("%d attempts, backoff %s to %s", p.Retry.MaxAttempts, p.Retry.Base, p.Retry.Cap)
	}
	fmt.Fprintf(w, "policy    overlap %s; missed ticks: %s; timeout %s; %s\n", p.Overlap,
		orDefault(p.Missed, "the gateway's SchedulerRecoveryPolicy"), p.Timeout, retry)
	fmt.Fprintf(w, "tools     %s\n", tools)
	fmt.Fprintf(w, "sandbox   %s\n", sandbox)
}

// PrintJobRuns is the table of `agent jobs runs`: a job's attempts, their
// ticks in the job's zone.
func PrintJobRuns(w io.Writer, j scheduler.Job, runs []scheduler.JobRun) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULED\tATTEMPT\tSTATUS\tRUN\tTOOK\tERROR")
	for _, r := range runs {
		run, took := "-", "-"
		if r.RunID != "" {
			run = ShortID(r.RunID)
		}
		if !r.StartedAt.IsZero() && !r.CompletedAt.IsZero() {
			took = r.CompletedAt.Sub(r.StartedAt).Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\t%s\n", inZone(r.ScheduledFor, j.Timezone), r.Attempt,
			j.Policy.Retry.MaxAttempts, r.Status, run, took, OneLine(r.ErrorText, 80))
	}
	return tw.Flush()
}

// NoJobRuns says that job j has not run yet, and when it will.
func NoJobRuns(j scheduler.Job) string {
	return fmt.Sprintf("job %s has not run yet; next run %s", j.Name, inZone(j.NextRunAt, j.Timezone))
}

// PrintJobRun says what `agent jobs run-now` started, and how to follow it.
func PrintJobRun(w io.Writer, run scheduler.JobRun, job string) {
	switch {
	case run.Status == event.StatusSkipped:
		fmt.Fprintf(w, "job run %s %s\n", run.ID, run.ErrorText)
	case run.RunID == "":
		fmt.Fprintf(w, "job run %s %s; follow it with: agent jobs runs %s\n", run.ID, run.Status, job)
	default:
		fmt.Fprintf(w, "run %s started (job run %s); follow it with: agent runs events %s --follow\n", run.RunID, run.ID, ShortID(run.RunID))
	}
}

// schedule is a job's expression and zone.
func schedule(j scheduler.Job) string {
	return j.CronExpr + " (" + j.Timezone + ")"
}

// inZone formats t in the job's zone, as its schedule reads.
func inZone(t time.Time, zone string) string {
	if t.IsZero() {
		return "-"
	}
	if loc, err := scheduler.LoadZone(zone); err == nil {
		t = t.In(loc)
	}
	return t.Format("2006-01-02 15:04:05 MST")
}

// until says how far off t is.
func until(t time.Time) string {
	d := time.Until(t)
	switch {
	case d <= 0:
		return "due now"
	case d < time.Second:
		return "in under a second"
	}
	return "in " + d.Round(time.Second).String()
}
