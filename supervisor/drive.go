package supervisor

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"agent/adapter"
	"agent/checkpoint"
	"agent/event"
	"agent/mcp"
	"agent/plan"
	"agent/runner"
	"agent/store"
)

// Drive says how to drive a run.
type Drive struct {
	// Options are the run's, as Prepare resolved them; for a resume, the
	// stored ones with what the user changed.
	Options Options
	// Resume continues the run from its stored state: after a crash, an
	// interrupt, or a failure.
	Resume bool
	// ResendUnknown first sends again the side effects whose outcome was
	// lost (resume --resend-unknown).
	ResendUnknown bool
	// Child drives a single run in an `agent runner` child rather than in
	// this process. A harness runs its phases in children either way.
	Child bool
	// Sink persists and shows the run's events; nil uses the run's own
	// journal, showing each event with Show.
	Sink Sink
	Show func(event.Event)

	// Harness runs only.
	Plan     *plan.Plan // adopt this plan rather than ask a planner (--plan-file)
	PlanOnly bool       // stop once the run has a plan (--plan)
	// Confirm is asked before a new plan runs; nil runs it.
	Confirm func(missionPath string) bool

	// Ask asks a person inline when the run waits for one, while the
	// other channels stay open; nil parks the run on each wait instead
	// (docs/PROTOCOL.md#waits). Only a run driven in this process asks.
	Ask Asker
}

// End is how a run ended: its terminal event, as persisted.
type End struct {
	Type string
	Data event.RunFinishedData
}

// Drive drives a run whose lease this supervisor holds, from run.started
// to its terminal event, then gives the lease up. ctx's cause says why it
// was stopped early (Interrupt, Cancel, Timeout). Drive returns an error
// only when the terminal event could not be persisted: the lease is then
// kept, to expire, so that the run is reclaimed rather than lost. A run
// that parked or ended is then told to config.toml's [[notify]] channels
// (notify.go).
func (s *Supervisor) Drive(ctx context.Context, r *store.Run, d Drive) (End, error) {
	end, err := s.driveToEnd(ctx, r, d)
	if err == nil {
		s.notifyEnd(context.WithoutCancel(ctx), r, end)
	}
	return end, err
}

// driveToEnd is Drive up to its end: persisted, the lease given up, and
// the run's journal closed.
func (s *Supervisor) driveToEnd(ctx context.Context, r *store.Run, d Drive) (End, error) {
	began := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if t := time.Duration(d.Options.Timeout); t > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, t, Timeout(t))
		defer stop()
	}
	persist := context.WithoutCancel(ctx)
	halt := sync.OnceFunc(s.keepLease(ctx, cancel, r.ID))
	defer halt()
	sink := d.Sink
	if sink == nil {
		js, err := s.openJournal(persist, r, d.Show)
		if err != nil {
			halt()
			_ = s.Release(persist, r.ID)
			return End{}, err
		}
		defer js.close(persist) //nolint:errcheck // the terminal event wrote everything before it
		sink = js
	}
	sink, trace := s.traced(r, sink)
	defer s.export(trace)

	watched := &watchedSink{Sink: sink}
	out := s.drive(ctx, r, d, watched)
	if err := watched.failure(); err != nil && (out.Report == nil || out.Report.Status != event.StatusCompleted) {
		// The loop stopped on it, and only knew that an emit failed.
		out.Report, out.Err = nil, err
	}
	if out.Report != nil && out.Report.Status == event.StatusWaiting && out.Cause == nil {
		return s.park(persist, r, out.Report, began, halt)
	}
	out.Schema = d.Options.outputSchema()
	typ, fin := Ending(out)
	if fin.Reason == event.ReasonRateLimited && r.Kind == store.KindRun && s.sleepRateLimited(persist, r.ID, sink, fin) {
		return s.park(persist, r, out.Report, began, halt)
	}
	if fin.Reason == event.ReasonEnvironment {
		fin.Detail += fmt.Sprintf("; once this is fixed, 'agent resume %s' continues the run", r.ID)
	}
	if out.Report == nil || r.Kind == store.KindHarness {
		// The loop never said, or a harness's phases each did: the
		// store has counted them all.
		fin.Turns, fin.Usage = s.totals(persist, r.ID)
	}
	if p := d.Options.Price; p != nil {
		fin.Usage.CostUSD = p.Cost(fin.Usage)
	}
	fin.DurationMS = time.Since(began).Milliseconds()
	// Nothing carries out what the run left pending any more.
	if _, err := s.db.MarkPendingUnknown(persist, r.ID, ""); err != nil {
		s.log.Error("settle pending intents", "run_id", r.ID, "err", err)
	}
	if err := sink.Emit(persist, event.New(typ, fin)); err != nil {
		return End{Type: typ, Data: fin}, fmt.Errorf("run %s stopped and its end could not be recorded; once this is fixed, 'agent resume %s' continues it: %w", r.ID, r.ID, err)
	}
	halt()
	if err := s.Release(persist, r.ID); err != nil {
		s.log.Error("release lease", "run_id", r.ID, "err", err)
	}
	return End{Type: typ, Data: fin}, nil
}

// park ends a drive whose run waits: its last event is the run.waiting
// the loop recorded; the lease is given up and nothing else is written.
func (s *Supervisor) park(ctx context.Context, r *store.Run, report *event.RunnerResultData, began time.Time, halt func()) (End, error) {
	fin := event.RunFinishedData{Status: event.StatusWaiting, Reason: event.ReasonWaiting, ExitCode: exitCode(event.ReasonWaiting),
		DurationMS: time.Since(began).Milliseconds()}
	if report != nil {
		fin.Result = report.Output
	}
	fin.Turns, fin.Usage = s.totals(ctx, r.ID)
	fin.Detail = "waiting"
	if ws, err := s.db.Waits(ctx, r.ID); err == nil {
		for _, w := range ws {
			if w.Resolution == nil {
				fin.Detail = fmt.Sprintf("waiting for %s until %s: %s", describeWait(w.Waiting), w.Waiting.Until, HowToAnswer(r.ID, w.Waiting))
			}
		}
	}
	halt()
	if err := s.Release(ctx, r.ID); err != nil {
		s.log.Error("release lease", "run_id", r.ID, "err", err)
	}
	return End{Type: event.RunWaiting, Data: fin}, nil
}

// drive records run.started, settles what a previous process left, and
// runs the loop or the harness.
func (s *Supervisor) drive(ctx context.Context, r *store.Run, d Drive, sink Sink) Outcome {
	persist := context.WithoutCancel(ctx)
	o := d.Options
	if err := sink.Emit(persist, event.New(event.RunStarted, event.RunStartedData{
		Prompt: r.Prompt, Model: o.Model, Workspace: r.Workspace, Tools: o.Tools,
		Resumed: d.Resume, Until: o.Until, MaxIterations: o.MaxIterations,
		Sandbox: string(o.sandboxMode()), Network: o.network(), MCPServers: mcp.ServersOf(o.Tools),
		OutputSchema: len(o.OutputSchema) > 0,
		ParentRunID:  r.ParentRunID, Task: r.Description,
	})); err != nil {
		return failed(ctx, err)
	}
	if d.Resume {
		// What this resume changed (a new budget, a model, images to
		// attach) holds for the next one too.
		if err := s.db.PutImages(persist, o.Images); err != nil {
			return failed(ctx, err)
		}
		if err := s.db.SetRunConfig(persist, r.ID, o.encode()); err != nil {
			return failed(ctx, err)
		}
		if err := s.settle(persist, r, sink, d.ResendUnknown); err != nil {
			return failed(ctx, err)
		}
		if err := s.resolveOwnWaits(persist, r.ID, sink); err != nil {
			return failed(ctx, err)
		}
		if err := s.settleGoneQuestions(persist, r.ID, sink); err != nil {
			return failed(ctx, err)
		}
	}
	switch {
	case r.Kind == store.KindHarness:
		return s.driveHarness(ctx, r, d, sink)
	case d.Child:
		return s.driveChild(ctx, r, d, sink)
	}
	return s.driveHere(ctx, r, d, sink)
}

// driveHere runs a single run's loop in this process.
func (s *Supervisor) driveHere(ctx context.Context, r *store.Run, d Drive, sink Sink) Outcome {
	spec, err := s.loopSpec(ctx, r, d)
	if err != nil {
		return failed(ctx, err)
	}
	report, err := runner.Execute(ctx, spec, runner.Env{
		Sink: sink, Outbox: &storeOutbox{db: s.db, runID: r.ID, owner: s.cfg.Owner, sink: sink}, APIKey: s.apiKey, Home: s.cfg.Home,
		Getenv: s.Getenv, Environ: s.cfg.Env, UserAgent: "agent/" + s.cfg.Version, Waiter: s.waiter(r.ID, d),
		Tasks: &subagents{s: s, parent: r, opts: d.Options, sink: sink, ask: s.waiter(r.ID, d)},
		Hold:  s.hold(r.ID),
	})
	if err != nil {
		return failed(ctx, err)
	}
	return Outcome{Report: &report, Cause: cause(ctx)}
}

// driveChild runs a single run's loop in an `agent runner` child, whose
// events this process persists and whose intents it answers.
func (s *Supervisor) driveChild(ctx context.Context, r *store.Run, d Drive, sink Sink) Outcome {
	persist := context.WithoutCancel(ctx)
	spec, err := s.loopSpec(ctx, r, d)
	if err != nil {
		return failed(ctx, err)
	}
	spec.Hold = true
	cfg := adapter.Config{
		Exe: s.cfg.Exe, Env: s.cfg.Env, Grace: s.cfg.KillGrace, HeartbeatTimeout: s.cfg.HeartbeatTimeout,
		Timeout: backstop(time.Duration(d.Options.Timeout)),
		OnEvent: func(e event.Event) error { return sink.Emit(persist, e) },
		OnIntent: func(in event.EffectIntentData) adapter.Control {
			return s.intent(persist, store.IntentReceipt(r.ID, "", 0, in))
		},
		OnTask: (&subagents{s: s, parent: r, opts: d.Options, sink: sink}).Delegate,
		OnHold: func(ctx context.Context, waitID string) (event.WaitResolvedData, error) {
			return s.holdFor(ctx, r.ID, waitID)
		},
	}
	if s.cfg.LogDir != "" {
		cfg.LogPath = filepath.Join(s.cfg.LogDir, r.ID+".log")
	}
	cfg.Blobs = s.blobs()
	res, err := adapter.Run(ctx, cfg, spec)
	switch {
	case res == nil:
		return failed(ctx, err)
	case err != nil:
		return failed(ctx, fmt.Errorf("the run's events could not be persisted: %w", err))
	case res.Report == nil:
		reason := event.ReasonCrashed
		if res.Status == event.StatusTimeout {
			reason = event.ReasonTimeout
		}
		return failed(ctx, &childError{reason: reason, detail: res.Reason})
	}
	return Outcome{Report: res.Report, Cause: cause(ctx)}
}

// blobs is where children leave the data of events too large for a line:
// the blob store under AGENT_HOME, which they share with this process.
func (s *Supervisor) blobs() adapter.BlobReader {
	if s.cfg.Home == "" {
		return nil
	}
	return checkpoint.BlobsIn(s.cfg.Home)
}

// backstop bounds a child beyond the run's own timeout, which the run's
// context enforces; a run without one is not cut short.
func backstop(timeout time.Duration) time.Duration {
	if timeout > 0 {
		return timeout + time.Minute
	}
	return 100 * 365 * 24 * time.Hour
}

// loopSpec is the spec of a single run's loop: where the run stands, as
// the store has it, so that a resume (here, in a child, or after a
// gateway reclaim) continues exactly where the run stopped.
func (s *Supervisor) loopSpec(ctx context.Context, r *store.Run, d Drive) (adapter.PhaseSpec, error) {
	o := d.Options
	spec := adapter.PhaseSpec{
		RunID: r.ID, SessionID: r.SessionID, Workspace: r.Workspace, Mode: adapter.ModeRun, Model: o.model(),
		Prompt: r.Prompt, Tools: o.Tools, Deny: o.DenyTools, MCPConfig: o.MCPConfig, Settings: o.Settings,
		Sandbox: string(o.sandboxMode()), Network: o.Network,
		ContextWindow: o.ContextWindow, NoCompact: o.Compact == "off", CompactPrior: o.Compact == "now",
		MaxTokens: o.MaxTokens, MaxCost: o.MaxCost, Price: o.Price,
		MaxTurns: o.MaxTurns, MaxRepeats: o.MaxRepeats, Until: o.Until, MaxIterations: o.MaxIterations,
		OutputSchema: o.OutputSchema,
		Vision:       o.sees(),
		MaxSubagents: o.maxSubagents(), ParentRunID: r.ParentRunID,
	}
	if r.ParentRunID != "" {
		// A cassette keeps a sub-run's exchanges apart from its parent's.
		spec.Model.Scope = "task/" + r.ParentCall
	}
	var err error
	if spec.Images, err = s.db.Images(ctx, o.Images); err != nil {
		return spec, err
	}
	if r.SessionID != "" {
		if spec.Prior, err = s.db.SessionPrior(ctx, r.SessionID, r.ID); err != nil {
			return spec, err
		}
	}
	if !d.Resume {
		return spec, s.waitSpec(ctx, r.ID, o, &spec)
	}
	if err := s.expireWaits(ctx, r.ID); err != nil {
		return spec, err
	}
	if err := s.waitSpec(ctx, r.ID, o, &spec); err != nil {
		return spec, err
	}
	if spec.History, err = s.db.Conversation(ctx, r.ID); err != nil {
		return spec, err
	}
	if spec.Hooked, err = s.db.HookRecords(ctx, r.ID); err != nil {
		return spec, err
	}
	calls, err := s.db.ToolCalls(ctx, r.ID)
	if err != nil {
		return spec, err
	}
	for _, c := range calls {
		if c.Status == event.StatusStarted {
			spec.Started = append(spec.Started, c.CallID)
		}
	}
	cps, err := s.db.Checkpoints(ctx, r.ID)
	if err != nil {
		return spec, err
	}
	for _, cp := range cps {
		spec.Checkpointed = append(spec.Checkpointed, cp.Path)
	}
	receipts, err := s.db.Receipts(ctx, r.ID, "")
	if err != nil {
		return spec, err
	}
	for _, rc := range receipts {
		if rc.State == event.StatusDone {
			spec.Receipts = append(spec.Receipts, event.ReceiptData{Type: rc.Type, Key: rc.Key, Details: rc.Details})
		}
	}
	spec.Iteration, spec.Turns, spec.Usage = r.IterationCount, r.Turns, r.Usage
	// A run that ran out of its budget continues with a fresh one, as a
	// harness phase does; one whose answer failed its output schema gets
	// its two fixes again.
	spec.Continue = r.Status == event.StatusFailed &&
		(r.Reason == event.ReasonMaxTurns || r.Reason == event.ReasonMaxIterations || r.Reason == event.ReasonSchema)
	return spec, nil
}

// totals are the turns and tokens the store has counted for a run.
func (s *Supervisor) totals(ctx context.Context, runID string) (int, event.Usage) {
	r, err := s.db.GetRun(ctx, runID)
	if err != nil {
		return 0, event.Usage{}
	}
	return r.Turns, r.Usage
}

// failed is the outcome of a run that stopped on err.
func failed(ctx context.Context, err error) Outcome {
	return Outcome{Err: err, Cause: cause(ctx)}
}

// cause is why ctx ended, or nil while it has not.
func cause(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}
