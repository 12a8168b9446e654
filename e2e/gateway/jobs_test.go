package gateway

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"agent/e2e/internal/e2etest"
	"agent/event"
	"agent/gateway/api"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
	"agent/scheduler"
	"agent/store"
)

// Scheduled jobs end to end: `agent jobs` against an in-process gateway
// whose runs are real `agent runner` children of a fake model.

// TestJobsEverySecond: a job firing every second through the CLI runs as
// normal runs in its session, pausing stops it, and its runs are listed.
func TestJobsEverySecond(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	e.Srv = llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Text: "All systems nominal."}}})
	srv, db := e.JobsGateway(true)
	addr := srv.Addr()
	c := e2etest.GwDial(t, addr)
	sid := e2etest.GwCall[api.SessionInfo](t, c, api.MethodSessionCreate, api.SessionCreateParams{Title: "ops"}).SessionID
	e2etest.GwCall[api.SessionResumeResult](t, c, api.MethodSessionResume, api.SessionResumeParams{SessionID: sid})

	out := e.MustJobs(addr, "create", "--name", "heartbeat", "--cron", "@every 1s",
		"--prompt", `check {{.JobName}} at {{.ScheduledFor.Format "15:04:05"}}`, "--session", sid, "--json")
	job := e2etest.JSONLines[scheduler.Job](t, out)
	if len(job) != 1 || job[0].ID == "" || job[0].TargetSessionID != sid || job[0].CronExpr != "@every 1s" {
		t.Fatalf("create --json printed %q", out)
	}
	id := job[0].ID

	// At least two ticks complete, each a normal run in the session.
	completed := func() []api.EventFrame {
		var evs []api.EventFrame
		for _, ev := range c.Events() {
			if ev.Event == scheduler.EventJobCompleted {
				evs = append(evs, ev)
			}
		}
		return evs
	}
	e2etest.WaitFor(t, "two completed job runs", func() bool { return len(completed()) >= 2 })
	e.MustJobs(addr, "pause", id)
	paused := len(e2etest.JobRuns(t, db, id))

	prompt := regexp.MustCompile(`^check heartbeat at \d\d:\d\d:\d\d$`)
	for _, done := range completed()[:2] {
		var inSession []string
		for _, ev := range c.Events() {
			if ev.RunID == done.RunID && ev.SessionID == sid {
				inSession = append(inSession, ev.Event)
			}
		}
		if len(inSession) < 2 || inSession[0] != "run.started" || inSession[len(inSession)-1] != "run.completed" {
			t.Errorf("run %s in the session: %v", done.RunID, inSession)
		}
		r, err := db.GetRun(context.Background(), done.RunID)
		if err != nil || r.SessionID != sid || r.Status != event.StatusCompleted || !prompt.MatchString(r.Prompt) || r.Result != "All systems nominal." {
			t.Errorf("stored run %+v %v", r, err)
		}
	}
	// The job events went to the client live, outside any session; the
	// last (job.updated, from the pause) may still be on its way.
	for _, typ := range []string{scheduler.EventJobCreated, scheduler.EventJobTriggered, scheduler.EventJobStarted, scheduler.EventJobUpdated} {
		ctx, cancel := gatewaytest.Timeout(5 * time.Second)
		_, err := c.WaitEvent(ctx, func(ev api.EventFrame) bool { return ev.Event == typ && ev.Seq == 0 && ev.SessionID == "" })
		cancel()
		if err != nil {
			t.Errorf("no %s event frame: %v", typ, err)
		}
	}

	// Paused, it starts nothing more.
	time.Sleep(2500 * time.Millisecond)
	if n := len(e2etest.JobRuns(t, db, id)); n != paused {
		t.Errorf("%d job runs after pausing, %d when paused", n, paused)
	}

	runs := e2etest.JSONLines[scheduler.JobRun](t, e.MustJobs(addr, "runs", id, "--json"))
	ok := 0
	for _, r := range runs {
		switch {
		case r.JobID != id:
			t.Errorf("runs lists %+v", r)
		case r.Status == event.StatusCompleted && r.RunID != "" && !r.CompletedAt.IsZero():
			ok++
		case r.Status != event.StatusSkipped: // a slow run may make the next tick skip
			t.Errorf("job run %+v, want completed", r)
		}
	}
	if ok < 2 || len(runs) != paused {
		t.Errorf("jobs runs --json: %d completed of %d, %d in the store", ok, len(runs), paused)
	}
	if table := e.MustJobs(addr, "runs", "heartbeat"); !strings.Contains(table, "completed") {
		t.Errorf("jobs runs:\n%s", table)
	}
	if table := e.MustJobs(addr, "list"); !strings.Contains(table, "heartbeat") || !strings.Contains(table, "paused") {
		t.Errorf("jobs list:\n%s", table)
	}

	e.MustJobs(addr, "delete", id)
	if out := e.MustJobs(addr, "list", "--json"); out != "" {
		t.Errorf("jobs list --json after delete: %q", out)
	}
}

// TestJobsToolsAndTimeout: a job's runs are offered only its tools, and
// its timeout stops a run that hangs and fails the attempt.
func TestJobsToolsAndTimeout(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t,
		llmtest.Turn{When: "TOOLS-CHECK", Text: "Looked."},
		llmtest.Turn{When: "HANG-CHECK", Text: "thinking", Hang: true},
	)
	srv, db := e.JobsGateway(true)
	addr := srv.Addr()
	waitJob := func(jobID, status string) store.JobRun {
		t.Helper()
		var last store.JobRun
		e2etest.WaitFor(t, "a "+status+" job run", func() bool {
			runs := e2etest.JobRuns(t, db, jobID)
			if len(runs) > 0 {
				last = runs[0]
			}
			return last.Status == status
		})
		return last
	}

	tools := e2etest.JSONLines[scheduler.Job](t, e.MustJobs(addr, "create", "--name", "tools", "--cron", "@yearly",
		"--prompt", "TOOLS-CHECK", "--tools", "read_file, list_files", "--json"))[0]
	queued := e2etest.JSONLines[scheduler.JobRun](t, e.MustJobs(addr, "run-now", "tools", "--json"))[0]
	if queued.Status != event.StatusQueued || queued.JobID != tools.ID {
		t.Errorf("run-now --json: %+v", queued)
	}
	waitJob(tools.ID, event.StatusCompleted)
	var offered []string
	for _, r := range e.Srv.Requests() {
		if strings.Contains(r.LastMessage().Content, "TOOLS-CHECK") {
			offered = r.ToolNames()
		}
	}
	slices.Sort(offered)
	if !slices.Equal(offered, []string{"list_files", "read_file"}) {
		t.Errorf("the job's run offered %v, want only list_files and read_file", offered)
	}

	hang := e2etest.JSONLines[scheduler.Job](t, e.MustJobs(addr, "create", "--name", "hang", "--cron", "@yearly",
		"--prompt", "HANG-CHECK", "--timeout", "1s", "--json"))[0]
	began := time.Now()
	// run-now names the run it started, which the runs commands know.
	now := e.MustJobs(addr, "run-now", hang.ID)
	started := regexp.MustCompile(`^run ([0-9a-f-]{36}) started \(job run [0-9a-f-]+\); follow it with: agent runs events [0-9a-f]{8} --follow\n$`).FindStringSubmatch(now)
	if started == nil {
		t.Fatalf("run-now said %q, want the run it started", now)
	}
	if show := e.Run("runs", "show", started[1]); show.Code != 0 || !strings.Contains(show.Stdout, "HANG-CHECK") {
		t.Errorf("runs show of the run run-now named: exit %d %s", show.Code, show.Stderr)
	}
	failed := waitJob(hang.ID, event.StatusFailed)
	if took := time.Since(began); failed.ErrorText != "timed out after 1s" || took > e2etest.Patience {
		t.Errorf("job run %+v after %s, want failed: timed out after 1s", failed, took)
	}
	r, err := db.GetRun(context.Background(), failed.RunID)
	if err != nil || r.Status != event.StatusFailed || r.Reason != "timeout" || !strings.HasPrefix(r.Detail, "timed out after 1s") {
		t.Errorf("the timed-out run %+v %v", r, err)
	}
	runs := e2etest.JSONLines[scheduler.JobRun](t, e.MustJobs(addr, "runs", "hang", "--json"))
	if len(runs) != 1 || runs[0].Status != "failed" || !strings.Contains(runs[0].ErrorText, "timed out") {
		t.Errorf("jobs runs --json: %+v", runs)
	}

	// Each tick ran in a session of its own, which the session list
	// leaves out unless asked: they would bury the sessions people open.
	if list := e.Run("sessions", "list"); list.Code != 0 || list.Stdout != "" ||
		!strings.Contains(list.Stderr, "agent sessions list --all") {
		t.Errorf("sessions list with only job sessions: exit %d %q %q", list.Code, list.Stdout, list.Stderr)
	}
	all := e2etest.JSONLines[e2etest.SessionView](t, e.Run("sessions", "list", "--all", "--json").Stdout)
	jobs := map[string]bool{}
	for _, s := range all {
		jobs[s.JobID] = true
	}
	if len(all) != 2 || !jobs[tools.ID] || !jobs[hang.ID] {
		t.Errorf("sessions list --all --json: %+v", all)
	}
	if show := e.Run("sessions", "show", all[0].ID); !strings.Contains(show.Stdout, "job       "+all[0].JobID) {
		t.Errorf("sessions show of a job's session:\n%s", show.Stdout)
	}
	c := e2etest.GwDial(t, addr)
	if l := e2etest.GwCall[api.SessionList](t, c, api.MethodSessionList, api.SessionListParams{}); len(l.Sessions) != 0 {
		t.Errorf("session.list: %+v", l.Sessions)
	}
	if l := e2etest.GwCall[api.SessionList](t, c, api.MethodSessionList, api.SessionListParams{IncludeJobs: true}); len(l.Sessions) != 2 || l.Sessions[0].JobID == "" {
		t.Errorf("session.list include_jobs: %+v", l.Sessions)
	}
}

// TestJobsCLIErrors: exit codes and one clear line for what goes wrong.
func TestJobsCLIErrors(t *testing.T) {
	t.Parallel()
	e := e2etest.New(t)
	srv, _ := e.JobsGateway(false)
	addr := srv.Addr()
	// Scheduling is off in this gateway: creating a job says so, and so
	// does the list, rather than show a next run that never comes.
	created := e.Jobs(addr, "create", "--name", "daily", "--cron", "0 6 * * *", "--tz", "Asia/Tokyo", "--prompt", "morning report")
	if created.Code != 0 || !strings.Contains(created.Stdout, "06:00:00 JST") ||
		!strings.Contains(created.Stderr, "scheduling is off in this gateway, so this job will not fire; restart it with 'agent gateway --scheduler'") {
		t.Errorf("jobs create with scheduling off: exit %d\n%s%s", created.Code, created.Stdout, created.Stderr)
	}
	if list := e.Jobs(addr, "list"); !strings.Contains(list.Stdout, "- (scheduling off)") || !strings.Contains(list.Stderr, "so no job fires") {
		t.Errorf("jobs list with scheduling off:\n%s%s", list.Stdout, list.Stderr)
	}

	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run-now", "daily"}, 2, "agent gateway --scheduler"},
		{[]string{"create", "--name", "x", "--cron", "every day", "--prompt", "p"}, 2, "invalid cron expression"},
		{[]string{"create", "--name", "x", "--cron", "@daily", "--tz", "Nowhere/City", "--prompt", "p"}, 2, `unknown timezone "Nowhere/City"`},
		{[]string{"create", "--name", "x", "--cron", "@daily", "--prompt", "p", "--tools", "read_file,teleport"}, 2, `unknown tool "teleport"`},
		{[]string{"create", "--name", "x", "--cron", "@daily", "--prompt", "p", "--missed", "sometimes"}, 2, `missed "sometimes"`},
		{[]string{"create", "--name", "x", "--cron", "@daily"}, 2, "--prompt is required"},
		{[]string{"update", "daily"}, 2, "nothing to change"},
		{[]string{"pause", "nosuchjob"}, 2, "not found"},
		{[]string{"runs", "nosuchjob"}, 2, "not found"},
		{[]string{"delete"}, 2, "exactly one job"},
	} {
		res := e.Jobs(addr, tt.args...)
		if res.Code != tt.code || !strings.Contains(res.Stderr, tt.want) || strings.Count(res.Stderr, "\n") != 1 {
			t.Errorf("agent jobs %s: exit %d %q, want exit %d and one line naming %q", strings.Join(tt.args, " "), res.Code, res.Stderr, tt.code, tt.want)
		}
	}

	// No gateway there: exit 3.
	cmd := e.Command("jobs", "list")
	cmd.Env = append(cmd.Env, "AGENT_GATEWAY=http://127.0.0.1:1", "AGENT_GATEWAY_TOKEN="+e2etest.GwToken)
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Errorf("jobs list without a gateway: exit %d, want 3", code)
	}

	// A scheduler setting the gateway cannot use is a config error.
	if err := os.MkdirAll(e.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Home, "config.toml"), []byte("SchedulerRecoveryPolicy = \"later\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := e.Run("gateway", "--listen", "127.0.0.1:0", "--scheduler")
	if res.Code != 2 || !strings.Contains(res.Stderr, "SchedulerRecoveryPolicy") {
		t.Errorf("gateway with a bad SchedulerRecoveryPolicy: exit %d %q", res.Code, res.Stderr)
	}
}
