package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"agent/console"
	"agent/gateway/api"
	"agent/scheduler"
	"agent/supervisor"
)

func jobsCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON: one object per line for lists, one object otherwise"}
	gatewayFlag := &cli.StringFlag{Name: "gateway", Usage: "gateway `URL` (default $AGENT_GATEWAY or " + api.DefaultURL + ")"}
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
		&cli.StringFlag{Name: "ask", Usage: "approval `RULES` of each run, as agent run --ask takes them (\"\" on update: none); a run waits for agent approve or the web view"},
		&cli.StringFlag{Name: "output-schema", Usage: "each run's final answer must be JSON valid against this JSON Schema `FILE`, as agent run --output-schema (\"\" on update: none)"},
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
	return changeJob(c, api.MethodJobCreate, p, scheduler.CheckChange(&p.CronExpr, &p.Timezone, p.Policy))
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
	policy, err := policyFlags(c)
	if err != nil {
		return err
	}
	p := api.JobUpdateParams{
		JobID: id, Name: given("name"), CronExpr: given("cron"), Timezone: given("tz"), Prompt: given("prompt"),
		SessionID: given("session"), Policy: policy,
	}
	if p.Name == nil && p.CronExpr == nil && p.Timezone == nil && p.Prompt == nil && p.SessionID == nil && p.Policy == nil {
		return usageErrorf("jobs update: nothing to change; give the flags to change, e.g. --cron or --timeout (see 'agent jobs update --help')")
	}
	return changeJob(c, api.MethodJobUpdate, p, scheduler.CheckChange(p.CronExpr, p.Timezone, p.Policy))
}

// changeJob creates or updates a job, shows it, and warns when the
// gateway will not fire it; invalid, it asks no gateway (scheduler.CheckChange).
func changeJob(c *cli.Context, method string, params any, invalid error) error {
	if invalid != nil {
		return &usageError{msg: "invalid job: " + invalid.Error()}
	}
	var job scheduler.Job
	gw, err := callJobs(c, method, params, &job)
	if err != nil {
		return err
	}
	warnSchedulingOff(c, gw, "this job will not fire")
	return printJob(c, job)
}

// policyKeys are the flags of a job's policy, each with the key of the
// policy's JSON it sets ("retry.…": in its retry object).
var policyKeys = []struct{ flag, key string }{
	{"overlap", "overlap"}, {"missed", "missed"}, {"timeout", "timeout"}, {"tools", "tools"},
	{"sandbox", "sandbox"}, {"network", "network"}, {"max-tokens", "max_tokens"}, {"max-cost", "max_cost"},
	{"max-attempts", "retry.max_attempts"}, {"retry-base", "retry.base"}, {"retry-cap", "retry.cap"}, {"ask", "ask"},
	{"output-schema", "output_schema"},
}

// policyFlags is the partial policy the policy flags given make
// (scheduler.PolicyPatch); nil if none is given.
func policyFlags(c *cli.Context) (json.RawMessage, error) {
	given := map[string]any{}
	for _, k := range policyKeys {
		if !c.IsSet(k.flag) {
			continue
		}
		v := c.Value(k.flag)
		if d, ok := v.(time.Duration); ok {
			v = d.String() // the policy's durations are strings
		}
		if k.flag == "tools" {
			v = append([]string{}, splitList([]string{c.String("tools")})...) // "": the default tools
		}
		if k.flag == "ask" {
			v = []string{c.String("ask")} // the rules split themselves: a glob may hold a comma
		}
		if k.flag == "output-schema" && c.String(k.flag) == "" {
			v = nil // null: none
		} else if k.flag == "output-schema" {
			raw, err := supervisor.ReadOutputSchema(c.String(k.flag))
			if err != nil {
				return nil, usageErrorf("--output-schema: %v", err)
			}
			v = raw
		}
		given[k.key] = v
	}
	return scheduler.PolicyPatch(given), nil
}

func jobsListAction(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErrorf("jobs list takes no arguments")
	}
	var list api.JobList
	gw, err := callJobs(c, api.MethodJobList, nil, &list)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return jsonLines(c.App.Writer, list.Jobs)
	}
	warnSchedulingOff(c, gw, "no job fires")
	if len(list.Jobs) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "no jobs yet; create one: agent jobs create --name NAME --cron EXPR --prompt TEXT")
		return nil
	}
	return console.PrintJobs(c.App.Writer, list.Jobs, gw.Scheduling != nil && !*gw.Scheduling)
}

func jobsPauseResumeAction(c *cli.Context) error {
	method := api.MethodJobPause
	if c.Command.Name == "resume" {
		method = api.MethodJobResume
	}
	var job scheduler.Job
	if _, err := callJob(c, method, &job); err != nil {
		return err
	}
	return printJob(c, job)
}

func jobsDeleteAction(c *cli.Context) error {
	var res api.JobDeleted
	if _, err := callJob(c, api.MethodJobDelete, &res); err != nil {
		return err
	}
	return output(c, res, func(w io.Writer) { fmt.Fprintf(w, "deleted job %s (%s)\n", res.Name, res.JobID) })
}

func jobsRunNowAction(c *cli.Context) error {
	var run scheduler.JobRun
	id, err := callJob(c, api.MethodJobRunNow, &run)
	if err != nil {
		return err
	}
	return output(c, run, func(w io.Writer) { console.PrintJobRun(w, run, id) })
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
	if _, err := callJobs(c, api.MethodJobGetRuns, api.JobRunsParams{JobID: id, Limit: c.Int("limit")}, &list); err != nil {
		return err
	}
	switch {
	case c.Bool("json"):
		return jsonLines(c.App.Writer, list.Runs)
	case len(list.Runs) == 0:
		fmt.Fprintln(c.App.ErrWriter, console.NoJobRuns(list.Job))
		return nil
	}
	return console.PrintJobRuns(c.App.Writer, list.Job, list.Runs)
}

// jobArg is the one job a command names.
func jobArg(c *cli.Context) (string, error) {
	if c.Args().Len() != 1 {
		return "", usageErrorf("jobs %s needs exactly one job ID (or name); see 'agent jobs list'", c.Command.Name)
	}
	return c.Args().First(), nil
}

// callJob makes a job.* request about the one job the command names.
func callJob(c *cli.Context, method string, result any) (id string, err error) {
	if id, err = jobArg(c); err == nil {
		_, err = callJobs(c, method, api.JobParams{JobID: id}, result)
	}
	return id, err
}

// warnSchedulingOff says, on stderr, that the gateway fires no job.
func warnSchedulingOff(c *cli.Context, gw api.ConnectResult, what string) {
	if gw.Scheduling != nil && !*gw.Scheduling {
		fmt.Fprintf(c.App.ErrWriter, "warning: scheduling is off in this gateway, so %s; restart it with 'agent gateway --scheduler' (or set SchedulerEnabled = true in config.toml)\n", what)
	}
}

// callJobs makes one job.* request to the gateway, on a connection of its
// own, and maps a refusal to an exit code with one line naming the
// problem. It says what the gateway answered to connect.
func callJobs(c *cli.Context, method string, params, result any) (api.ConnectResult, error) {
	addr, _ := gatewayAddress(c)
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
	switch {
	case err == nil:
		return connected, nil
	case !errors.As(err, &ge):
		return connected, &gatewayError{err: err}
	case ge.Code == api.CodeInvalidJob:
		return connected, &usageError{msg: "invalid job: " + ge.Message}
	case ge.Code == api.CodeNotFound:
		return connected, &usageError{msg: ge.Message + "; see 'agent jobs list'"}
	case ge.Code == api.CodeSchedulerOff:
		return connected, usageErrorf("scheduling is off in the gateway at %s, so jobs do not run; restart it with 'agent gateway --scheduler' (or set SchedulerEnabled = true in config.toml)", addr)
	}
	return connected, &gatewayError{err: err}
}

// printJob shows one job: one JSON object with --json, else a summary.
func printJob(c *cli.Context, j scheduler.Job) error {
	sandbox := supervisor.Options{Sandbox: j.Policy.Sandbox, Network: j.Policy.Network}.SandboxSummary()
	return output(c, j, func(w io.Writer) { console.PrintJob(w, j, sandbox) })
}
