package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"agent/adapter"
	"agent/approval"
	"agent/checkpoint"
	"agent/config"
	"agent/event"
	"agent/hooks"
	"agent/llm"
	"agent/mcp"
	"agent/prompts"
	"agent/sandbox"
	"agent/schema"
	"agent/skills"
	"agent/tools"
)

// Env is what a loop needs besides its spec.
type Env struct {
	Sink Sink
	// Outbox records side-effect intents before the effect starts; nil
	// refuses side effects.
	Outbox tools.Outbox
	APIKey string
	// Home is AGENT_HOME: file checkpoints keep their blobs there. Empty
	// turns checkpoints off, with a warning.
	Home string
	// Getenv configures the side-effecting tools; nil means os.Getenv.
	Getenv func(string) string
	// Environ is the environment the model's commands start from, before
	// the sandbox takes the secrets out; nil means os.Environ().
	Environ   []string
	UserAgent string
	// Waiter waits for a person or a time in this process; nil parks the
	// run on each wait (docs/PROTOCOL.md#waits). Hold waits in this
	// process for an answer through the other channels, for a question
	// that cannot park (Config.Hold); nil declines such questions.
	Waiter Waiter
	// Tasks runs the sub-runs of task calls where the store is kept
	// (docs/PROTOCOL.md#subagents); nil offers no task tool.
	Tasks Delegator
	Hold  Waiter
}

// SpecError is a spec that cannot run: unreadable, tools that do not
// exist, a model that cannot be opened. Nothing ran.
type SpecError struct{ Err error }

func (e *SpecError) Error() string { return e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

// Execute runs the loop spec describes until it ends or ctx does, and
// reports how it ended as runner.result carries it. A loop stopped by ctx
// is reported cancelled. The error is a *SpecError when nothing ran.
func Execute(ctx context.Context, spec adapter.PhaseSpec, env Env) (event.RunnerResultData, error) {
	ws, err := tools.NewWorkspace(spec.Workspace, config.Private(env.Home)...)
	if err != nil {
		return event.RunnerResultData{}, &SpecError{Err: fmt.Errorf("phase spec: workspace: %w", err)}
	}
	emitWarning := func(msg string) {
		_ = env.Sink.Emit(ctx, event.New(event.Warning, event.WarningData{Message: msg}))
	}
	cfg := Config{
		ModelName: spec.Model.Name, Sink: env.Sink, MaxTurns: spec.MaxTurns, MaxRepeats: spec.MaxRepeats,
		Until: spec.Until, MaxIterations: spec.MaxIterations, ContextBudget: spec.ContextBudget,
		Compact: !spec.NoCompact, CompactPrior: spec.CompactPrior, ContextWindow: spec.ContextWindow,
		MaxTokens: spec.MaxTokens, MaxCost: spec.MaxCost, Price: spec.Price,
		Vision: spec.Vision, Images: spec.Images,
		MaxSubagents: spec.MaxSubagents,
	}
	if cfg.ContextWindow == 0 {
		cfg.ContextWindow = llm.KnownContextWindow(spec.Model.Name)
	}
	if err := waitConfig(&cfg, spec, env); err != nil {
		return event.RunnerResultData{}, &SpecError{Err: fmt.Errorf("phase spec: %w", err)}
	}
	if len(spec.OutputSchema) > 0 {
		if cfg.Schema, err = schema.Parse(spec.OutputSchema); err != nil {
			return event.RunnerResultData{}, &SpecError{Err: fmt.Errorf("phase spec: output_schema: %w", err)}
		}
	}
	if cfg.Hooks, err = hooks.Configured(env.Home, spec.Settings); err != nil {
		return event.RunnerResultData{}, &SpecError{Err: fmt.Errorf("phase spec: hooks: %w", err)}
	}
	for _, w := range cfg.Hooks.Ignored {
		emitWarning(w)
	}
	cfg.HookEnv = hooks.Env{Dir: ws.Root(), Environ: env.Environ}
	cfg.Hooked, cfg.RunID, cfg.SessionID, cfg.ParentRunID = spec.Hooked, spec.RunID, spec.SessionID, spec.ParentRunID
	cfg.AgentPrompt = spec.Mode == adapter.ModePhase
	// MCP servers start, and the sandbox is made, before the first model
	// request, so a run that cannot have them fails at once (exit 5). The
	// planner gets neither: it runs no command.
	var servers *mcp.Servers
	var box *sandbox.Sandbox
	if spec.Mode != adapter.ModePlan {
		f, configured, err := mcp.Configured(env.Home, spec.MCPConfig)
		if err != nil {
			return event.RunnerResultData{}, &SpecError{Err: fmt.Errorf("phase spec: %w", err)}
		}
		cfg.ResponseFormat = llm.SendsResponseFormat(spec.Model.BaseURL, f.StructuredOutputs)
		environ := env.Environ
		if environ == nil {
			environ = os.Environ()
		}
		box, err = NewSandbox(env.Home, ws.Root(), spec.Sandbox, spec.Network, environ, f, configured)
		var unsupported *sandbox.UnsupportedError
		switch {
		case errors.As(err, &unsupported):
			return event.RunnerResultData{Status: event.StatusFailed, Reason: event.ReasonEnvironment, Detail: err.Error()}, nil
		case err != nil:
			return event.RunnerResultData{}, &SpecError{Err: fmt.Errorf("phase spec: sandbox: %w", err)}
		}
		defer box.Close()
		confine, err := ServerSandbox(env.Home, ws.Root(), spec.Sandbox, f)
		if err != nil {
			return event.RunnerResultData{}, &SpecError{Err: fmt.Errorf("phase spec: sandbox: %w", err)}
		}
		var failed *event.RunnerResultData
		if servers, failed = startServers(ctx, ws, spec, env, configured, confine, emitWarning); failed != nil {
			return *failed, nil
		}
		defer servers.Close()
	}
	var catalog *skills.Catalog
	if spec.Mode != adapter.ModePlan {
		var warnings []string
		catalog, warnings = skills.Find(ws, env.Home)
		defer catalog.Close()
		for _, w := range warnings {
			emitWarning(w)
		}
	}
	set, planner, err := toolSet(ws, spec, env, servers, box, catalog)
	if err != nil {
		return event.RunnerResultData{}, &SpecError{Err: fmt.Errorf("phase spec: tools: %w", err)}
	}
	cfg.Tools = set
	if slices.Contains(set.Names(), skills.ToolName) {
		for _, s := range catalog.Skills() {
			cfg.Skills = append(cfg.Skills, prompts.Skill{Name: s.Name, Description: s.Description})
		}
	}
	if slices.Contains(set.Names(), tools.TaskName) {
		cfg.Tasks = env.Tasks
	}
	if servers != nil {
		cfg.Refresh = func(ctx context.Context) (*tools.Set, error) {
			if !servers.Refresh(ctx) {
				return nil, nil
			}
			set, _, err := toolSet(ws, spec, env, servers, box, catalog)
			return set, err
		}
	}
	if planner != nil {
		cfg.RequireTool = tools.SubmitPlanName
	}
	instructions, warning := Instructions(ws.Root())
	if warning != "" {
		emitWarning(warning)
	}
	cfg.Instructions = joinNonEmpty(instructions, spec.System)
	if env.Home != "" {
		cfg.Checkpoints = checkpoint.BlobsIn(env.Home)
	} else {
		emitWarning("file checkpoints are off: no data directory (AGENT_HOME)")
	}
	model, closeModel, err := llm.Open(llm.Setup{
		BaseURL: spec.Model.BaseURL, APIKey: env.APIKey, MaxAttempts: spec.Model.MaxAttempts,
		Record: spec.Model.Record, Replay: spec.Model.Replay, Scope: spec.Model.Scope, UserAgent: env.UserAgent,
		IdleTimeout: time.Duration(spec.Model.IdleTimeoutMS) * time.Millisecond,
		CallTimeout: time.Duration(spec.Model.CallTimeoutMS) * time.Millisecond,
		OnRetry: func(ri llm.RetryInfo) {
			_ = env.Sink.Emit(context.WithoutCancel(ctx), event.New(event.Retry, event.RetryData{
				Attempt: ri.Attempt, MaxAttempts: ri.MaxAttempts, DelayMS: ri.Delay.Milliseconds(),
				Error: ri.Err.Error(), Status: ri.Status,
			}))
		},
	})
	if err != nil {
		return event.RunnerResultData{}, &SpecError{Err: fmt.Errorf("phase spec: model: %w", err)}
	}
	defer closeModel()
	cfg.Model = model

	state := State{
		Prior: spec.Prior, History: spec.History, Started: spec.Started, Iteration: spec.Iteration, Turns: spec.Turns,
		Usage:        llm.Usage{PromptTokens: spec.Usage.PromptTokens, CompletionTokens: spec.Usage.CompletionTokens},
		Checkpointed: spec.Checkpointed, Continue: spec.Continue,
	}
	res, runErr := Run(ctx, cfg, spec.Prompt, state)
	out := Report(res, runErr)
	switch {
	case runErr != nil && ctx.Err() != nil:
		out.Status, out.Reason, out.Detail = event.StatusCancelled, event.ReasonInterrupted, context.Cause(ctx).Error()
	case planner != nil && planner.Rejected():
		// Its plans were invalid, as a plan file can be: the last one's
		// error names the field (exit 2).
		out.Reason = event.ReasonInvalidPlan
	case planner != nil && out.Status == event.StatusCompleted:
		if p := planner.Plan(); p != nil {
			out.Output = string(p.JSON())
		} else {
			out.Status, out.Reason, out.Detail = event.StatusFailed, event.ReasonInvalidPlan, "the planner finished without an accepted plan"
		}
	}
	return out, nil
}

// toolSet is the tools of a spec's mode: the planner reads and submits a
// plan; a phase can also record learnings and failed approaches; phases
// and single runs have the side-effecting tools, guarded by the outbox.
func toolSet(ws *tools.Workspace, spec adapter.PhaseSpec, env Env, servers *mcp.Servers, box *sandbox.Sandbox, catalog *skills.Catalog) (*tools.Set, *tools.SubmitPlan, error) {
	allow := spec.Tools
	var extra []tools.Tool
	var planner *tools.SubmitPlan
	switch spec.Mode {
	case adapter.ModePlan:
		planner = tools.NewSubmitPlan()
		extra = []tools.Tool{planner}
		if len(allow) == 0 {
			allow = []string{"read_file", "list_files", "grep", tools.SubmitPlanName}
		}
		// It may interview the person before it plans; it waits for
		// nothing else.
		if spec.AskHuman {
			extra = append(extra, tools.AskHumanTool())
			allow = withTools(allow, tools.AskHumanName)
		}
		set, err := tools.NewSet(ws, tools.Options{Allow: allow}, extra...)
		return set, planner, err
	case adapter.ModePhase:
		extra = tools.RecordTools()
		if len(allow) > 0 {
			allow = append(allow[:len(allow):len(allow)], "record_learning", "record_failed_approach")
		}
	}
	// A single run's effects are keyed by the run alone; a phase's by
	// its phase too (tools.EffectScope).
	scope := tools.EffectScope{RunID: spec.RunID}
	if spec.Mode == adapter.ModePhase {
		scope.PhaseID = spec.PhaseID
	}
	if spec.AskHuman {
		extra = append(extra, tools.AskHumanTool())
		allow = withTools(allow, tools.AskHumanName)
	}
	if spec.WaitTools {
		extra = append(extra, tools.WaitTools()...)
		allow = withTools(allow, tools.WaitUntilName, tools.WaitForSignalName)
	}
	extra = append(extra, tools.EffectTools(scope, env.Outbox, env.Getenv)...)
	extra = append(extra, servers.Tools(scope, env.Outbox)...)
	if catalog != nil && len(catalog.Skills()) > 0 {
		extra = append(extra, catalog.Tool())
	}
	if rt := servers.ResourceTools(); len(rt) > 0 {
		extra = append(extra, rt...)
		allow = withTools(allow, mcp.ResourcesName, mcp.ReadResourceName)
	}
	deny := tools.WithoutUnconfigured(allow, spec.Deny, env.Getenv)
	// A sub-run never has the task tool, nor a loop nobody runs sub-runs
	// for (docs/PROTOCOL.md#subagents).
	extra = append(extra, tools.TaskTool())
	if env.Tasks == nil || spec.MaxSubagents <= 0 || spec.ParentRunID != "" {
		deny = append(deny[:len(deny):len(deny)], tools.TaskName)
	}
	set, err := tools.NewSet(ws, tools.Options{Allow: allow, Deny: deny, Match: mcp.Matches, Open: MayBeAbsent, Gone: servers.Gone, Sandbox: box}, extra...)
	return set, nil, err
}

// MayBeAbsent reports the allow and deny entries that may name no tool of
// a run without being a mistake: an MCP server's tools (checked once it
// has started) and its resource tools (offered when one has resources),
// and the skill tool (offered only where there are skills).
func MayBeAbsent(entry string) bool { return mcp.Open(entry) || entry == skills.ToolName }

// startServers starts the configured MCP servers the spec's tools use. A
// required server that does not start ends the run before it begins, with
// reason environment (exit 5): failed says so.
func startServers(ctx context.Context, ws *tools.Workspace, spec adapter.PhaseSpec, env Env, configured []mcp.Server,
	confine func(bool) (*sandbox.Sandbox, error), warn func(string)) (*mcp.Servers, *event.RunnerResultData) {
	used := mcp.Used(configured, spec.Tools, spec.Deny)
	if len(used) == 0 {
		return nil, nil
	}
	servers, err := mcp.Start(ctx, used, mcp.Options{Getenv: env.Getenv, Dir: ws.Root(), Version: env.UserAgent, Warn: warn, Confine: confine})
	if err != nil {
		return nil, &event.RunnerResultData{Status: event.StatusFailed, Reason: event.ReasonEnvironment, Detail: err.Error()}
	}
	// Once the servers have listed their tools, a misspelt one is refused
	// as a misspelt builtin is, before the first model request.
	if unknown := servers.Unknown(spec.Tools, spec.Deny); unknown != nil {
		servers.Close()
		return nil, &event.RunnerResultData{Status: event.StatusFailed, Reason: event.ReasonInvalidOptions, Detail: unknown.Error()}
	}
	return servers, nil
}

// waitConfig sets the loop's waits from the spec (docs/PROTOCOL.md#waits).
func waitConfig(cfg *Config, spec adapter.PhaseSpec, env Env) error {
	rules, err := approval.Parse(spec.Ask)
	if err != nil {
		return err
	}
	cfg.Approvals, cfg.AskOnTimeout, cfg.Waiter, cfg.Hold = rules, spec.AskOnTimeout, env.Waiter, env.Hold
	cfg.AskHuman = spec.AskHuman
	cfg.AskTimeout = time.Duration(spec.AskTimeoutMS) * time.Millisecond
	cfg.MaxWait = time.Duration(spec.MaxWaitMS) * time.Millisecond
	cfg.Waits = map[string]adapter.Wait{}
	for _, w := range spec.Waits {
		cfg.Waits[w.Waiting.WaitID] = w
	}
	switch {
	case spec.Mode == adapter.ModePhase:
		cfg.WaitScope = fmt.Sprintf("%s/%d", spec.PhaseID, spec.Attempt)
	case spec.ParentRunID != "":
		// Its waits are its parent's too: their ids must not meet.
		cfg.WaitScope = spec.RunID
	}
	return nil
}

// withTools adds names to an allow list that names tools; an empty one
// offers every tool already.
func withTools(allow []string, names ...string) []string {
	if len(allow) == 0 {
		return allow
	}
	return append(allow[:len(allow):len(allow)], names...)
}

func joinNonEmpty(parts ...string) string {
	out := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		if out != "" {
			out += "\n\n"
		}
		out += p
	}
	return out
}
