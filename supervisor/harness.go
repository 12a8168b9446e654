package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"agent/config"
	"agent/event"
	"agent/mcp"
	"agent/orchestrator"
	"agent/plan"
	"agent/runner"
	"agent/store"
)

// RunDir is where a harness run keeps its files for people:
// WORKSPACE/.agent/runs/RUN_ID (mission.json, progress.md, verification/,
// logs/).
func RunDir(r *store.Run) string {
	return filepath.Join(r.Workspace, ".agent", "runs", r.ID)
}

// driveHarness plans the run (or adopts a given or edited plan), asks for
// confirmation if the front-end wants it, and executes the phases.
func (s *Supervisor) driveHarness(ctx context.Context, r *store.Run, d Drive, sink Sink) Outcome {
	persist := context.WithoutCancel(ctx)
	o := d.Options
	phaseTimeout := time.Duration(o.PhaseTimeout)
	if phaseTimeout <= 0 {
		phaseTimeout = orchestrator.DefaultPhaseTimeout
	}
	if t := time.Duration(o.Timeout); t > 0 && t < phaseTimeout {
		phaseTimeout = t // no attempt outlives the run
	}
	if err := excludeRunFiles(r.Workspace); err != nil {
		s.log.Warn("could not keep .agent/ out of git status", "workspace", r.Workspace, "err", err)
	}
	f, configured, err := mcp.Configured(s.cfg.Home, o.MCPConfig)
	if err != nil {
		return failed(ctx, err)
	}
	// Programmatic evidence runs here, confined like the phases' bash.
	commands, err := runner.NewSandbox(s.cfg.Home, r.Workspace, o.Sandbox, o.Network, s.cfg.Env, f, configured)
	if err != nil {
		return failed(ctx, err)
	}
	defer commands.Close()
	var spawn orchestrator.Spawner // children of this process
	if s.cfg.QueueAttempts {
		spawn = s.queuedAttempts(r, sink)
	}
	orch, err := orchestrator.New(orchestrator.Config{
		Store: s.db, Sink: sink, Intents: s.intent, RunID: r.ID, SessionID: r.SessionID,
		Workspace: r.Workspace, RunDir: RunDir(r), Model: o.model(), Tools: o.Tools,
		Deny: o.DenyTools, MCPConfig: o.MCPConfig, Settings: o.Settings, Sandbox: string(o.sandboxMode()), Network: o.Network, Commands: commands,
		ContextWindow: o.ContextWindow, NoCompact: o.Compact == "off", MaxTokens: o.MaxTokens, MaxCost: o.MaxCost, Price: o.Price,
		MaxTurns: o.MaxTurns, MaxRepeats: o.MaxRepeats, ContextBudget: o.ContextBudget, Parallel: o.Parallel, PhaseTimeout: phaseTimeout, Vision: o.sees(),
		Exe: s.cfg.Exe, Env: s.cfg.Env, HeartbeatTimeout: s.cfg.HeartbeatTimeout, Grace: s.cfg.KillGrace,
		Blobs: s.blobs(), Spawn: spawn,
		Waits: o.waitOptions(), ExpireWaits: func(ctx context.Context) error { return s.expireWaits(ctx, r.ID) },
		MaxSubagents: o.maxSubagents(),
		Tasks: func(ctx context.Context, phaseID string, attempt int, req event.TaskRequestData) (event.TaskResultData, error) {
			t := &subagents{s: s, parent: r, opts: o, sink: sink, phaseID: phaseID, attempt: attempt}
			return t.Delegate(ctx, req)
		},
	})
	if err != nil {
		return failed(ctx, err)
	}

	if err := s.checkServers(ctx, r.Workspace, o, f, configured); err != nil {
		return failed(ctx, err)
	}

	given := d.Plan
	st, err := s.db.PlanState(ctx, r.ID)
	fresh := errors.Is(err, store.ErrNotFound)
	switch {
	case fresh && given == nil:
		_, err := orch.Plan(ctx, r.Prompt)
		for errors.Is(err, orchestrator.ErrParked) && s.askHere(ctx, r.ID, d) {
			_, err = orch.Plan(ctx, r.Prompt) // it goes on where it stopped
		}
		if errors.Is(err, orchestrator.ErrParked) {
			return s.parkHarness(ctx, r, sink)
		}
		if err != nil {
			return failed(ctx, err)
		}
	case fresh:
		if err := orch.Adopt(ctx, given); err != nil {
			return failed(ctx, err)
		}
	case err != nil:
		return failed(ctx, err)
	default:
		if given == nil && !st.Started() {
			if given, err = editedMission(RunDir(r), st.Mission); err != nil {
				return failed(ctx, err)
			}
		}
		if given != nil {
			if err := orch.Adopt(ctx, given); err != nil {
				return failed(ctx, err)
			}
			_ = sink.Emit(persist, event.New(event.Warning, event.WarningData{Message: "mission.json was edited; using the edited plan"}))
		}
	}

	if d.PlanOnly || (fresh && d.Confirm != nil && !d.Confirm(orch.MissionPath())) {
		detail := fmt.Sprintf("planned: review %s, then run: agent resume %s", orch.MissionPath(), r.ID)
		if !d.PlanOnly {
			detail = "plan not confirmed; it is kept. Run it later with: agent resume " + r.ID
		}
		return Outcome{Report: &event.RunnerResultData{Status: event.StatusPlanned, Reason: event.ReasonPlanned, Detail: detail}}
	}

	out, err := orch.Execute(ctx)
	for err == nil && out.Status == event.StatusWaiting && s.askHere(ctx, r.ID, d) {
		out, err = orch.Execute(ctx) // the answered attempts go on where they stopped
	}
	if err != nil {
		return failed(ctx, err)
	}
	switch out.Status {
	case event.StatusCompleted:
		return Outcome{Report: &event.RunnerResultData{
			Status: event.StatusCompleted, Output: out.Result, Reason: event.ReasonCompleted, Detail: "every phase verified",
		}}
	case event.StatusInterrupted:
		return failed(ctx, errors.New("interrupted"))
	case event.StatusWaiting:
		return s.parkHarness(ctx, r, sink)
	}
	report := &event.RunnerResultData{Status: event.StatusFailed, Reason: event.ReasonVerification, Detail: strings.Join(out.Reasons, "; ")}
	if out.Stop != "" {
		report.Reason, report.ResumeAfter = out.Stop, out.ResumeAfter
	}
	if out.FailedPhase != "" {
		report.Detail = fmt.Sprintf("phase %s failed after its attempts: %s; 'agent resume %s' retries it with a fresh budget",
			out.FailedPhase, strings.Join(out.Reasons, "; "), r.ID)
	}
	return Outcome{Report: report, Cause: cause(ctx)}
}

// parkHarness parks a harness whose planner, or whose every phase that
// could go on, waits for a person or a time (docs/PROTOCOL.md#waits). Its
// own run.waiting names the first of their waits by its id: the same
// wait, with one answer, but recorded for the run, so that the run is
// waiting and its drive ends as a single run's does. Once answered, a
// resume (or a gateway's or worker's wake-up) continues the waiting
// attempts where they stopped.
func (s *Supervisor) parkHarness(ctx context.Context, r *store.Run, sink Sink) Outcome {
	if ctx.Err() != nil {
		return failed(ctx, context.Cause(ctx))
	}
	persist := context.WithoutCancel(ctx)
	ws, err := s.db.Waits(persist, r.ID)
	if err != nil {
		return failed(ctx, err)
	}
	// An open wait, or else one answered since the phases were last
	// looked at: then the harness is woken at once.
	var first *store.Wait
	for i, w := range ws {
		if w.PhaseID != "" && !w.Journaled && (first == nil || first.Resolution != nil && w.Resolution == nil) {
			first = &ws[i]
		}
	}
	if first == nil {
		return failed(ctx, errors.New("a phase parked without a wait on record"))
	}
	if err := sink.Emit(persist, event.New(event.RunWaiting, first.Waiting)); err != nil {
		return failed(ctx, err)
	}
	return Outcome{Report: &event.RunnerResultData{Status: event.StatusWaiting, Reason: event.ReasonWaiting,
		Detail: fmt.Sprintf("phase %s waits for %s", first.PhaseID, describeWait(first.Waiting))}}
}

// askHere waits in this process for the open waits of a harness whose
// planner or phases parked, when it can ask someone (Drive.Ask): each is
// asked in turn, while the other channels and its deadline may resolve it
// first, as a single run's are. It reports whether any was resolved, so
// that the harness goes on rather than parks.
func (s *Supervisor) askHere(ctx context.Context, runID string, d Drive) bool {
	w := s.waiter(runID, d)
	if w == nil {
		return false
	}
	ws, err := s.db.Waits(ctx, runID)
	if err != nil {
		return false // parked: a resume or a wake-up reads them again
	}
	resolved := false
	for _, open := range ws {
		if open.PhaseID == "" || open.Journaled || open.Resolution != nil {
			continue
		}
		if _, err := w.Wait(ctx, open.Waiting); err != nil {
			return resolved && ctx.Err() == nil
		}
		resolved = true
	}
	return resolved
}

// editedMission returns the run's mission.json when a person changed it
// after planning, validated again; nil when it is unchanged or gone.
func editedMission(runDir string, stored json.RawMessage) (*plan.Plan, error) {
	path := filepath.Join(runDir, "mission.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := plan.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	old, err := plan.Parse(stored)
	if err == nil && string(old.JSON()) == string(p.JSON()) {
		return nil, nil
	}
	return p, nil
}

// checkServers starts and stops the required MCP servers the phases will
// use, so that a harness run that cannot have them fails before the
// planner's first request rather than in every phase attempt.
func (s *Supervisor) checkServers(ctx context.Context, workspace string, o Options, f config.File, configured []mcp.Server) error {
	var required []mcp.Server
	for _, srv := range mcp.Used(configured, o.Tools, o.DenyTools) {
		if srv.Required {
			required = append(required, srv)
		}
	}
	if len(required) == 0 {
		return nil
	}
	confine, err := runner.ServerSandbox(s.cfg.Home, workspace, o.Sandbox, f)
	if err != nil {
		return err
	}
	servers, err := mcp.Start(ctx, required, mcp.Options{Getenv: s.Getenv, Dir: workspace, Version: "agent/" + s.cfg.Version, Confine: confine})
	if unknown := servers.Unknown(o.Tools, o.DenyTools); err == nil && unknown != nil {
		err = unknown // a misspelt tool of theirs, before the planner's first request
	}
	servers.Close()
	return err
}
