package gateway

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/llm/llmtest"
	"agent/scheduler"
	"agent/store"
	"agent/supervisor"
)

// TestJobRunWaits: a scheduled job (agent jobs create --ask) whose run
// waits for approval (README.md#scheduled-jobs). The job run says waiting, not failed, and
// is not retried; it still holds its job, so later ticks are skipped
// (skip_if_running), saying it waits, while its timeout stops: a tick
// past the timeout finds it waiting still. Once approved, the gateway
// continues the run, and the job run completes.
func TestJobRunWaits(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t, e2etest.BashTurn("touch deployed"), llmtest.Turn{Text: "deployed"})
	srv, db := e.JobsGateway(true)
	c := e2etest.GwDial(t, srv.Addr())
	ctx := context.Background()
	job := e2etest.JSONLines[scheduler.Job](t, e.MustJobs(srv.Addr(), "create", "--name", "deploy", "--cron", "@every 1s",
		"--prompt", "deploy", "--ask", "bash(touch *)", "--timeout", "2s", "--max-attempts", "3", "--json"))[0]
	if !slices.Equal(job.Policy.Ask, []string{"bash(touch *)"}) {
		t.Fatalf("job policy %+v, want its runs to ask before bash(touch *)", job.Policy)
	}

	var first store.JobRun // the tick whose run waits
	e2etest.WaitFor(t, "the job's run to wait", func() bool {
		runs := e2etest.JobRuns(t, db, job.ID)
		if len(runs) == 0 {
			return false
		}
		first = runs[len(runs)-1]
		return first.Status == event.StatusWaiting
	})
	if r, err := db.GetRun(ctx, first.RunID); err != nil || r.Status != event.StatusWaiting {
		t.Fatalf("the job's run = %+v, %v; want waiting", r, err)
	}
	// Ticks keep coming and are skipped, until one comes past the
	// timeout since the run started waiting.
	e2etest.WaitFor(t, "a tick skipped past the timeout", func() bool {
		for _, r := range e2etest.JobRuns(t, db, job.ID) {
			if r.Status == event.StatusSkipped && r.ScheduledFor.After(first.StartedAt.Add(3*time.Second)) {
				return true
			}
		}
		return false
	})
	e2etest.GwCall[scheduler.Job](t, c, api.MethodJobPause, api.JobParams{JobID: job.ID})
	runs := e2etest.JobRuns(t, db, job.ID)
	for _, r := range runs {
		switch {
		case r.ID == first.ID:
			if r.Status != event.StatusWaiting || r.Attempt != 1 {
				t.Errorf("the waiting tick's job run %+v, want attempt 1, waiting", r)
			}
		case r.Status != event.StatusSkipped || !strings.Contains(r.ErrorText, "waiting for a person"):
			t.Errorf("job run %+v while the first waits, want skipped saying why", r)
		}
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "deployed")); err == nil {
		t.Fatal("the bash call ran unapproved")
	}

	if _, err := supervisor.Answer(ctx, db, first.RunID, supervisor.Decision{Decide: supervisor.DecideAllow, Via: event.ViaCLI}); err != nil {
		t.Fatal(err)
	}
	e2etest.WaitFor(t, "the job run to complete", func() bool {
		return slices.ContainsFunc(e2etest.JobRuns(t, db, job.ID), func(r store.JobRun) bool {
			return r.ID == first.ID && r.Status == event.StatusCompleted
		})
	})
	if r, err := db.GetRun(ctx, first.RunID); err != nil || r.Status != event.StatusCompleted || r.Result != "deployed" {
		t.Errorf("the job's run = %+v, %v; want completed", r, err)
	}
	for _, r := range e2etest.JobRuns(t, db, job.ID) {
		if r.Attempt != 1 || r.Status == event.StatusFailed {
			t.Errorf("job run %+v: a run that waited is neither failed nor retried", r)
		}
	}
}
