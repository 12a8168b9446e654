package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"agent/adapter"
	"agent/config"
	"agent/console"
	"agent/event"
	"agent/orchestrator"
	"agent/plan"
	"agent/runner"
	"agent/store"
	"agent/tools"
)

// harnessConfig is stored with a harness run so resume drives it the same
// way. Secrets are never part of it.
type harnessConfig struct {
	Model         adapter.Model `json:"model"`
	MaxTurns      int           `json:"max_turns,omitempty"`
	Tools         []string      `json:"tools,omitempty"` // offered to phases; empty means all
	Parallel      int           `json:"parallel"`
	PhaseTimeout  string        `json:"phase_timeout"`
	ContextBudget int           `json:"context_budget,omitempty"`
}

func harnessCommand() *cli.Command {
	flags := append(modelFlags(),
		&cli.StringFlag{Name: "workspace", Aliases: []string{"C"}, Usage: "directory the phases work in (default: the current directory)"},
		&cli.StringSliceFlag{Name: "allow-tools", Usage: "offer phases only these tools, comma separated"},
		&cli.StringSliceFlag{Name: "deny-tools", Usage: "never offer phases these tools, comma separated"},
		&cli.IntFlag{Name: "parallel", Value: 1, Usage: "run up to N independent phases at once"},
		&cli.DurationFlag{Name: "phase-timeout", Value: orchestrator.DefaultPhaseTimeout, Usage: "stop a phase attempt after this long (SIGTERM, then SIGKILL)"},
		&cli.IntFlag{Name: "context-budget", Usage: "start a fresh iteration when a phase's prompt passes this many `TOKENS`"},
		&cli.BoolFlag{Name: "plan", Usage: "plan only: write mission.json, print the plan and the run id, and stop"},
		&cli.StringFlag{Name: "plan-file", Usage: "run this mission.json `FILE` without a planning call"},
		&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation of the plan on a terminal"},
	)
	return &cli.Command{
		Name:      "harness",
		Usage:     "plan a long task, run each phase in a fresh child process, verify it with evidence",
		ArgsUsage: "REQUEST (or - to read it from stdin)",
		Description: "A planner splits the request into phases with dependencies and evidence (files, a command, receipts).\n" +
			"Each phase attempt runs in a fresh 'agent runner' child with only what it needs: the objective, its\n" +
			"instructions, its dependencies' results, the learnings so far and the guardrails of failed attempts.\n" +
			"A phase passes only when its evidence verifies; it is retried up to its max_attempts (default 3).\n" +
			"Every transition is checkpointed: after a crash, 'agent resume RUN_ID' never re-runs a verified phase.\n" +
			"Files go to WORKSPACE/.agent/runs/RUN_ID: mission.json, progress.md, verification/, logs/.\n\n" +
			"Exit codes: 0 every phase verified, 1 a phase failed after its retries, 2 bad input or invalid plan,\n" +
			"3 model provider failure, 4 run busy, 130 interrupted (resumable).\n\n" +
			"Examples:\n" +
			"  agent harness \"write a market report on e-bikes with sources\"\n" +
			"  agent harness --plan \"migrate the tests to testify\"     # review .agent/runs/ID/mission.json, then: agent resume ID\n" +
			"  agent harness --plan-file mission.json --parallel 2 --json",
		Flags:  flags,
		Action: harnessAction,
	}
}

func harnessAction(c *cli.Context) error {
	var given *plan.Plan
	if path := c.String("plan-file"); path != "" {
		if c.Bool("plan") {
			return usageErrorf("--plan and --plan-file together make no sense: the plan already exists")
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return usageErrorf("--plan-file: %v", err)
		}
		if given, err = plan.Parse(data); err != nil {
			return usageErrorf("%s: %v", path, err)
		}
	}
	request := ""
	if given == nil || c.Args().Len() > 0 {
		var err error
		if request, err = readPrompt(c); err != nil {
			return err
		}
	}
	if request == "" {
		request = given.Objective
	}
	settings, err := config.Load()
	if err != nil {
		return err
	}
	hc, ws, err := harnessSettings(c, settings)
	if err != nil {
		return err
	}
	if err := checkModelAccess(hc.Model, settings.APIKey); err != nil {
		return err
	}
	db, err := store.Open(config.DBPath(settings.Home))
	if err != nil {
		return err
	}
	defer db.Close()
	raw, _ := json.Marshal(hc)
	r := &store.Run{ID: newRunID(), Kind: store.KindHarness, Prompt: request, Workspace: ws.Root(), Model: hc.Model.Name, Config: raw}
	owner := store.NewLeaseOwner()
	if err := db.CreateRun(c.Context, r, owner, leaseTTL()); err != nil {
		return err
	}
	return driveHarness(c, db, r, owner, hc, settings.APIKey, given, false)
}

// harnessSettings resolves the harness flags against the config.
func harnessSettings(c *cli.Context, settings config.Settings) (harnessConfig, *tools.Workspace, error) {
	model, err := modelSettings(c, config.Pick(c.String("model"), settings.Model), config.Pick(c.String("base-url"), settings.BaseURL),
		config.PickInt(c.Int("model-attempts"), settings.ModelAttempts))
	if err != nil {
		return harnessConfig{}, nil, err
	}
	hc := harnessConfig{
		Model: model, MaxTurns: config.PickInt(c.Int("max-turns"), settings.MaxTurns), Parallel: c.Int("parallel"),
		PhaseTimeout: c.Duration("phase-timeout").String(), ContextBudget: c.Int("context-budget"),
	}
	switch {
	case hc.Parallel < 1:
		return hc, nil, usageErrorf("--parallel must be at least 1")
	case c.Duration("phase-timeout") <= 0:
		return hc, nil, usageErrorf("--phase-timeout must be positive")
	case hc.MaxTurns < 0 || hc.ContextBudget < 0:
		return hc, nil, usageErrorf("--max-turns and --context-budget must be positive")
	}
	dir := c.String("workspace")
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return hc, nil, err
		}
	}
	ws, err := tools.NewWorkspace(dir)
	if err != nil {
		return hc, nil, usageErrorf("workspace: %v", err)
	}
	allow, deny := splitList(c.StringSlice("allow-tools")), splitList(c.StringSlice("deny-tools"))
	if len(allow)+len(deny) > 0 {
		// Check the names against every tool a phase can have; the
		// children build their own sets from the names.
		extra := append(tools.RecordTools(), tools.EffectTools(tools.EffectScope{}, nil, nil)...)
		set, err := tools.NewSet(ws, tools.Options{Allow: allow, Deny: tools.WithoutUnconfigured(allow, deny, nil)}, extra...)
		if err != nil {
			return hc, nil, usageErrorf("%v", err)
		}
		hc.Tools = set.Names()
	}
	return hc, ws, nil
}

// resumeHarness continues a harness run: re-plans if planning never
// finished, re-reads an edited mission.json if no phase started, and
// otherwise executes the remaining phases.
func resumeHarness(c *cli.Context, db *store.DB, r *store.Run, apiKey string) error {
	var hc harnessConfig
	if err := json.Unmarshal(r.Config, &hc); err != nil {
		return fmt.Errorf("run %s has unreadable settings: %v: %w", r.ID, err, errNotResumable)
	}
	hc.Model.Name = config.Pick(c.String("model"), hc.Model.Name)
	hc.Model.BaseURL = config.Pick(c.String("base-url"), hc.Model.BaseURL)
	hc.Model.MaxAttempts = config.PickInt(c.Int("model-attempts"), hc.Model.MaxAttempts)
	hc.MaxTurns = config.PickInt(c.Int("max-turns"), hc.MaxTurns)
	if c.IsSet("record") || c.IsSet("replay") {
		m, err := modelSettings(c, hc.Model.Name, hc.Model.BaseURL, hc.Model.MaxAttempts)
		if err != nil {
			return err
		}
		hc.Model.Record, hc.Model.Replay = m.Record, m.Replay
	}
	if err := checkModelAccess(hc.Model, apiKey); err != nil {
		return err
	}
	var edited *plan.Plan
	if st, err := db.PlanState(c.Context, r.ID); err == nil && !st.Started() {
		p, err := readEditedMission(r, st.Mission)
		if err != nil {
			return err
		}
		edited = p
	}
	owner := store.NewLeaseOwner()
	if err := db.AcquireLease(c.Context, r.ID, owner, leaseTTL()); err != nil {
		return err
	}
	return driveHarness(c, db, r, owner, hc, apiKey, edited, true)
}

// readEditedMission returns the run's mission.json when a person changed
// it after planning, validated again; nil when it is unchanged or gone.
func readEditedMission(r *store.Run, stored json.RawMessage) (*plan.Plan, error) {
	path := filepath.Join(runDir(r), "mission.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := plan.Parse(data)
	if err != nil {
		return nil, usageErrorf("%s: %v", path, err)
	}
	old, err := plan.Parse(stored)
	if err == nil && string(old.JSON()) == string(p.JSON()) {
		return nil, nil
	}
	return p, nil
}

func runDir(r *store.Run) string {
	return filepath.Join(r.Workspace, ".agent", "runs", r.ID)
}

// driveHarness plans (or adopts a given plan), asks for confirmation on a
// terminal, executes the phases and records how the run ended.
func driveHarness(c *cli.Context, db *store.DB, r *store.Run, owner string, hc harnessConfig, apiKey string, given *plan.Plan, resumed bool) error {
	d, err := startDriving(c, db, r, owner, true)
	if err != nil {
		return err
	}
	defer d.close()
	phaseTimeout, _ := time.ParseDuration(hc.PhaseTimeout)
	o, err := orchestrator.New(orchestrator.Config{
		Store: db, Sink: d.sink, RunID: r.ID, SessionID: r.SessionID, Workspace: r.Workspace, RunDir: runDir(r),
		Model: hc.Model, Tools: hc.Tools, MaxTurns: hc.MaxTurns, ContextBudget: hc.ContextBudget,
		Parallel: hc.Parallel, PhaseTimeout: phaseTimeout, Env: childEnv(apiKey), ResendUnknown: c.Bool("resend-unknown"),
		// AGENT_RUNNER_EXEC runs children through another program, e.g. a
		// sandbox wrapper that execs agent; it must speak the runner protocol.
		Exe:              os.Getenv("AGENT_RUNNER_EXEC"),
		HeartbeatTimeout: durationEnv("AGENT_HEARTBEAT_TIMEOUT"), Grace: durationEnv("AGENT_KILL_GRACE"),
	})
	if err != nil {
		return err
	}
	if err := d.sink.Emit(d.persist, event.New(event.RunStarted, event.RunStartedData{
		Prompt: r.Prompt, Model: hc.Model.Name, Workspace: r.Workspace, Tools: hc.Tools, Resumed: resumed,
	})); err != nil {
		return err
	}

	fresh := false
	if _, err := db.PlanState(d.ctx, r.ID); errors.Is(err, store.ErrNotFound) {
		fresh = true
		if given == nil {
			if given, err = o.Plan(d.ctx, r.Prompt); err != nil {
				return d.finish(harnessFailure(d.ctx, err))
			}
		} else if err := o.Adopt(d.ctx, given); err != nil {
			return d.finish(harnessFailure(d.ctx, err))
		}
	} else if err != nil {
		return err
	} else if given != nil {
		if err := o.Adopt(d.ctx, given); err != nil {
			return d.finish(harnessFailure(d.ctx, err))
		}
		_ = d.sink.Emit(d.persist, event.New(event.Warning, event.WarningData{Message: "mission.json was edited; using the edited plan"}))
	}

	if c.Bool("plan") || (fresh && !confirmPlan(c, o.MissionPath())) {
		reason := fmt.Sprintf("planned: review %s, then run: agent resume %s", o.MissionPath(), r.ID)
		if !c.Bool("json") && !c.Bool("plan") {
			reason = "plan not confirmed; it is kept. Run it later with: agent resume " + r.ID
		}
		return d.finish(event.RunInterrupted, event.RunFinishedData{Status: "planned", Reason: reason})
	}

	out, err := o.Execute(d.ctx)
	if err != nil {
		return d.finish(harnessFailure(d.ctx, err))
	}
	fin := event.RunFinishedData{Status: out.Status, Result: out.Result}
	fin.Turns, fin.Usage = d.totals()
	switch out.Status {
	case orchestrator.StatusCompleted:
		fin.Reason = "every phase verified"
		return d.finish(event.RunCompleted, fin)
	case orchestrator.StatusInterrupted:
		typ, f := finalEvent(d.ctx, runner.Result{}, context.Cause(d.ctx))
		f.Turns, f.Usage = fin.Turns, fin.Usage
		return d.finish(typ, f)
	}
	fin.ExitCode = 1
	if out.ProviderFailure {
		fin.ExitCode = 3
	}
	if out.FailedPhase != "" {
		fin.Reason = fmt.Sprintf("phase %s failed after its attempts: %s; 'agent resume %s' retries it with a fresh budget",
			out.FailedPhase, strings.Join(out.Reasons, "; "), r.ID)
	} else {
		fin.Reason = strings.Join(out.Reasons, "; ")
	}
	return d.finish(event.RunFailed, fin)
}

// harnessFailure maps an error that stopped the harness to its final event.
func harnessFailure(ctx context.Context, err error) (string, event.RunFinishedData) {
	var pe *orchestrator.PlanError
	var planErr *plan.Error
	switch {
	case ctx.Err() != nil:
		return finalEvent(ctx, runner.Result{}, err)
	case errors.As(err, &planErr):
		return event.RunFailed, event.RunFinishedData{Status: "failed", Reason: err.Error(), ExitCode: 2}
	case errors.As(err, &pe):
		code := 1
		if pe.ProviderFailure {
			code = 3
		}
		return event.RunFailed, event.RunFinishedData{Status: "failed", Reason: err.Error(), ExitCode: code}
	}
	return event.RunFailed, event.RunFinishedData{Status: "failed", Reason: err.Error(), ExitCode: 1}
}

// confirmPlan asks on a terminal whether to run the plan; elsewhere, or
// with --yes or --json, it does not ask.
func confirmPlan(c *cli.Context, missionPath string) bool {
	in, ok := c.App.Reader.(*os.File)
	if c.Bool("yes") || c.Bool("json") || !ok || !console.IsTerminal(in) {
		return true
	}
	fmt.Fprintf(c.App.ErrWriter, "Run this plan? The plan is in %s. [Y/n] ", missionPath)
	answer, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false
	}
	answer = strings.ToLower(strings.TrimSpace(answer))
	return answer == "" || answer == "y" || answer == "yes"
}

// childEnv is the environment of runner children: this process's, with
// the API key resolved from config as well.
func childEnv(apiKey string) []string {
	env := os.Environ()
	if apiKey != "" {
		env = append(env, "OPENAI_API_KEY="+apiKey)
	}
	return env
}

// durationEnv reads a duration knob that exists for tests; 0 if unset.
func durationEnv(name string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(name))
	return d
}
