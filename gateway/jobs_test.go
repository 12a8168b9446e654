package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"agent/event"
	"agent/gateway"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/scheduler"
	"agent/store"
)

// jobsOff is a gateway with a scheduler that fires nothing.
func jobsOff(c *gateway.Config) { c.Scheduler = &gateway.SchedulerConfig{} }

// jobsOn is a gateway that fires jobs.
func jobsOn(c *gateway.Config) {
	c.Scheduler = &gateway.SchedulerConfig{Enabled: true, PollInterval: 100 * time.Millisecond}
}

// jobErr makes a request that must fail, and returns the error.
func jobErr(t *testing.T, c *gatewaytest.Client, method string, params any) *api.Error {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(15 * time.Second)
	defer cancel()
	err := c.Call(ctx, method, params, nil)
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: %v, want a protocol error", method, err)
	}
	return e
}

// waitJobEvent waits for a job event of type typ that match accepts.
func waitJobEvent(t *testing.T, c *gatewaytest.Client, typ string, match func(scheduler.TickData) bool) api.EventFrame {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(20 * time.Second)
	defer cancel()
	var found api.EventFrame
	evs, err := c.WaitEvent(ctx, func(ev api.EventFrame) bool {
		var d scheduler.TickData
		if ev.Event != typ || json.Unmarshal(ev.Data, &d) != nil || !match(d) {
			return false
		}
		found = ev
		return true
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; got %s", typ, err, types(evs))
	}
	return found
}

func tickData(t *testing.T, ev api.EventFrame) scheduler.TickData {
	t.Helper()
	var d scheduler.TickData
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestJobMethods: the job.* round trips while scheduling is off, the
// errors a client gets, and job events reaching every client.
func TestJobMethods(t *testing.T) {
	t.Parallel()
	e := newEnv(t, jobsOff)
	c := e.dial()
	watcher := e.dial() // another client: job events are not tied to a connection or session

	for _, m := range []string{"job.create", "job.update", "job.pause", "job.resume", "job.delete", "job.list", "job.run_now", "job.get_runs"} {
		if !slices.Contains(c.Connected.Methods, m) {
			t.Errorf("methods %v lack %s", c.Connected.Methods, m)
		}
	}
	for _, ev := range scheduler.EventTypes {
		if !slices.Contains(c.Connected.Events, ev) {
			t.Errorf("events %v lack %s", c.Connected.Events, ev)
		}
	}

	sid := e.session(c)
	job := call[scheduler.Job](t, c, api.MethodJobCreate, api.JobCreateParams{
		Name: "nightly", CronExpr: "0 3 * * *", Timezone: "Europe/Berlin", Prompt: "echo {{.JobName}}",
		SessionID: sid[:8], Policy: json.RawMessage(`{"timeout":"90s","tools":["read_file","grep"]}`),
	})
	if job.ID == "" || !job.Enabled || job.TargetSessionID != sid {
		t.Errorf("created %+v", job)
	}
	if p := job.Policy; p.Timeout != 90*time.Second || !slices.Equal(p.Tools, []string{"read_file", "grep"}) ||
		p.Overlap != scheduler.OverlapSkipIfRunning || p.Retry.MaxAttempts != 1 {
		t.Errorf("policy %+v: want the given fields and defaults for the rest", p)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if next := job.NextRunAt.In(berlin); next.Hour() != 3 || next.Minute() != 0 || !next.After(time.Now()) {
		t.Errorf("next run %v, want the next 03:00 in Berlin", next)
	}

	created := waitJobEventOf(t, watcher, scheduler.EventJobCreated)
	if created.Seq != 0 || created.SessionID != "" || !strings.Contains(string(created.Data), job.ID) {
		t.Errorf("job.created frame %+v", created)
	}

	// Only the policy fields given change.
	name := "nightly"
	updated := call[scheduler.Job](t, c, api.MethodJobUpdate, api.JobUpdateParams{
		JobID: name, Policy: json.RawMessage(`{"overlap":"queue_one","retry":{"max_attempts":3}}`),
	})
	if p := updated.Policy; p.Overlap != scheduler.OverlapQueueOne || p.Retry.MaxAttempts != 3 ||
		p.Retry.Base != scheduler.DefaultRetryBase || p.Timeout != 90*time.Second || len(p.Tools) != 2 {
		t.Errorf("updated policy %+v", p)
	}
	waitJobEventOf(t, watcher, scheduler.EventJobUpdated)
	empty := ""
	updated = call[scheduler.Job](t, c, api.MethodJobUpdate, api.JobUpdateParams{JobID: job.ID[:6], SessionID: &empty})
	if updated.TargetSessionID != "" || updated.CronExpr != "0 3 * * *" {
		t.Errorf("after clearing the session: %+v", updated)
	}

	if j := call[scheduler.Job](t, c, api.MethodJobPause, api.JobParams{JobID: job.ID}); j.Enabled {
		t.Error("paused job is enabled")
	}
	if j := call[scheduler.Job](t, c, api.MethodJobResume, api.JobParams{JobID: job.ID}); !j.Enabled || !j.NextRunAt.After(time.Now()) {
		t.Errorf("resumed job %+v", j)
	}
	list := call[api.JobList](t, c, api.MethodJobList, nil)
	if len(list.Jobs) != 1 || list.Jobs[0].ID != job.ID {
		t.Errorf("job.list %+v", list)
	}
	runs := call[api.JobRunList](t, c, api.MethodJobGetRuns, api.JobRunsParams{JobID: job.ID})
	if runs.Job.ID != job.ID || runs.Runs == nil || len(runs.Runs) != 0 {
		t.Errorf("job.get_runs %+v", runs)
	}

	// Scheduling is off: nothing fires, and run_now says so.
	if e := jobErr(t, c, api.MethodJobRunNow, api.JobParams{JobID: job.ID}); e.Code != api.CodeSchedulerOff || !strings.Contains(e.Message, "--scheduler") {
		t.Errorf("run_now while disabled: %v", e)
	}

	invalid := []struct {
		name string
		p    api.JobCreateParams
		want string
	}{
		{"bad cron", api.JobCreateParams{Name: "x", CronExpr: "61 * * * *", Prompt: "p"}, "invalid cron expression"},
		{"unknown zone", api.JobCreateParams{Name: "x", CronExpr: "@daily", Timezone: "Mars/Olympus", Prompt: "p"}, `unknown timezone "Mars/Olympus"`},
		{"no name", api.JobCreateParams{CronExpr: "@daily", Prompt: "p"}, "name is required"},
		{"no prompt", api.JobCreateParams{Name: "x", CronExpr: "@daily"}, "prompt is required"},
		{"bad template", api.JobCreateParams{Name: "x", CronExpr: "@daily", Prompt: "{{.Nope}}"}, "invalid prompt template"},
		{"unknown tool", api.JobCreateParams{Name: "x", CronExpr: "@daily", Prompt: "p", Policy: json.RawMessage(`{"tools":["nope"]}`)}, `unknown tool "nope"`},
		{"bad overlap", api.JobCreateParams{Name: "x", CronExpr: "@daily", Prompt: "p", Policy: json.RawMessage(`{"overlap":"often"}`)}, `overlap "often"`},
		{"misspelt policy", api.JobCreateParams{Name: "x", CronExpr: "@daily", Prompt: "p", Policy: json.RawMessage(`{"timout":"1m"}`)}, `unknown field "timout"`},
		{"zero timeout", api.JobCreateParams{Name: "x", CronExpr: "@daily", Prompt: "p", Policy: json.RawMessage(`{"timeout":"0s"}`)}, "timeout must be positive"},
		{"unknown session", api.JobCreateParams{Name: "x", CronExpr: "@daily", Prompt: "p", SessionID: "nosuchsession"}, "nosuchsession"},
		{"name taken", api.JobCreateParams{Name: "nightly", CronExpr: "@daily", Prompt: "p"}, "already taken"},
	}
	for _, tt := range invalid {
		e := jobErr(t, c, api.MethodJobCreate, tt.p)
		if e.Code != api.CodeInvalidJob || !strings.Contains(e.Message, tt.want) {
			t.Errorf("%s: %v, want invalid_job naming %q", tt.name, e, tt.want)
		}
	}
	if e := jobErr(t, c, api.MethodJobUpdate, api.JobUpdateParams{JobID: job.ID, CronExpr: ptr("every day")}); e.Code != api.CodeInvalidJob {
		t.Errorf("update with a bad cron: %v", e)
	}

	for _, m := range []string{api.MethodJobPause, api.MethodJobResume, api.MethodJobDelete, api.MethodJobRunNow, api.MethodJobGetRuns} {
		if e := jobErr(t, c, m, api.JobParams{JobID: "nosuchjob"}); e.Code != api.CodeNotFound {
			t.Errorf("%s of an unknown job: %v, want not_found", m, e)
		}
		if e := jobErr(t, c, m, nil); e.Code != api.CodeBadRequest {
			t.Errorf("%s without job_id: %v, want bad_request", m, e)
		}
	}
	if e := jobErr(t, c, api.MethodJobUpdate, api.JobUpdateParams{JobID: "nosuchjob", Name: ptr("y")}); e.Code != api.CodeNotFound {
		t.Errorf("update of an unknown job: %v", e)
	}

	// Jobs survive a restart.
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	if err := e.srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	e2 := newEnvOn(t, e.db, e.ws, jobsOff)
	c2 := e2.dial()
	if list := call[api.JobList](t, c2, api.MethodJobList, nil); len(list.Jobs) != 1 || list.Jobs[0].Policy.Retry.MaxAttempts != 3 {
		t.Errorf("after a restart: %+v", list)
	}
	del := call[api.JobDeleted](t, c2, api.MethodJobDelete, api.JobParams{JobID: "nightly"})
	if !del.Deleted || del.JobID != job.ID {
		t.Errorf("job.delete %+v", del)
	}
	if list := call[api.JobList](t, c2, api.MethodJobList, nil); list.Jobs == nil || len(list.Jobs) != 0 {
		t.Errorf("job.list after delete: %+v", list)
	}
}

func ptr[T any](v T) *T { return &v }

func waitJobEventOf(t *testing.T, c *gatewaytest.Client, typ string) api.EventFrame {
	t.Helper()
	ctx, cancel := gatewaytest.Timeout(10 * time.Second)
	defer cancel()
	evs, err := c.WaitEvent(ctx, func(ev api.EventFrame) bool { return ev.Event == typ })
	if err != nil {
		t.Fatalf("waiting for %s: %v; got %s", typ, err, types(evs))
	}
	for _, ev := range evs {
		if ev.Event == typ {
			return ev
		}
	}
	panic("unreachable")
}

// TestJobRuns: a tick is a normal run in the job's session (or a new
// one), its outcome is recorded, a second run_now overlapping the first
// is skipped, and the timeout stops a run that hangs.
func TestJobRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, jobsOn)
	c := e.dial()
	sid := e.session(c)
	e.attach(c, sid, 0)

	// In the target session.
	job := call[scheduler.Job](t, c, api.MethodJobCreate, api.JobCreateParams{
		Name: "greeter", CronExpr: "0 0 1 1 *", Prompt: "echo hello from {{.JobName}}", SessionID: sid,
	})
	jr := call[scheduler.JobRun](t, c, api.MethodJobRunNow, api.JobParams{JobID: "greeter"})
	if jr.Status != "queued" || jr.JobID != job.ID {
		t.Fatalf("run_now: %+v", jr)
	}
	ofJob := func(d scheduler.TickData) bool { return d.JobRunID == jr.ID }
	started := tickData(t, waitJobEvent(t, c, scheduler.EventJobStarted, ofJob))
	done := waitJobEvent(t, c, scheduler.EventJobCompleted, ofJob)
	if started.RunID == "" || done.RunID != started.RunID || done.Seq != 0 {
		t.Fatalf("job.started %+v, job.completed %+v", started, done)
	}
	var inSession []api.EventFrame // job events name the run too, but no session
	for _, ev := range ofRun(waitTerminal(t, c, started.RunID), started.RunID) {
		if ev.SessionID == sid {
			inSession = append(inSession, ev)
		}
	}
	if got := types(inSession); got != "run.started message.completed message.delta message.delta message.completed run.completed" {
		t.Errorf("the job's run in its session: %s", got)
	}
	info := call[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: started.RunID})
	if info.Prompt != "echo hello from greeter" || info.SessionID != sid || info.IdempotencyKey != "job-run:"+jr.ID {
		t.Errorf("run %+v", info)
	}
	runs := call[api.JobRunList](t, c, api.MethodJobGetRuns, api.JobRunsParams{JobID: job.ID})
	if len(runs.Runs) != 1 || runs.Runs[0].Status != "completed" || runs.Runs[0].RunID != started.RunID || runs.Runs[0].CompletedAt.IsZero() {
		t.Errorf("job runs %+v", runs.Runs)
	}

	// Without a target session: a new session titled after the job.
	call[scheduler.Job](t, c, api.MethodJobCreate, api.JobCreateParams{Name: "loner", CronExpr: "@yearly", Prompt: "echo alone"})
	jr = call[scheduler.JobRun](t, c, api.MethodJobRunNow, api.JobParams{JobID: "loner"})
	done = waitJobEvent(t, c, scheduler.EventJobCompleted, func(d scheduler.TickData) bool { return d.JobRunID == jr.ID })
	info = call[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: done.RunID})
	sess := call[api.SessionDetail](t, c, api.MethodSessionGet, api.SessionParams{SessionID: info.SessionID})
	if info.SessionID == sid || !strings.HasPrefix(sess.Session.Title, "job loner ") || info.Status != "completed" {
		t.Errorf("run %+v in session %+v", info, sess.Session)
	}

	// The timeout cancels a run that hangs; a run_now meanwhile is skipped.
	// It is long enough for the second run_now to come first, however
	// loaded the machine.
	call[scheduler.Job](t, c, api.MethodJobCreate, api.JobCreateParams{
		Name: "sleeper", CronExpr: "@yearly", Prompt: "sleep", Policy: json.RawMessage(`{"timeout":"10s"}`),
	})
	jr = call[scheduler.JobRun](t, c, api.MethodJobRunNow, api.JobParams{JobID: "sleeper"})
	if again := call[scheduler.JobRun](t, c, api.MethodJobRunNow, api.JobParams{JobID: "sleeper"}); again.Status != "skipped" || !strings.Contains(again.ErrorText, "skip_if_running") {
		t.Errorf("overlapping run_now: %+v", again)
	}
	waitJobEvent(t, c, scheduler.EventJobSkippedOverlap, func(d scheduler.TickData) bool { return d.Name == "sleeper" })
	failed := tickData(t, waitJobEvent(t, c, scheduler.EventJobFailed, func(d scheduler.TickData) bool { return d.JobRunID == jr.ID }))
	if failed.Error != "timed out after 10s" || failed.WillRetry == nil || *failed.WillRetry {
		t.Errorf("job.failed %+v", failed)
	}
	info = call[api.RunInfo](t, c, api.MethodRunGet, api.RunParams{RunID: failed.RunID})
	if info.Status != "failed" || info.Reason != "timeout" || !strings.HasPrefix(info.Detail, "timed out after 10s") {
		t.Errorf("the timed-out run: %s %q %q", info.Status, info.Reason, info.Detail)
	}
}

// TestJobReattach fakes what kill -9 leaves during a job's run: the run
// with a dead lease and its job_runs row still running. The next gateway
// reclaims the run, and the scheduler records the attempt as the run
// really ends rather than as interrupted.
func TestJobReattach(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		policy, status, errText string
	}{
		{gateway.ReclaimResume, event.StatusCompleted, ""},
		{gateway.ReclaimFail, event.StatusFailed, "not resumed (reclaim policy fail)"},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			t.Parallel()
			db, ws := openStore(t)
			ctx := context.Background()
			s := &store.Session{ID: "job-session"}
			if err := db.CreateSession(ctx, s); err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(map[string]any{"model": "fake", "base_url": "http://127.0.0.1:9/v1", "timeout": "1m"})
			r := &store.Run{ID: "job-run-0001", SessionID: s.ID, Prompt: "echo scheduled", Workspace: ws, Config: raw}
			if err := db.CreateRun(ctx, r, "elsewhere/1/dead", -time.Minute); err != nil { // already expired
				t.Fatal(err)
			}
			job := &store.Job{ID: "job-0001", Name: "hourly", CronExpr: "@hourly", Timezone: "UTC", Enabled: true,
				TargetSessionID: s.ID, PromptTemplate: "echo scheduled", PolicyJSON: json.RawMessage(`{"timeout":"1m"}`),
				NextRunAt: time.Now().Add(time.Hour).Truncate(time.Hour)}
			if err := db.CreateJob(ctx, job); err != nil {
				t.Fatal(err)
			}
			jr, err := db.ClaimTick(ctx, job.ID, job.NextRunAt.Add(-time.Hour), 1, event.StatusQueued)
			if err != nil {
				t.Fatal(err)
			}
			jr.RunID, jr.Status, jr.StartedAt = r.ID, event.StatusRunning, time.Now()
			if err := db.UpdateJobRun(ctx, jr); err != nil {
				t.Fatal(err)
			}

			newEnvOn(t, db, ws, func(c *gateway.Config) {
				jobsOn(c)
				c.ReclaimPolicy = tt.policy
			})
			var got store.JobRun
			deadline := time.Now().Add(gatewaytest.Patience)
			for got.Status != tt.status && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				runs, err := db.JobRuns(ctx, job.ID, 0)
				if err != nil || len(runs) != 1 {
					t.Fatalf("job runs %+v %v", runs, err)
				}
				got = runs[0]
			}
			if got.Status != tt.status || got.RunID != r.ID || !strings.Contains(got.ErrorText, tt.errText) {
				t.Errorf("job run %+v, want %s %q", got, tt.status, tt.errText)
			}
		})
	}
}
