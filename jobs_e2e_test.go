package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"agent/event"
	"agent/gateway"
	"agent/gateway/gatewaytest"
	"agent/llm/llmtest"
	"agent/scheduler"
	"agent/store"
)

// Scheduled jobs end to end: `agent jobs` against an in-process gateway
// whose runs are real `agent runner` children of a fake model.

// noRaceExitSleep keeps a -race child from sleeping a second when it
// exits 0 (the race runtime's atexit_sleep_ms), which would make each
// CLI call and each run take a second longer.
var noRaceExitSleep = "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")

// jobsGateway starts an in-process gateway with a scheduler, on or off.
func (e *e2e) jobsGateway(enabled bool) (*gateway.Server, *store.DB) {
	return e.inProcessGateway(func(c *gateway.Config) {
		c.Scheduler = &gateway.SchedulerConfig{Enabled: enabled, PollInterval: 200 * time.Millisecond}
		c.Env = append(c.Env, noRaceExitSleep)
	})
}

// jobs runs `agent jobs ARGS` against the gateway at addr.
func (e *e2e) jobs(addr string, args ...string) result {
	e.t.Helper()
	cmd := e.command(append([]string{"jobs"}, args...)...)
	cmd.Env = append(cmd.Env, e.gatewayEnv(addr)...)
	cmd.Env = append(cmd.Env, noRaceExitSleep)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	return result{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
}

// mustJobs runs `agent jobs ARGS`, which must succeed.
func (e *e2e) mustJobs(addr string, args ...string) string {
	e.t.Helper()
	res := e.jobs(addr, args...)
	if res.code != 0 {
		e.t.Fatalf("agent jobs %s: exit %d: %s", strings.Join(args, " "), res.code, res.stderr)
	}
	return res.stdout
}

// jsonLines decodes one JSON object per line.
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var vs []T
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		vs = append(vs, v)
	}
	return vs
}

func jobRuns(t *testing.T, db *store.DB, jobID string) []store.JobRun {
	t.Helper()
	runs, err := db.JobRuns(context.Background(), jobID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// TestJobsEverySecond: a job firing every second through the CLI runs as
// normal runs in its session, pausing stops it, and its runs are listed.
func TestJobsEverySecond(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	e.srv = llmtest.NewServer(t, llmtest.Script{Loop: true, Turns: []llmtest.Turn{{Text: "All systems nominal."}}})
	srv, db := e.jobsGateway(true)
	addr := srv.Addr()
	c := gwDial(t, addr)
	sid := gwCall[gateway.SessionInfo](t, c, gateway.MethodSessionCreate, gateway.SessionCreateParams{Title: "ops"}).SessionID
	gwCall[gateway.SessionResumeResult](t, c, gateway.MethodSessionResume, gateway.SessionResumeParams{SessionID: sid})

	out := e.mustJobs(addr, "create", "--name", "heartbeat", "--cron", "@every 1s",
		"--prompt", `check {{.JobName}} at {{.ScheduledFor.Format "15:04:05"}}`, "--session", sid, "--json")
	job := jsonLines[scheduler.Job](t, out)
	if len(job) != 1 || job[0].ID == "" || job[0].TargetSessionID != sid || job[0].CronExpr != "@every 1s" {
		t.Fatalf("create --json printed %q", out)
	}
	id := job[0].ID

	// At least two ticks complete, each a normal run in the session.
	completed := func() []gateway.EventFrame {
		var evs []gateway.EventFrame
		for _, ev := range c.Events() {
			if ev.Event == scheduler.EventJobCompleted {
				evs = append(evs, ev)
			}
		}
		return evs
	}
	waitFor(t, "two completed job runs", func() bool { return len(completed()) >= 2 })
	e.mustJobs(addr, "pause", id)
	paused := len(jobRuns(t, db, id))

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
		_, err := c.WaitEvent(ctx, func(ev gateway.EventFrame) bool { return ev.Event == typ && ev.Seq == 0 && ev.SessionID == "" })
		cancel()
		if err != nil {
			t.Errorf("no %s event frame: %v", typ, err)
		}
	}

	// Paused, it starts nothing more.
	time.Sleep(2500 * time.Millisecond)
	if n := len(jobRuns(t, db, id)); n != paused {
		t.Errorf("%d job runs after pausing, %d when paused", n, paused)
	}

	runs := jsonLines[scheduler.JobRun](t, e.mustJobs(addr, "runs", id, "--json"))
	ok := 0
	for _, r := range runs {
		switch {
		case r.JobID != id:
			t.Errorf("runs lists %+v", r)
		case r.Status == store.JobRunCompleted && r.RunID != "" && !r.CompletedAt.IsZero():
			ok++
		case r.Status != store.JobRunSkipped: // a slow run may make the next tick skip
			t.Errorf("job run %+v, want completed", r)
		}
	}
	if ok < 2 || len(runs) != paused {
		t.Errorf("jobs runs --json: %d completed of %d, %d in the store", ok, len(runs), paused)
	}
	if table := e.mustJobs(addr, "runs", "heartbeat"); !strings.Contains(table, "completed") {
		t.Errorf("jobs runs:\n%s", table)
	}
	if table := e.mustJobs(addr, "list"); !strings.Contains(table, "heartbeat") || !strings.Contains(table, "paused") {
		t.Errorf("jobs list:\n%s", table)
	}

	e.mustJobs(addr, "delete", id)
	if out := e.mustJobs(addr, "list", "--json"); out != "" {
		t.Errorf("jobs list --json after delete: %q", out)
	}
}

// TestJobsToolsAndTimeout: a job's runs are offered only its tools, and
// its timeout stops a run that hangs and fails the attempt.
func TestJobsToolsAndTimeout(t *testing.T) {
	t.Parallel()
	e := newE2E(t,
		llmtest.Turn{When: "TOOLS-CHECK", Text: "Looked."},
		llmtest.Turn{When: "HANG-CHECK", Text: "thinking", Hang: true},
	)
	srv, db := e.jobsGateway(true)
	addr := srv.Addr()
	waitJob := func(jobID, status string) store.JobRun {
		t.Helper()
		var last store.JobRun
		waitFor(t, "a "+status+" job run", func() bool {
			runs := jobRuns(t, db, jobID)
			if len(runs) > 0 {
				last = runs[0]
			}
			return last.Status == status
		})
		return last
	}

	tools := jsonLines[scheduler.Job](t, e.mustJobs(addr, "create", "--name", "tools", "--cron", "@yearly",
		"--prompt", "TOOLS-CHECK", "--tools", "read_file, list_files", "--json"))[0]
	queued := jsonLines[scheduler.JobRun](t, e.mustJobs(addr, "run-now", "tools", "--json"))[0]
	if queued.Status != store.JobRunQueued || queued.JobID != tools.ID {
		t.Errorf("run-now --json: %+v", queued)
	}
	waitJob(tools.ID, store.JobRunCompleted)
	var offered []string
	for _, r := range e.srv.Requests() {
		if strings.Contains(r.LastMessage().Content, "TOOLS-CHECK") {
			offered = r.ToolNames()
		}
	}
	slices.Sort(offered)
	if !slices.Equal(offered, []string{"list_files", "read_file"}) {
		t.Errorf("the job's run offered %v, want only list_files and read_file", offered)
	}

	hang := jsonLines[scheduler.Job](t, e.mustJobs(addr, "create", "--name", "hang", "--cron", "@yearly",
		"--prompt", "HANG-CHECK", "--timeout", "1s", "--json"))[0]
	began := time.Now()
	// run-now names the run it started, which the runs commands know.
	now := e.mustJobs(addr, "run-now", hang.ID)
	started := regexp.MustCompile(`^run ([0-9a-f-]{36}) started \(job run [0-9a-f-]+\); follow it with: agent runs events [0-9a-f]{8} --follow\n$`).FindStringSubmatch(now)
	if started == nil {
		t.Fatalf("run-now said %q, want the run it started", now)
	}
	if show := e.run("runs", "show", started[1]); show.code != 0 || !strings.Contains(show.stdout, "HANG-CHECK") {
		t.Errorf("runs show of the run run-now named: exit %d %s", show.code, show.stderr)
	}
	failed := waitJob(hang.ID, store.JobRunFailed)
	if took := time.Since(began); failed.ErrorText != "timed out after 1s" || took > 10*time.Second {
		t.Errorf("job run %+v after %s, want failed: timed out after 1s", failed, took)
	}
	r, err := db.GetRun(context.Background(), failed.RunID)
	if err != nil || r.Status != event.StatusFailed || r.Reason != "timeout" || !strings.HasPrefix(r.Detail, "timed out after 1s") {
		t.Errorf("the timed-out run %+v %v", r, err)
	}
	runs := jsonLines[scheduler.JobRun](t, e.mustJobs(addr, "runs", "hang", "--json"))
	if len(runs) != 1 || runs[0].Status != "failed" || !strings.Contains(runs[0].ErrorText, "timed out") {
		t.Errorf("jobs runs --json: %+v", runs)
	}

	// Each tick ran in a session of its own, which the session list
	// leaves out unless asked: they would bury the sessions people open.
	if list := e.run("sessions", "list"); list.code != 0 || list.stdout != "" ||
		!strings.Contains(list.stderr, "agent sessions list --all") {
		t.Errorf("sessions list with only job sessions: exit %d %q %q", list.code, list.stdout, list.stderr)
	}
	all := jsonLines[sessionView](t, e.run("sessions", "list", "--all", "--json").stdout)
	jobs := map[string]bool{}
	for _, s := range all {
		jobs[s.JobID] = true
	}
	if len(all) != 2 || !jobs[tools.ID] || !jobs[hang.ID] {
		t.Errorf("sessions list --all --json: %+v", all)
	}
	if show := e.run("sessions", "show", all[0].ID); !strings.Contains(show.stdout, "job       "+all[0].JobID) {
		t.Errorf("sessions show of a job's session:\n%s", show.stdout)
	}
	c := gwDial(t, addr)
	if l := gwCall[gateway.SessionList](t, c, gateway.MethodSessionList, gateway.SessionListParams{}); len(l.Sessions) != 0 {
		t.Errorf("session.list: %+v", l.Sessions)
	}
	if l := gwCall[gateway.SessionList](t, c, gateway.MethodSessionList, gateway.SessionListParams{IncludeJobs: true}); len(l.Sessions) != 2 || l.Sessions[0].JobID == "" {
		t.Errorf("session.list include_jobs: %+v", l.Sessions)
	}
}

// TestJobsCLIErrors: exit codes and one clear line for what goes wrong.
func TestJobsCLIErrors(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	srv, _ := e.jobsGateway(false)
	addr := srv.Addr()
	// Scheduling is off in this gateway: creating a job says so, and so
	// does the list, rather than show a next run that never comes.
	created := e.jobs(addr, "create", "--name", "daily", "--cron", "0 6 * * *", "--tz", "Asia/Tokyo", "--prompt", "morning report")
	if created.code != 0 || !strings.Contains(created.stdout, "06:00:00 JST") ||
		!strings.Contains(created.stderr, "scheduling is off in this gateway, so this job will not fire; restart it with 'agent gateway --scheduler'") {
		t.Errorf("jobs create with scheduling off: exit %d\n%s%s", created.code, created.stdout, created.stderr)
	}
	if list := e.jobs(addr, "list"); !strings.Contains(list.stdout, "- (scheduling off)") || !strings.Contains(list.stderr, "so no job fires") {
		t.Errorf("jobs list with scheduling off:\n%s%s", list.stdout, list.stderr)
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
		res := e.jobs(addr, tt.args...)
		if res.code != tt.code || !strings.Contains(res.stderr, tt.want) || strings.Count(res.stderr, "\n") != 1 {
			t.Errorf("agent jobs %s: exit %d %q, want exit %d and one line naming %q", strings.Join(tt.args, " "), res.code, res.stderr, tt.code, tt.want)
		}
	}

	// No gateway there: exit 3.
	cmd := e.command("jobs", "list")
	cmd.Env = append(cmd.Env, "AGENT_GATEWAY=http://127.0.0.1:1", "AGENT_GATEWAY_TOKEN="+gwToken)
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Errorf("jobs list without a gateway: exit %d, want 3", code)
	}

	// A scheduler setting the gateway cannot use is a config error.
	if err := os.MkdirAll(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.home, "config.toml"), []byte("SchedulerRecoveryPolicy = \"later\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := e.run("gateway", "--listen", "127.0.0.1:0", "--scheduler")
	if res.code != 2 || !strings.Contains(res.stderr, "SchedulerRecoveryPolicy") {
		t.Errorf("gateway with a bad SchedulerRecoveryPolicy: exit %d %q", res.code, res.stderr)
	}
}
