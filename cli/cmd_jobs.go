package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"agent/gateway/api"
	"agent/scheduler"
	"agent/supervisor"
)

func jobsCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON: one object per line for lists, one object otherwise"}
	gatewayFlag := &cli.StringFlag{Name: "gateway", Usage: "gateway `URL` (default $AGENT_GATEWAY or " + defaultGateway + ")"}
	common := func(fs ...cli.Flag) []cli.Flag { return append(fs, jsonFlag, gatewayFlag) }
	idArg := "ID (a job id, unique id prefix or name)"
	return &cli.Command{
		Name:  "jobs",
		Usage: "manage scheduled jobs: runs the gateway starts on a cron schedule",
		Description: "Jobs live in the gateway ('agent gateway'), which fires them only when started with --scheduler\n" +
			"(or SchedulerEnabled = true in $AGENT_HOME/config.toml). Each tick is a normal run: in the job's\n" +
			"--session, or in a new session titled after the job. --prompt is a Go template that may use\n" +
			"{{.JobName}}, {{.ScheduledFor}} (a time in the job's zone), {{.Attempt}} and {{.JobID}}.\n\n" +
			"Schedules: 5 fields (minute hour day-of-month month day-of-week), 6 with leading seconds,\n" +
			"@hourly, @daily, @weekly, @monthly, @yearly, or @every DURATION; read in --tz (default UTC).\n" +
			"Policies: --overlap skip_if_running (default), queue_one or parallel; --missed skip or\n" +
			"run_once_on_recovery (default: the gateway's SchedulerRecoveryPolicy); --timeout per attempt\n" +
			"(default 10m); --max-attempts with exponential backoff from --retry-base to --retry-cap;\n" +
			"--tools, the only tools the runs are offered.\n\n" +
			"Examples:\n" +
			"  agent jobs create --name standup --cron \"0 9 * * 1-5\" --tz Europe/Berlin \\\n" +
			"      --prompt \"Summarise yesterday's commits for {{.ScheduledFor.Format \\\"Mon Jan 2\\\"}}\" --tools read_file,bash\n" +
			"  agent jobs list\n" +
			"  agent jobs update standup --timeout 5m --max-attempts 3\n" +
			"  agent jobs run-now standup\n" +
			"  agent jobs runs standup --json",
		Subcommands: []*cli.Command{
			{Name: "create", Usage: "create a job (--name, --cron and --prompt are required)", Flags: common(jobFlags()...), Action: jobsCreateAction},
			{Name: "list", Usage: "list the jobs, with their next run in each job's zone", Flags: common(), Action: jobsListAction},
			{Name: "update", Usage: "change a job: only the flags given change", ArgsUsage: idArg, Flags: common(jobFlags()...), Action: jobsUpdateAction},
			{Name: "pause", Usage: "stop a job's ticks (a run in flight goes on)", ArgsUsage: idArg, Flags: common(), Action: jobsPauseResumeAction},
			{Name: "resume", Usage: "restart a paused job from its next tick", ArgsUsage: idArg, Flags: common(), Action: jobsPauseResumeAction},
			{Name: "delete", Usage: "delete a job and its run history, cancelling its runs in flight", ArgsUsage: idArg, Flags: common(), Action: jobsDeleteAction},
			{Name: "run-now", Usage: "run a job once now, under its policy (needs 'agent gateway --scheduler')", ArgsUsage: idArg, Flags: common(), Action: jobsRunNowAction},
			{Name: "runs", Usage: "list a job's runs, newest first", ArgsUsage: idArg, Action: jobsRunsAction,
				Flags: common(&cli.IntFlag{Name: "limit", Value: 20, Usage: "show at most `N` runs"})},
		},
	}
}

// jobFlags are the flags of create and update. The defaults shown are
// create's; update changes only the flags given.
func jobFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "name", Usage: "the job's unique `NAME`"},
		&cli.StringFlag{Name: "cron", Usage: "the schedule `EXPR`, e.g. \"*/15 * * * *\" or \"@every 1h\""},
		&cli.StringFlag{Name: "tz", Usage: "IANA time `ZONE` the schedule is read in", DefaultText: "UTC"},
		&cli.StringFlag{Name: "prompt", Usage: "the runs' input `TEXT`, a Go template"},
		&cli.StringFlag{Name: "session", Usage: "run in gateway session `ID` (\"\" on update: a new session per run)", DefaultText: "a new session per run"},
		&cli.StringFlag{Name: "overlap", Usage: "policy `P` while a run is in progress: skip_if_running, queue_one or parallel", DefaultText: "skip_if_running"},
		&cli.StringFlag{Name: "missed", Usage: "policy `P` for ticks missed while the gateway was down: skip or run_once_on_recovery", DefaultText: "the gateway's SchedulerRecoveryPolicy"},
		&cli.DurationFlag{Name: "timeout", Usage: "stop an attempt after `DUR`", DefaultText: "10m"},
		&cli.StringFlag{Name: "tools", Usage: "comma-separated tool allowlist `LIST` (\"\" on update: the default tools)", DefaultText: "the default tools"},
		&cli.StringFlag{Name: "sandbox", Usage: "the runs' sandbox: workspace-write, read-only, or off (needs 'agent gateway --allow-unsandboxed')", DefaultText: "workspace-write"},
		&cli.BoolFlag{Name: "network", Usage: "give the runs' commands the network in a sandboxed mode"},
		&cli.IntFlag{Name: "max-tokens", Usage: "stop each run once it has used `N` tokens", DefaultText: "no limit"},
		&cli.Float64Flag{Name: "max-cost", Usage: "stop each run once it has cost `USD`, at the model's price in config.toml", DefaultText: "no limit"},
		&cli.IntFlag{Name: "max-attempts", Usage: "`N` attempts per tick, the first included", DefaultText: "1, no retry"},
		&cli.DurationFlag{Name: "retry-base", Usage: "wait `DUR` before the first retry, doubling for each next one", DefaultText: "30s"},
		&cli.DurationFlag{Name: "retry-cap", Usage: "wait at most `DUR` between retries", DefaultText: "10m"},
	}
}

func jobsCreateAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("jobs create takes no arguments: give the input with --prompt")
	}
	for _, f := range []string{"name", "cron", "prompt"} {
		if strings.TrimSpace(c.String(f)) == "" {
			return usageErrorf("jobs create: --%s is required", f)
		}
	}
	policy, err := policyFlags(c)
	if err != nil {
		return err
	}
	p := api.JobCreateParams{
		Name: c.String("name"), CronExpr: c.String("cron"), Timezone: c.String("tz"), Prompt: c.String("prompt"),
		SessionID: c.String("session"), Policy: policy,
	}
	var job scheduler.Job
	gw, err := callJobsOn(c, api.MethodJobCreate, p, &job)
	if err != nil {
		return err
	}
	warnSchedulingOff(c, gw, "this job will not fire")
	return printJob(c, job)
}

func jobsUpdateAction(c *cli.Context) error {
	id, err := jobArg(c)
	if err != nil {
		return err
	}
	given := func(flag string) *string {
		if !c.IsSet(flag) {
			return nil
		}
		v := c.String(flag)
		return &v
	}
	p := api.JobUpdateParams{
		JobID: id, Name: given("name"), CronExpr: given("cron"), Timezone: given("tz"), Prompt: given("prompt"),
		SessionID: given("session"),
	}
	if p.Policy, err = policyFlags(c); err != nil {
		return err
	}
	if p.Name == nil && p.CronExpr == nil && p.Timezone == nil && p.Prompt == nil && p.SessionID == nil && p.Policy == nil {
		return usageErrorf("jobs update: nothing to change; give the flags to change, e.g. --cron or --timeout (see 'agent jobs update --help')")
	}
	var job scheduler.Job
	gw, err := callJobsOn(c, api.MethodJobUpdate, p, &job)
	if err != nil {
		return err
	}
	warnSchedulingOff(c, gw, "this job will not fire")
	return printJob(c, job)
}

// policyFlags is the policy object of the policy flags given (fields left
// out keep their values, or take the defaults on create); nil if none.
func policyFlags(c *cli.Context) (json.RawMessage, error) {
	p := map[string]any{}
	for _, f := range []string{"overlap", "missed"} {
		if c.IsSet(f) {
			p[f] = c.String(f)
		}
	}
	if c.IsSet("timeout") {
		p["timeout"] = c.Duration("timeout").String()
	}
	if c.IsSet("tools") {
		tools := []string{}
		for _, t := range strings.Split(c.String("tools"), ",") {
			if t = strings.TrimSpace(t); t != "" {
				tools = append(tools, t)
			}
		}
		p["tools"] = tools
	}
	if c.IsSet("sandbox") {
		p["sandbox"] = c.String("sandbox")
	}
	if c.IsSet("network") {
		p["network"] = c.Bool("network")
	}
	if c.IsSet("max-tokens") {
		p["max_tokens"] = c.Int("max-tokens")
	}
	if c.IsSet("max-cost") {
		p["max_cost"] = c.Float64("max-cost")
	}
	retry := map[string]any{}
	if c.IsSet("max-attempts") {
		retry["max_attempts"] = c.Int("max-attempts")
	}
	if c.IsSet("retry-base") {
		retry["base"] = c.Duration("retry-base").String()
	}
	if c.IsSet("retry-cap") {
		retry["cap"] = c.Duration("retry-cap").String()
	}
	if len(retry) > 0 {
		p["retry"] = retry
	}
	if len(p) == 0 {
		return nil, nil
	}
	return json.Marshal(p)
}

func jobsListAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("jobs list takes no arguments")
	}
	var list api.JobList
	gw, err := callJobsOn(c, api.MethodJobList, nil, &list)
	if err != nil {
		return err
	}
	off := gw.Scheduling != nil && !*gw.Scheduling
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		for _, j := range list.Jobs {
			if err := enc.Encode(j); err != nil {
				return err
			}
		}
		return nil
	}
	warnSchedulingOff(c, gw, "no job fires")
	if len(list.Jobs) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "no jobs yet; create one: agent jobs create --name NAME --cron EXPR --prompt TEXT")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSCHEDULE\tSTATE\tNEXT RUN\tLAST RUN\tSESSION")
	for _, j := range list.Jobs {
		state, next := "paused", "-"
		switch {
		case j.Enabled && off:
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
			session = shortID(j.TargetSessionID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortID(j.ID), oneLine(j.Name, 30),
			schedule(j), state, next, last, session)
	}
	return tw.Flush()
}

func jobsPauseResumeAction(c *cli.Context) error {
	id, err := jobArg(c)
	if err != nil {
		return err
	}
	method := api.MethodJobPause
	if c.Command.Name == "resume" {
		method = api.MethodJobResume
	}
	var job scheduler.Job
	if err := callJobs(c, method, api.JobParams{JobID: id}, &job); err != nil {
		return err
	}
	return printJob(c, job)
}

func jobsDeleteAction(c *cli.Context) error {
	id, err := jobArg(c)
	if err != nil {
		return err
	}
	var res api.JobDeleted
	if err := callJobs(c, api.MethodJobDelete, api.JobParams{JobID: id}, &res); err != nil {
		return err
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(res)
	}
	fmt.Fprintf(c.App.Writer, "deleted job %s (%s)\n", res.Name, res.JobID)
	return nil
}

func jobsRunNowAction(c *cli.Context) error {
	id, err := jobArg(c)
	if err != nil {
		return err
	}
	var run scheduler.JobRun
	if err := callJobs(c, api.MethodJobRunNow, api.JobParams{JobID: id}, &run); err != nil {
		return err
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(run)
	}
	w := c.App.Writer
	if run.Status == "skipped" {
		fmt.Fprintf(w, "job run %s %s\n", run.ID, run.ErrorText)
		return nil
	}
	if run.RunID == "" {
		fmt.Fprintf(w, "job run %s %s; follow it with: agent jobs runs %s\n", run.ID, run.Status, id)
		return nil
	}
	fmt.Fprintf(w, "run %s started (job run %s); follow it with: agent runs events %s --follow\n", run.RunID, run.ID, shortID(run.RunID))
	return nil
}

func jobsRunsAction(c *cli.Context) error {
	id, err := jobArg(c)
	if err != nil {
		return err
	}
	if c.Int("limit") < 1 {
		return usageErrorf("jobs runs: --limit must be at least 1")
	}
	var list api.JobRunList
	if err := callJobs(c, api.MethodJobGetRuns, api.JobRunsParams{JobID: id, Limit: c.Int("limit")}, &list); err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		for _, r := range list.Runs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	j := list.Job
	if len(list.Runs) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "job %s has not run yet; next run %s\n", j.Name, inZone(j.NextRunAt, j.Timezone))
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULED\tATTEMPT\tSTATUS\tRUN\tTOOK\tERROR")
	for _, r := range list.Runs {
		run, took := "-", "-"
		if r.RunID != "" {
			run = shortID(r.RunID)
		}
		if !r.StartedAt.IsZero() && !r.CompletedAt.IsZero() {
			took = r.CompletedAt.Sub(r.StartedAt).Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\t%s\n", inZone(r.ScheduledFor, j.Timezone), r.Attempt,
			j.Policy.Retry.MaxAttempts, r.Status, run, took, oneLine(r.ErrorText, 80))
	}
	return tw.Flush()
}

// jobArg is the one job a command names.
func jobArg(c *cli.Context) (string, error) {
	if c.Args().Len() != 1 {
		return "", usageErrorf("jobs %s needs exactly one job ID (or name); see 'agent jobs list'", c.Command.Name)
	}
	return c.Args().First(), nil
}

// callJobs makes one job.* request to the gateway, on a connection of its
// own, and maps a refusal to an exit code with one line naming the
// problem.
func callJobs(c *cli.Context, method string, params, result any) error {
	_, err := callJobsOn(c, method, params, result)
	return err
}

// warnSchedulingOff says, on stderr, that the gateway fires no job.
func warnSchedulingOff(c *cli.Context, gw api.ConnectResult, what string) {
	if gw.Scheduling != nil && !*gw.Scheduling {
		fmt.Fprintf(c.App.ErrWriter, "warning: scheduling is off in this gateway, so %s; restart it with 'agent gateway --scheduler' (or set SchedulerEnabled = true in config.toml)\n", what)
	}
}

// callJobsOn is callJobs, and says what the gateway answered to connect.
func callJobsOn(c *cli.Context, method string, params, result any) (api.ConnectResult, error) {
	addr, ok := gatewayAddress(c)
	if !ok {
		addr = defaultGateway
	}
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	gc, err := dialGateway(ctx, addr)
	if err != nil {
		return api.ConnectResult{}, err
	}
	defer gc.Close()
	connected := gc.Connected
	if !slices.Contains(connected.Methods, method) {
		return connected, &exitError{code: 2, msg: fmt.Sprintf("the gateway at %s has no scheduled jobs (%s is not among its methods); upgrade it", addr, method)}
	}
	err = gc.Call(ctx, method, params, result)
	var ge *api.Error
	if err == nil || !errors.As(err, &ge) {
		if err != nil {
			return connected, &gatewayError{err: err}
		}
		return connected, nil
	}
	msg := ge.Message
	switch ge.Code {
	case api.CodeInvalidJob:
		msg = "invalid job: " + msg
	case api.CodeNotFound:
		msg += "; see 'agent jobs list'"
	case api.CodeSchedulerOff:
		msg = "scheduling is off in the gateway at " + addr + ", so jobs do not run; restart it with 'agent gateway --scheduler' (or set SchedulerEnabled = true in config.toml)"
	default:
		msg = "gateway: " + ge.Error()
	}
	return connected, &exitError{code: gatewayExitCode(err), msg: msg}
}

// printJob shows one job: one JSON object with --json, else a summary
// with its next run in its own zone.
func printJob(c *cli.Context, j scheduler.Job) error {
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(j)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "job       %s\n", j.ID)
	fmt.Fprintf(w, "name      %s\n", j.Name)
	fmt.Fprintf(w, "schedule  %s\n", schedule(j))
	if j.Enabled {
		fmt.Fprintf(w, "next run  %s (%s)\n", inZone(j.NextRunAt, j.Timezone), until(j.NextRunAt))
	} else {
		fmt.Fprintln(w, "next run  - (paused; 'agent jobs resume' restarts it)")
	}
	if j.TargetSessionID != "" {
		fmt.Fprintf(w, "session   %s\n", j.TargetSessionID)
	} else {
		fmt.Fprintln(w, "session   a new session per run")
	}
	fmt.Fprintf(w, "prompt    %s\n", oneLine(j.PromptTemplate, 100))
	printPolicy(w, j.Policy)
	return nil
}

func printPolicy(w io.Writer, p scheduler.Policy) {
	missed := p.Missed
	if missed == "" {
		missed = "the gateway's SchedulerRecoveryPolicy"
	}
	tools := "the default tools"
	if len(p.Tools) > 0 {
		tools = strings.Join(p.Tools, ", ")
	}
	retry := "no retry"
	if p.Retry.MaxAttempts > 1 {
		retry = fmt.Sprintf("%d attempts, backoff %s to %s", p.Retry.MaxAttempts, p.Retry.Base, p.Retry.Cap)
	}
	fmt.Fprintf(w, "policy    overlap %s; missed ticks: %s; timeout %s; %s\n", p.Overlap, missed, p.Timeout, retry)
	fmt.Fprintf(w, "tools     %s\n", tools)
	fmt.Fprintf(w, "sandbox   %s\n", supervisor.Options{Sandbox: p.Sandbox, Network: p.Network}.SandboxSummary())
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
