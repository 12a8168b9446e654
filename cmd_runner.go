package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"agent/adapter"
	"agent/checkpoint"
	"agent/config"
	"agent/event"
	"agent/llm"
	"agent/runner"
	"agent/tools"
)

// runnerCommand is the per-phase child (DESIGN.md §6): PhaseSpec on
// stdin, events on stdout, logs on stderr. It never opens the database.
func runnerCommand() *cli.Command {
	return &cli.Command{
		Name:   "runner",
		Usage:  "run one phase attempt for a parent process (internal)",
		Hidden: true,
		Action: runnerAction,
	}
}

// childSink writes events to the parent. It fills in the envelope from
// the spec; the parent assigns seq.
type childSink struct {
	enc     *event.Encoder
	spec    adapter.PhaseSpec
	intents *adapter.Intents
}

func (s *childSink) Emit(ctx context.Context, e event.Event) error {
	e.RunID, e.SessionID, e.PhaseID, e.Attempt = s.spec.RunID, s.spec.SessionID, s.spec.PhaseID, s.spec.Attempt
	if err := s.enc.Encode(e); err != nil {
		return fmt.Errorf("write to the parent: %w", err)
	}
	if e.Type == event.ToolStarted || e.Type == event.CheckpointCreated {
		return s.sync(ctx)
	}
	return nil
}

// sync waits until the parent has persisted everything sent so far: a
// tool call is on record before it runs, a checkpoint before the file
// changes, even if the parent dies the next moment (DESIGN.md §7).
func (s *childSink) sync(ctx context.Context) error {
	id := uuid.NewString()
	if err := s.enc.Encode(event.New(event.Sync, event.SyncData{ID: id})); err != nil {
		return fmt.Errorf("write to the parent: %w", err)
	}
	ack, err := s.intents.Wait(ctx, id)
	if err != nil {
		return fmt.Errorf("the parent did not confirm: %w", err)
	}
	if !ack.Proceed {
		return fmt.Errorf("the parent refused to go on: %s", ack.Reason)
	}
	return nil
}

func runnerAction(c *cli.Context) error {
	in := bufio.NewReader(c.App.Reader)
	spec, err := adapter.ReadSpec(in)
	if err != nil {
		return usageErrorf("%v", err)
	}
	ctx, cancel := context.WithCancelCause(c.Context)
	defer cancel(nil)
	intents := &adapter.Intents{}
	go adapter.WatchControls(in, intents.Ack, func(err error) { //nolint:errcheck // its end is reported through onStop
		intents.Stop(err)
		cancel(err)
	})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
			cancel(adapter.ErrCancelled)
		case <-ctx.Done():
		}
	}()

	sink := &childSink{enc: event.NewEncoder(c.App.Writer), spec: spec, intents: intents}
	stopBeat := heartbeat(ctx, sink, time.Duration(spec.HeartbeatMS)*time.Millisecond)
	defer stopBeat()

	ws, err := tools.NewWorkspace(spec.Workspace)
	if err != nil {
		return usageErrorf("phase spec: workspace: %v", err)
	}
	cfg := runner.Config{
		ModelName: spec.Model.Name, Sink: sink, MaxTurns: spec.MaxTurns,
		Until: spec.Until, MaxIterations: spec.MaxIterations, ContextBudget: spec.ContextBudget,
	}
	var planner *tools.SubmitPlan
	allow := spec.Tools
	var extra []tools.Tool
	switch spec.Mode {
	case adapter.ModePlan:
		planner = tools.NewSubmitPlan()
		extra = []tools.Tool{planner}
		cfg.RequireTool = tools.SubmitPlanName
		if len(allow) == 0 {
			allow = []string{"read_file", "list_files", "grep", tools.SubmitPlanName}
		}
	case adapter.ModePhase:
		extra = tools.RecordTools()
		if len(allow) > 0 {
			allow = append(allow, "record_learning", "record_failed_approach")
		}
	}
	var deny []string
	if spec.Mode != adapter.ModePlan {
		outbox := &childOutbox{sink: sink, intents: intents, done: spec.Receipts}
		extra = append(extra, tools.EffectTools(tools.EffectScope{RunID: spec.RunID, PhaseID: spec.PhaseID}, outbox, nil)...)
		deny = tools.WithoutUnconfigured(allow, nil, nil)
	}
	if cfg.Tools, err = tools.NewSet(ws, tools.Options{Allow: allow, Deny: deny}, extra...); err != nil {
		return usageErrorf("phase spec: tools: %v", err)
	}
	instructions, warn := readInstructions(ws.Root())
	if warn != "" {
		_ = sink.Emit(ctx, event.New(event.Warning, event.WarningData{Message: warn}))
	}
	cfg.Instructions = joinNonEmpty(instructions, spec.System)
	// The child never opens the database, but it saves checkpointed files
	// to the blob store itself: the parent only records the events.
	if home, err := config.Home(); err == nil {
		cfg.Checkpoints = checkpoint.BlobsIn(home)
	} else {
		_ = sink.Emit(ctx, event.New(event.Warning, event.WarningData{Message: "file checkpoints are off: " + err.Error()}))
	}
	model, closeModel, err := openModel(spec.Model, os.Getenv("OPENAI_API_KEY"), sink)
	if err != nil {
		return err
	}
	defer closeModel()
	cfg.Model = model

	state := runner.State{
		Prior: spec.Prior, History: spec.History, Started: spec.Started, Iteration: spec.Iteration, Turns: spec.Turns,
		Usage:        llm.Usage{PromptTokens: spec.Usage.PromptTokens, CompletionTokens: spec.Usage.CompletionTokens},
		Checkpointed: spec.Checkpointed,
	}
	res, runErr := runner.Run(ctx, cfg, spec.Prompt, state)
	if errors.Is(context.Cause(ctx), adapter.ErrParentGone) {
		return &exitError{code: 130, msg: "parent gone; stopped"}
	}
	out := event.RunnerResultData{
		Status: res.Status, Output: res.Text, Reason: res.Reason, Turns: res.Turns,
		Usage: event.Usage{PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens},
	}
	code := 0
	var provider *llm.Error
	switch {
	case runErr != nil && ctx.Err() != nil:
		out.Status, out.Reason, code = "cancelled", context.Cause(ctx).Error(), 130
	case errors.As(runErr, &provider):
		out.Status, out.Reason, code = runner.StatusFailed, provider.Error(), 3
	case runErr != nil:
		out.Status, out.Reason, code = runner.StatusFailed, runErr.Error(), 1
	case planner != nil && res.Status == runner.StatusCompleted:
		if p := planner.Plan(); p != nil {
			out.Output = string(p.JSON())
		} else {
			out.Status, out.Reason = runner.StatusFailed, "the planner finished without an accepted plan"
		}
	}
	if err := sink.Emit(context.WithoutCancel(ctx), event.New(event.RunnerResult, out)); err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code: code, msg: out.Reason}
	}
	return nil
}

// heartbeat tells the parent the child is alive while the model or a
// tool is busy.
func heartbeat(ctx context.Context, sink *childSink, every time.Duration) func() {
	if every <= 0 {
		every = 5 * time.Second
	}
	return repeat(ctx, every, func() bool {
		_ = sink.Emit(ctx, event.New(event.Heartbeat, nil))
		return true
	})
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
