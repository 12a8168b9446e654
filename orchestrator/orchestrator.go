// Package orchestrator drives a harness run: it asks a planner child for
// a plan, then runs each phase attempt in a fresh child process through
// the adapter, verifies it with evidence, retries with guardrails, and
// checkpoints every transition as an event the store projects. It never
// imports the runner: the process boundary is the interface.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"agent/adapter"
	"agent/event"
	"agent/plan"
	"agent/prompts"
	"agent/sandbox"
	"agent/store"
	"agent/tools"
)

// Sink receives the run's events: the parent's journal, which assigns
// seq, persists them with their projections, and shows them.
type Sink interface {
	Emit(ctx context.Context, e event.Event) error
}

// Store is the plan state the orchestrator reads; *store.DB satisfies it.
// Writes happen through events on the Sink, plus the two resume repairs.
type Store interface {
	PlanState(ctx context.Context, runID string) (*store.PlanState, error)
	Attempts(ctx context.Context, runID string) ([]store.Attempt, error)
	Artifacts(ctx context.Context, runID, phaseID string) ([]store.Artifact, error)
	Learnings(ctx context.Context, runID string) ([]store.Learning, error)
	Guardrails(ctx context.Context, runID, phaseID string) ([]store.Guardrail, error)
	Receipts(ctx context.Context, runID, phaseID string) ([]store.Receipt, error)
	ResetBudget(ctx context.Context, runID, phaseID string) error
	InterruptAttempts(ctx context.Context, runID string) ([]store.Attempt, error)
	Checkpoints(ctx context.Context, runID string) ([]store.Checkpoint, error)
	MarkPendingUnknown(ctx context.Context, runID, phaseID string) (int, error)
	Waits(ctx context.Context, runID string) ([]store.Wait, error)
	AttemptState(ctx context.Context, runID, phaseID string, attempt int) (store.AttemptState, error)
	LastAttempt(ctx context.Context, runID, phaseID string) (int, error)
}

// TaskFunc runs the sub-run of a task call a phase attempt's child makes.
type TaskFunc func(ctx context.Context, phaseID string, attempt int, req event.TaskRequestData) (event.TaskResultData, error)

// Spawner runs one child; adapter.Run in production, a fake in tests.
type Spawner func(ctx context.Context, cfg adapter.Config, spec adapter.PhaseSpec) (*adapter.Result, error)

// IntentFunc persists a child's side-effect intent and answers it: the
// outbox the run's supervisor keeps (docs/PROTOCOL.md#side-effects-intent-ack-outcome).
type IntentFunc func(ctx context.Context, intent store.Receipt) adapter.Control

// Defaults.
const (
	DefaultPhaseTimeout = 30 * time.Minute
	DefaultWaitPoll     = time.Second
)

// ErrParked ends a planning whose planner waits for a person or a time
// (docs/PROTOCOL.md#waits): the harness waits too, and plans on where the
// planner stopped once the wait is resolved.
var ErrParked = errors.New("the planner waits; it goes on once the wait is resolved")

// Config is what a harness run needs.
type Config struct {
	Store     Store
	Sink      Sink
	RunID     string
	SessionID string
	Workspace string // absolute workspace root
	RunDir    string // WORKSPACE/.agent/runs/RUN_ID: mission.json, progress.md, verification/, logs/

	Model     adapter.Model
	Tools     []string // tools offered to phases; empty means all
	Deny      []string // MCP tools removed from Tools' servers
	MCPConfig []string // the run's --mcp-config files
	Settings  string   // the run's --settings file: its hooks (docs/PROTOCOL.md#hooks)
	// Sandbox and Network are the phases' sandbox (README.md#the-sandbox);
	// Commands confines programmatic evidence commands in this process.
	Sandbox  string
	Network  bool
	Commands *sandbox.Sandbox
	// Context and spend (README.md#context-and-spend): each phase's window and
	// compaction, and the run's budget, which every phase's usage counts
	// against.
	ContextWindow int
	NoCompact     bool
	MaxTokens     int
	MaxCost       float64
	Price         *event.Price
	MaxTurns      int
	MaxRepeats    int
	ContextBudget int
	// Vision says the phases' model sees images (docs/PROTOCOL.md#images):
	// what read_file reads of one is given to it as an image.
	Vision bool
	// MaxSubagents is how many task calls of a reply a phase runs at once,
	// each a sub-run that Tasks runs (docs/PROTOCOL.md#subagents); nil
	// Tasks offers phases no task tool.
	MaxSubagents int
	Tasks        TaskFunc

	Parallel       int           // phases at once; default 1
	PhaseTimeout   time.Duration // default 30m
	CommandTimeout time.Duration // programmatic evidence; default evidence's

	// People in the loop (docs/PROTOCOL.md#waits): every child's approval
	// rules and wait tools (the planner gets ask_human alone of them).
	// ExpireWaits, if set, resolves the run's waits whose deadline passed,
	// before their answers are read. WaitPoll is how often, while a phase
	// waits and others run, its answer is looked for; default 1s.
	Waits       adapter.WaitOptions
	ExpireWaits func(ctx context.Context) error
	WaitPoll    time.Duration

	// Intents answers the children's side-effect intents; required.
	Intents IntentFunc
	// Blobs holds the data of children's events too large for a line.
	Blobs adapter.BlobReader
	Spawn Spawner  // default adapter.Run
	Exe   string   // the binary children run as `agent runner`; default this one
	Env   []string // the children's environment; default os.Environ()
	// HeartbeatTimeout and Grace tune the adapter; zero takes its defaults.
	HeartbeatTimeout time.Duration
	Grace            time.Duration
}

// Orchestrator runs one harness run.
type Orchestrator struct {
	cfg        Config
	ws         *tools.Workspace
	progress   sync.Mutex     // progress.md is rewritten from several phases
	background sync.WaitGroup // progress writes still in flight
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Orchestrator, error) {
	if cfg.Store == nil || cfg.Sink == nil || cfg.Intents == nil || cfg.RunID == "" || cfg.RunDir == "" {
		return nil, errors.New("orchestrator: Store, Sink, Intents, RunID and RunDir are required")
	}
	ws, err := tools.NewWorkspace(cfg.Workspace)
	if err != nil {
		return nil, err
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 1
	}
	if cfg.PhaseTimeout <= 0 {
		cfg.PhaseTimeout = DefaultPhaseTimeout
	}
	if cfg.Spawn == nil {
		cfg.Spawn = adapter.Run
	}
	if cfg.WaitPoll <= 0 {
		cfg.WaitPoll = DefaultWaitPoll
	}
	return &Orchestrator{cfg: cfg, ws: ws}, nil
}

// MissionPath is where the plan is kept for people to read and edit.
func (o *Orchestrator) MissionPath() string { return filepath.Join(o.cfg.RunDir, "mission.json") }

// PlanError means the planner did not produce a valid plan.
type PlanError struct {
	Reason string
	// Stop, if set, is why the planner could not plan (stopsTheRun): the
	// provider, a budget or a rate limit, not the planning.
	Stop        string
	ResumeAfter string
}

func (e *PlanError) Error() string { return "planning failed: " + e.Reason }

// Plan asks a planner child to decompose the request, then adopts the
// plan it submits. The child validates each submission and lets the
// model correct it twice; the parent validates again before adopting. A
// planner that waits for a person parks the planning (ErrParked); the next
// Plan goes on where it stopped. Any other planning starts afresh, as the
// planner's next attempt.
func (o *Orchestrator) Plan(ctx context.Context, request string) (*plan.Plan, error) {
	readOnly := []string{"read_file", "list_files", "grep"}
	prompt, err := prompts.Render("planner", prompts.Planner{Request: request, Tools: readOnly, AskHuman: o.cfg.Waits.AskHuman})
	if err != nil {
		return nil, err
	}
	last, err := o.cfg.Store.LastAttempt(ctx, o.cfg.RunID, event.PlannerPhaseID)
	if err != nil {
		return nil, err
	}
	spec := o.plannerSpec(max(last, 1), prompt, readOnly)
	waited, err := o.goOn(ctx, &spec, false)
	switch {
	case err != nil:
		return nil, err
	case waited == stillWaiting:
		return nil, ErrParked
	case waited == notWaiting && last > 0:
		// A new planning: an earlier one's conversation and waits are
		// not its own.
		spec = o.plannerSpec(last+1, prompt, readOnly)
	}
	res, err := o.cfg.Spawn(ctx, o.adapterConfig(ctx, event.PlannerPhaseID, spec.Attempt), spec)
	if err != nil {
		return nil, err
	}
	if res.Status == event.StatusWaiting {
		return nil, ErrParked
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if res.Status != event.StatusCompleted {
		pe := &PlanError{Reason: res.Reason, Stop: stopsTheRun(res)}
		if res.Report != nil && res.Report.Reason == event.ReasonInvalidPlan {
			// The planner's plans were invalid: the run ends as with an
			// invalid plan file, saying the last one's error.
			pe.Reason, pe.Stop = res.Report.Detail, event.ReasonInvalidPlan
		}
		if pe.Stop != "" {
			pe.ResumeAfter = res.Report.ResumeAfter
		}
		return nil, pe
	}
	p, err := plan.Parse([]byte(res.Output))
	if err != nil {
		return nil, &PlanError{Reason: err.Error()}
	}
	return p, o.Adopt(ctx, p)
}

func (o *Orchestrator) plannerSpec(attempt int, prompt string, readOnly []string) adapter.PhaseSpec {
	spec := o.spec(event.PlannerPhaseID, attempt, adapter.ModePlan, prompt)
	spec.Tools = append(readOnly[:len(readOnly):len(readOnly)], tools.SubmitPlanName)
	return spec
}

// Adopt makes p the run's plan: mission.json on disk and plan.created in
// the journal. Only allowed before any phase started.
func (o *Orchestrator) Adopt(ctx context.Context, p *plan.Plan) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if st, err := o.cfg.Store.PlanState(ctx, o.cfg.RunID); err == nil && st.Started() {
		return errors.New("the plan cannot change once a phase has started")
	}
	if err := writeFile(o.MissionPath(), p.JSON()); err != nil {
		return err
	}
	rel, _ := filepath.Rel(o.cfg.Workspace, o.MissionPath())
	if err := o.emit(ctx, event.New(event.PlanCreated, event.PlanData{Plan: p.JSON(), Path: rel})); err != nil {
		return err
	}
	return o.writeProgress(ctx)
}

// Outcome is how Execute ended.
type Outcome struct {
	// Status is event.StatusCompleted, event.StatusFailed,
	// event.StatusInterrupted, or event.StatusWaiting: no phase can go on
	// and some wait for a person or a time (docs/PROTOCOL.md#waits).
	Status      string
	Result      string // the last phase's summary
	FailedPhase string
	Reasons     []string
	// Stop is why no phase may be tried again, whatever its attempts
	// left: ReasonProvider (the model provider failed for good),
	// ReasonBudgetExhausted, ReasonRateLimited (then until ResumeAfter)
	// or ReasonInvalidOptions (a tool list names a tool an MCP server
	// does not offer).
	Stop        string
	ResumeAfter string
}

// stopsTheRun is why a child's end stops the whole harness, or "": a
// provider that failed for good, a budget spent, a rate limit to wait out,
// options no attempt can use. Retrying a phase would not help.
func stopsTheRun(res *adapter.Result) string {
	if res.Report == nil {
		return ""
	}
	switch r := res.Report.Reason; r {
	case event.ReasonProvider, event.ReasonBudgetExhausted, event.ReasonRateLimited, event.ReasonInvalidOptions:
		return r
	}
	return ""
}

// phaseEnd is how one attempt ended, for the scheduling loop.
type phaseEnd struct {
	id        string
	attempt   int
	passed    bool
	waiting   bool   // it parked: it goes on, as the same attempt, once answered
	exhausted bool   // failed with no attempts left
	stop      string // why the whole run stops (stopsTheRun)
	resume    string // with ReasonRateLimited: resume_after
	reasons   []string
	output    string
	err       error
}

// Execute runs the plan's phases until every one is verified, one runs
// out of attempts, or ctx ends, or no phase can go on and some wait for a
// person or a time. It is also how a run resumes: attempts a crash left
// running become interrupted, failed phases get a fresh budget, completed
// phases are never run again, and a waiting attempt goes on where it
// stopped once its wait is resolved, meanwhile too.
func (o *Orchestrator) Execute(ctx context.Context) (*Outcome, error) {
	st, err := o.cfg.Store.PlanState(ctx, o.cfg.RunID)
	if err != nil {
		return nil, err
	}
	p, err := plan.Parse(st.Mission)
	if err != nil {
		return nil, err
	}
	if err := o.recover(ctx, st); err != nil {
		return nil, err
	}
	if st, err = o.cfg.Store.PlanState(ctx, o.cfg.RunID); err != nil {
		return nil, err
	}
	done := map[string]bool{}
	var lastOutput string
	for _, ph := range st.Phases {
		if ph.Status == event.StatusCompleted {
			done[ph.ID] = true
			lastOutput = ph.Output
		}
	}
	// Phases whose attempt waits, by attempt: neither done nor ready
	// until their wait is resolved.
	waiting := map[string]int{}
	attempts, err := o.cfg.Store.Attempts(ctx, o.cfg.RunID)
	if err != nil {
		return nil, err
	}
	for _, a := range attempts {
		if a.Status == event.StatusWaiting {
			waiting[a.PhaseID] = a.Attempt
		}
	}

	ends := make(chan phaseEnd)
	running := map[string]bool{}
	poll := time.NewTicker(o.cfg.WaitPoll)
	defer poll.Stop()
	var failed *phaseEnd
	var firstErr error
	for {
		if failed == nil && firstErr == nil && ctx.Err() == nil {
			if err := o.answered(ctx, waiting); err != nil {
				firstErr = err
				continue
			}
			busy := maps.Clone(running)
			for id := range waiting {
				busy[id] = true
			}
			for _, ph := range p.Ready(done, busy) {
				if len(running) >= o.cfg.Parallel {
					break
				}
				running[ph.ID] = true
				go func(ph plan.Phase) { ends <- o.runPhase(ctx, p, ph) }(ph)
			}
		}
		if len(running) == 0 {
			break
		}
		var answers <-chan time.Time
		if len(waiting) > 0 {
			answers = poll.C // an answer lets a waiting phase go on while others run
		}
		var end phaseEnd
		select {
		case end = <-ends:
		case <-answers:
			continue
		}
		delete(running, end.id)
		switch {
		case end.err != nil:
			if firstErr == nil {
				firstErr = end.err
			}
		case end.waiting:
			waiting[end.id] = end.attempt
		case end.passed:
			done[end.id] = true
			lastOutput = end.output
		case end.exhausted && failed == nil:
			failed = &end
		}
	}
	o.background.Wait()
	if err := o.writeProgress(context.WithoutCancel(ctx)); err != nil && firstErr == nil {
		firstErr = err
	}
	switch {
	case firstErr != nil && ctx.Err() == nil:
		return nil, firstErr
	case ctx.Err() != nil:
		return &Outcome{Status: event.StatusInterrupted}, nil
	case failed != nil:
		return &Outcome{Status: event.StatusFailed, FailedPhase: failed.id, Reasons: failed.reasons, Stop: failed.stop, ResumeAfter: failed.resume}, nil
	case len(waiting) > 0:
		return &Outcome{Status: event.StatusWaiting}, nil
	case len(done) < len(p.Phases):
		return &Outcome{Status: event.StatusFailed, Reasons: []string{"no phase can start: the remaining phases wait on failed ones"}}, nil
	}
	return &Outcome{Status: event.StatusCompleted, Result: lastOutput}, nil
}

// answered takes out of waiting the phases whose attempt may go on: no
// wait of it is open (an answer came, or its deadline passed).
func (o *Orchestrator) answered(ctx context.Context, waiting map[string]int) error {
	if len(waiting) == 0 {
		return nil
	}
	ws, err := o.waits(ctx)
	if err != nil {
		return err
	}
	open := map[string]bool{}
	for _, w := range ws {
		if w.Resolution == nil && w.PhaseID != "" && waiting[w.PhaseID] == w.Attempt {
			open[w.PhaseID] = true
		}
	}
	for id := range waiting {
		if !open[id] {
			delete(waiting, id)
		}
	}
	return nil
}

// waits are the run's waits, each deadline that has passed settled first.
func (o *Orchestrator) waits(ctx context.Context) ([]store.Wait, error) {
	if o.cfg.ExpireWaits != nil {
		if err := o.cfg.ExpireWaits(ctx); err != nil {
			return nil, err
		}
	}
	return o.cfg.Store.Waits(ctx, o.cfg.RunID)
}

// waitState is where an attempt stands with its waits.
type waitState int

const (
	notWaiting   waitState = iota // it did not park
	stillWaiting                  // a wait of it is open
	goesOn                        // it parked and may go on where it stopped
)

// goOn sets up spec, an attempt's, to go on where the attempt stopped when
// it parked (parked, or a wait of it not yet journaled, says so): its
// waits, its conversation, the calls it started, its turns and usage, as
// the store has them. An attempt with a wait still open does not go on.
func (o *Orchestrator) goOn(ctx context.Context, spec *adapter.PhaseSpec, parked bool) (waitState, error) {
	ws, err := o.waits(ctx)
	if err != nil {
		return notWaiting, err
	}
	state := notWaiting
	if parked {
		state = goesOn
	}
	spec.Waits = nil
	for _, w := range ws {
		if w.PhaseID != spec.PhaseID || w.Attempt != spec.Attempt {
			continue
		}
		spec.Waits = append(spec.Waits, adapter.Wait{Waiting: w.Waiting, Resolution: w.Resolution, Journaled: w.Journaled})
		switch {
		case w.Resolution == nil:
			state = stillWaiting
		case !w.Journaled && state == notWaiting:
			state = goesOn
		}
	}
	if state != goesOn {
		return state, nil
	}
	st, err := o.cfg.Store.AttemptState(ctx, o.cfg.RunID, spec.PhaseID, spec.Attempt)
	if err != nil {
		return notWaiting, err
	}
	spec.History, spec.Started, spec.Iteration, spec.Turns, spec.Usage = st.History, st.Started, st.Iteration, st.Turns, st.Usage
	spec.Hooked = st.Hooked
	return goesOn, nil
}

// recover repairs what a crash or an earlier failure left: running
// attempts become interrupted, failed phases get a fresh budget. Waiting
// attempts stay as they are: they go on once answered.
func (o *Orchestrator) recover(ctx context.Context, st *store.PlanState) error {
	interrupted, err := o.cfg.Store.InterruptAttempts(ctx, o.cfg.RunID)
	if err != nil {
		return err
	}
	if _, err := o.cfg.Store.MarkPendingUnknown(ctx, o.cfg.RunID, ""); err != nil {
		return err
	}
	for _, a := range interrupted {
		msg := fmt.Sprintf("phase %s attempt %d was interrupted when the harness stopped; it restarts as a new attempt", a.PhaseID, a.Attempt)
		if err := o.emit(ctx, event.New(event.Warning, event.WarningData{Message: msg})); err != nil {
			return err
		}
	}
	for _, ph := range st.Phases {
		if ph.Status == event.StatusFailed {
			if err := o.cfg.Store.ResetBudget(ctx, o.cfg.RunID, ph.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// runPhase makes one attempt of a phase: prompt, child, evidence, and the
// transition events that checkpoint it.
func (o *Orchestrator) runPhase(ctx context.Context, p *plan.Plan, ph plan.Phase) phaseEnd {
	end := phaseEnd{id: ph.ID}
	budget, err := o.budget(ctx, ph)
	if err != nil {
		end.err = err
		return end
	}
	prompt, err := o.phasePrompt(ctx, p, ph, budget)
	if err != nil {
		end.err = err
		return end
	}
	attempt := budget.attempt
	end.attempt = attempt
	spec := o.spec(ph.ID, attempt, adapter.ModePhase, prompt)
	spec.Until, spec.MaxIterations = ph.Until, ph.MaxIterations
	if budget.waiting {
		// The attempt parked: it goes on where it stopped, not anew.
		waited, err := o.goOn(ctx, &spec, true)
		if err != nil {
			end.err = err
			return end
		}
		if waited == stillWaiting {
			end.waiting = true
			return end
		}
	}
	// The attempt's time runs from its phase.started to its end, as the
	// boards' clocks show it running: verification included.
	began := time.Now().UTC()
	if err := o.emitPhaseAt(ctx, began, event.PhaseStarted, ph.ID, attempt, event.PhaseData{Title: ph.Title}); err != nil {
		end.err = err
		return end
	}
	// progress.md is for people; writing it need not delay the child.
	o.background.Add(1)
	go func() {
		defer o.background.Done()
		_ = o.writeProgress(context.WithoutCancel(ctx))
	}()

	// The phase may spend what the run has left.
	if spec.MaxTokens, spec.MaxCost, err = o.budgetLeft(ctx); err != nil {
		end.err = err
		return end
	}
	if spec.Receipts, err = o.receipts(ctx, ph.ID); err != nil {
		end.err = err
		return end
	}
	// Files the run already snapshotted keep their first, pre-run state.
	if spec.Checkpointed, err = o.checkpointed(ctx); err != nil {
		end.err = err
		return end
	}
	res, err := o.cfg.Spawn(ctx, o.adapterConfig(ctx, ph.ID, attempt), spec)
	persist := context.WithoutCancel(ctx)
	// The child is gone: an intent it left pending has a lost outcome.
	if _, uerr := o.cfg.Store.MarkPendingUnknown(persist, o.cfg.RunID, ph.ID); uerr != nil && err == nil {
		err = uerr
	}
	switch {
	case err != nil && res == nil && ctx.Err() != nil:
		res = &adapter.Result{Status: event.StatusCancelled}
	case err != nil:
		// No child ran (the binary could not start) or the journal failed:
		// close the attempt so it does not look running, then stop.
		_ = o.emitPhase(persist, event.PhaseFailed, ph.ID, attempt, event.PhaseData{
			Title: ph.Title, Status: event.StatusCrashed, Reason: err.Error(),
		})
		end.err = err
		return end
	case res.Status == event.StatusWaiting:
		// Parked (its run.waiting made the attempt waiting): not failed,
		// not retried, not counted; it goes on as this attempt, even if
		// ctx ended meanwhile.
		end.waiting = true
		_ = o.writeProgress(persist)
		return end
	case res.Status == event.StatusCancelled && ctx.Err() == nil:
		// Only a cancelled ctx should cancel a child; anything else that
		// stopped it is a crash, or the phase would be retried forever.
		res.Status = event.StatusCrashed
	}
	data := event.PhaseData{
		Title: ph.Title, Output: res.Output,
		Usage: &event.Usage{PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens},
	}
	endAttempt := func(typ string) error {
		now := time.Now().UTC()
		data.DurationMS = now.Sub(began).Milliseconds()
		return o.emitPhaseAt(persist, now, typ, ph.ID, attempt, data)
	}

	interrupted := func() phaseEnd {
		data.Status, data.Reason = event.StatusCancelled, "interrupted by the user"
		end.err = endAttempt(event.PhaseFailed)
		return end
	}
	if ctx.Err() != nil || res.Status == event.StatusCancelled {
		return interrupted()
	}
	if res.Status == event.StatusLost {
		// The worker running it went away: the phase did not fail, so the
		// attempt counts no more than one a stopped harness left.
		data.Status, data.Reason, data.Reasons, data.WillRetry = event.StatusInterrupted, res.Reason, []string{res.Reason}, true
		end.err = endAttempt(event.PhaseFailed)
		return end
	}

	var reasons []string
	if res.Status == event.StatusCompleted {
		findings, err := o.verify(ctx, ph, attempt)
		if errors.Is(err, errVerifyInterrupted) {
			return interrupted()
		}
		if err != nil {
			end.err = err
			return end
		}
		if findings.Passed() {
			data.Status = event.StatusPassed
			end.passed, end.output = true, res.Output
			end.err = endAttempt(event.PhaseCompleted)
			_ = o.writeProgress(persist)
			return end
		}
		reasons = findings.Reasons()
		data.Status = event.StatusFailed
	} else {
		reasons = []string{res.Reason}
		data.Status = attemptStatus(res.Status)
		if end.stop = stopsTheRun(res); end.stop != "" {
			end.resume = res.Report.ResumeAfter
		}
	}
	data.Reasons, data.Reason = reasons, strings.Join(reasons, "; ")
	data.WillRetry = budget.used+1 < ph.MaxAttempts && end.stop == ""
	end.reasons, end.exhausted = reasons, !data.WillRetry
	end.err = endAttempt(event.PhaseFailed)
	_ = o.writeProgress(persist)
	return end
}

// attemptStatus maps an adapter status to an attempt status.
func attemptStatus(s string) string {
	switch s {
	case event.StatusCrashed:
		return event.StatusCrashed
	case event.StatusTimeout:
		return event.StatusTimeout
	case event.StatusCancelled:
		return event.StatusCancelled
	}
	return event.StatusFailed
}

// budget is where a phase stands in its attempt budget.
type budget struct {
	attempt int  // the number of the attempt about to start, or go on
	waiting bool // attempt parked on a wait: it goes on
	used    int  // failed attempts counted against max_attempts
	max     int
	earlier []store.Attempt // this phase's earlier attempts, oldest first
	state   *store.PlanState
}

// budget counts the attempts that failed since the budget was last reset.
// Attempts a crash or Ctrl-C interrupted do not count: the phase did not
// fail, the harness stopped. Nor does one that waits: it is not over.
func (o *Orchestrator) budget(ctx context.Context, ph plan.Phase) (budget, error) {
	st, err := o.cfg.Store.PlanState(ctx, o.cfg.RunID)
	if err != nil {
		return budget{}, err
	}
	var row store.Phase
	for _, r := range st.Phases {
		if r.ID == ph.ID {
			row = r
		}
	}
	all, err := o.cfg.Store.Attempts(ctx, o.cfg.RunID)
	if err != nil {
		return budget{}, err
	}
	b := budget{attempt: row.Attempts + 1, max: ph.MaxAttempts, state: st}
	for _, a := range all {
		if a.PhaseID != ph.ID {
			continue
		}
		if a.Status == event.StatusWaiting {
			b.attempt, b.waiting = a.Attempt, true
			continue
		}
		b.earlier = append(b.earlier, a)
		if a.Attempt > row.BudgetBase && a.Status != event.StatusInterrupted && a.Status != event.StatusCancelled && a.Status != event.StatusPassed {
			b.used++
		}
	}
	return b, nil
}

// budgetLeft is the run's token and cost budget less what every attempt
// so far spent; 0 when there is no budget, and below 0 when it is spent
// (the child then makes no request).
func (o *Orchestrator) budgetLeft(ctx context.Context) (int, float64, error) {
	if o.cfg.MaxTokens == 0 && o.cfg.MaxCost == 0 {
		return 0, 0, nil
	}
	all, err := o.cfg.Store.Attempts(ctx, o.cfg.RunID)
	if err != nil {
		return 0, 0, err
	}
	var spent event.Usage
	for _, a := range all {
		spent = spent.Add(a.Usage)
	}
	tokens, cost := 0, 0.0
	if o.cfg.MaxTokens > 0 {
		if tokens = o.cfg.MaxTokens - spent.Total(); tokens <= 0 {
			tokens = -1
		}
	}
	if o.cfg.MaxCost > 0 && o.cfg.Price != nil {
		if cost = o.cfg.MaxCost - o.cfg.Price.Cost(spent); cost <= 0 {
			cost = -1
		}
	}
	return tokens, cost, nil
}

func (o *Orchestrator) spec(phaseID string, attempt int, mode, prompt string) adapter.PhaseSpec {
	model := o.cfg.Model
	model.Scope = fmt.Sprintf("%s/%d", phaseID, attempt)
	return adapter.PhaseSpec{
		RunID: o.cfg.RunID, SessionID: o.cfg.SessionID, PhaseID: phaseID, Attempt: attempt,
		Workspace: o.ws.Root(), Mode: mode, Model: model, Prompt: prompt, Tools: o.cfg.Tools, WaitOptions: o.cfg.Waits,
		Deny: o.cfg.Deny, MCPConfig: o.cfg.MCPConfig, Settings: o.cfg.Settings, Sandbox: o.cfg.Sandbox, Network: o.cfg.Network,
		ContextWindow: o.cfg.ContextWindow, NoCompact: o.cfg.NoCompact, Price: o.cfg.Price, MaxTurns: o.cfg.MaxTurns, ContextBudget: o.cfg.ContextBudget,
		MaxRepeats: o.cfg.MaxRepeats, Vision: o.cfg.Vision, MaxSubagents: o.maxSubagents(),
	}
}

// maxSubagents is the phases' MaxSubagents: none without a Tasks.
func (o *Orchestrator) maxSubagents() int {
	if o.cfg.Tasks == nil {
		return 0
	}
	return o.cfg.MaxSubagents
}

func (o *Orchestrator) adapterConfig(ctx context.Context, phaseID string, attempt int) adapter.Config {
	return adapter.Config{
		OnIntent: func(in event.EffectIntentData) adapter.Control {
			return o.intent(context.WithoutCancel(ctx), phaseID, attempt, in)
		},
		Exe:              o.cfg.Exe,
		Env:              o.cfg.Env,
		LogPath:          filepath.Join(o.cfg.RunDir, "logs", fmt.Sprintf("%s-%d.log", phaseID, attempt)),
		Timeout:          o.cfg.PhaseTimeout,
		Grace:            o.cfg.Grace,
		HeartbeatTimeout: o.cfg.HeartbeatTimeout,
		OnEvent:          func(e event.Event) error { return o.cfg.Sink.Emit(context.Background(), e) },
		Blobs:            o.cfg.Blobs,
		OnTask: func(ctx context.Context, req event.TaskRequestData) (event.TaskResultData, error) {
			if o.cfg.Tasks == nil {
				return event.TaskResultData{}, errors.New("this harness runs no subagents")
			}
			return o.cfg.Tasks(ctx, phaseID, attempt, req)
		},
	}
}

// intent answers a child's effect.intent through the run's outbox.
func (o *Orchestrator) intent(ctx context.Context, phaseID string, attempt int, in event.EffectIntentData) adapter.Control {
	return o.cfg.Intents(ctx, store.IntentReceipt(o.cfg.RunID, phaseID, attempt, in))
}

func (o *Orchestrator) receipts(ctx context.Context, phaseID string) ([]event.ReceiptData, error) {
	rows, err := o.cfg.Store.Receipts(ctx, o.cfg.RunID, phaseID)
	if err != nil {
		return nil, err
	}
	var out []event.ReceiptData
	for _, r := range rows {
		if r.State == event.StatusDone {
			out = append(out, event.ReceiptData{Type: r.Type, Key: r.Key, Details: r.Details})
		}
	}
	return out, nil
}

func (o *Orchestrator) checkpointed(ctx context.Context) ([]string, error) {
	cps, err := o.cfg.Store.Checkpoints(ctx, o.cfg.RunID)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, c := range cps {
		paths = append(paths, c.Path)
	}
	return paths, nil
}

func (o *Orchestrator) emit(ctx context.Context, e event.Event) error {
	return o.cfg.Sink.Emit(ctx, e)
}

func (o *Orchestrator) emitPhase(ctx context.Context, typ, phaseID string, attempt int, data event.PhaseData) error {
	return o.emitPhaseAt(ctx, time.Now().UTC(), typ, phaseID, attempt, data)
}

// emitPhaseAt is emitPhase with the event's time.
func (o *Orchestrator) emitPhaseAt(ctx context.Context, at time.Time, typ, phaseID string, attempt int, data event.PhaseData) error {
	e := event.New(typ, data)
	e.TS, e.PhaseID, e.Attempt = at, phaseID, attempt
	return o.emit(ctx, e)
}

// writeFile writes a run file that must survive a crash whole
// (mission.json), creating the run directory on first use.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return tools.WriteFileAtomic(path, data, 0o644)
}
