// Package runner is the card's runner: the child process that runs a
// phase, and the loop it runs.
//
//   - Serve is `agent runner`, the child side of the runner protocol
//     (docs/PROTOCOL.md#runner-protocol): it reads a PhaseSpec, runs the loop it describes,
//     streams its events to the parent and ends with runner.result.
//   - Execute is the loop a spec describes: its tools, sandbox, MCP
//     servers and model, also how a supervisor drives a single run in its
//     own process, so a run is the same loop with the same events
//     whichever side of a process boundary it runs.
//   - Run is the agent loop itself: it asks the model, runs the tools it
//     calls, and repeats until the model gives a final answer. It writes
//     everything that happens to an event sink and never touches the
//     store: the fast path hands it a sink that persists, the child a sink
//     that writes JSON lines to the parent.
package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"agent/adapter"
	"agent/approval"
	"agent/event"
	"agent/hooks"
	"agent/llm"
	"agent/mcp"
	"agent/prompts"
	"agent/schema"
	"agent/tools"
	"agent/vision"
)

// Sink receives the events of a run. Emit must not return before the event
// is durable where durability matters: the runner relies on tool.started
// being persisted before the tool runs.
type Sink interface {
	Emit(ctx context.Context, e event.Event) error
}

// Defaults.
const (
	DefaultMaxTurns      = 50
	DefaultMaxIterations = 10
	// DefaultMaxRepeats: the fifth identical tool call in a row stops the
	// iteration, and the two before it are refused (Config.MaxRepeats).
	DefaultMaxRepeats = 5
)

// Config is what one run of the loop needs.
type Config struct {
	Model     llm.Model
	ModelName string
	Tools     *tools.Set
	Sink      Sink

	MaxTurns      int    // per iteration; 0 means DefaultMaxTurns
	Until         string // Ralph loop completion promise; empty means no loop
	MaxIterations int    // with Until; 0 means DefaultMaxIterations
	Instructions  string // AGENTS.md content, if any
	// Skills are listed in the system prompt, for the skill tool to load.
	Skills []prompts.Skill
	// ContextBudget ends an iteration whose prompt grew past this many
	// tokens; the next one starts fresh with the continuation prompt.
	// 0 disables it.
	ContextBudget int
	// MaxRepeats is the loop guard's limit: the MaxRepeats-th identical
	// tool call in a row stops the iteration, and such a call is refused
	// from the (MaxRepeats-2)-th on. A bash or MCP call (volatile) is a
	// repeat only when its result is the same too: it runs, so that a
	// command polled for a change can see it. 0 means DefaultMaxRepeats.
	MaxRepeats int
	// RequireTool names a tool that must end the loop (a result with
	// Stop, like submit_plan). A plain final message gets a reminder,
	// at most twice, and then fails the run.
	RequireTool string
	// Compact replaces the middle of the conversation with a summary
	// when a request would not fit ContextWindow (tokens; 0: unknown,
	// then only after the provider refuses one as too long, and before
	// sending once a refusal stated the window). README.md#context-and-spend.
	// CompactPrior compacts Prior, the session's earlier conversation,
	// before the first request, whatever its size (agent chat's /compact).
	Compact       bool
	CompactPrior  bool
	ContextWindow int
	// MaxTokens and MaxCost (USD, at Price) bound the run's usage as a
	// whole, State.Usage included: once passed, no request is made and
	// the loop ends budget_exhausted. 0: no bound; below 0: nothing left.
	MaxTokens int
	MaxCost   float64
	Price     *event.Price
	// Vision says the model sees images: it is given them as images, and
	// any other model a line about each (vision.Described). Images, with
	// their bytes, go with the opening prompt of each iteration; on
	// resume, those no message of the conversation gives yet (attached on
	// resume) go in a message of their own before the next request.
	Vision bool
	Images []event.Image
	// Checkpoints, if set, saves each file a write_file or edit_file call
	// is about to change for the first time in the run, and the runner
	// records the checkpoint.created it returns before the tool runs.
	Checkpoints Checkpointer

	// Waits (docs/PROTOCOL.md#waits): the approval rules and the deadline
	// of an approval or a question (0: DefaultAskTimeout) and what it does
	// (AskOnTimeout, "" deny); no wait is longer than MaxWait (0:
	// DefaultMaxWait). Waits are the run's waits so far, by id; Waiter
	// waits in this process, nil parks the run (ErrParked). WaitScope
	// keeps the wait ids of a harness's phases apart.
	Approvals    approval.Rules
	AskTimeout   time.Duration
	AskOnTimeout string
	MaxWait      time.Duration
	Waits        map[string]adapter.Wait
	Waiter       Waiter
	WaitScope    string

	// Schema, if set, is the output schema the final answer must satisfy:
	// an answer that does not is sent back to be fixed, MaxSchemaFixes
	// times at most, then the loop ends with reason schema. With
	// ResponseFormat the requests also carry it as response_format, where
	// the provider takes it (README.md#structured-output).
	Schema         *schema.Schema
	ResponseFormat bool
	// Hooks (docs/PROTOCOL.md#hooks) run at the loop's points, in
	// HookEnv (the workspace), told RunID and SessionID. Hooked are the
	// runs of them the journal already records: a resumed loop acts on
	// those and does not run them again. ParentRunID makes the loop a
	// sub-run's: its final answer fires SubagentStop rather than Stop, and
	// its prompt, the model's, fires no prompt hooks. AgentPrompt says
	// the prompt is agent's own (a harness phase's context), which fires
	// SessionStart but not UserPromptSubmit.
	Hooks       *hooks.Set
	HookEnv     hooks.Env
	Hooked      []event.HookCompletedData
	RunID       string
	SessionID   string
	ParentRunID string
	AgentPrompt bool
	// Tasks runs the sub-runs of task calls, MaxSubagents of a reply at
	// once (0: DefaultMaxSubagents); nil when the task tool is not
	// offered (docs/PROTOCOL.md#subagents).
	Tasks        Delegator
	MaxSubagents int

	// AskHuman: a person can answer the run's questions (ask_human's, and
	// an MCP server's while a call runs). Hold waits in this process for
	// an answer through the other channels when Waiter is nil: a question
	// asked while a call runs cannot park (calls.go); nil declines it.
	AskHuman bool
	Hold     Waiter

	// Refresh, if set, is asked before each model request for the tools
	// to offer when they changed (an MCP server's tool list), or nil.
	Refresh func(ctx context.Context) (*tools.Set, error)
}

// MaxSchemaFixes is how many times a final answer its output schema
// refuses is sent back to the model.
const MaxSchemaFixes = 2

// Checkpointer saves a file before the run first changes it, so that
// `agent rewind` can put it back; checkpoint.Blobs implements it. ok is
// false when there is nothing to save (a directory: the tool refuses it).
type Checkpointer interface {
	Snapshot(ctx context.Context, root, rel string) (d event.CheckpointData, ok bool, err error)
}

// State is where a run stands, so a resumed run continues where it stopped.
// The zero State starts a new run.
type State struct {
	// Prior is the conversation of earlier runs in the same session: the
	// model sees it, but it is not this run's to record or resume.
	Prior     []llm.Message
	Iteration int           // current Ralph iteration; 0 when not looping
	History   []llm.Message // the current iteration's conversation, without the system prompt
	Started   []string      // ids of tool calls that started but never completed
	Turns     int           // model calls so far in the whole run
	Usage     llm.Usage
	// Checkpointed are the files (workspace-relative) already saved in
	// this run: only a file's first change is checkpointed.
	Checkpointed []string
	// Continue resumes a run that ran out of turns or iterations with a
	// fresh budget: the turns and iterations it had count no more, and a
	// Ralph loop starts its next iteration.
	Continue bool
}

// Result is how the loop ended.
type Result struct {
	Status string // event.StatusCompleted or event.StatusFailed
	Text   string // the final assistant message
	Reason string // one of event's Reason words
	Detail string // the reason said for people, when the loop knows more than the word
	Turns  int
	Usage  llm.Usage
}

// Report says how the loop ended, as runner.result carries it: its Result,
// or the error that stopped it. A model provider failure keeps the reason
// ReasonProvider across the process boundary. A loop stopped by its
// context is reported failed here; the parent knows why it stopped it.
func Report(res Result, err error) event.RunnerResultData {
	out := event.RunnerResultData{
		Status: res.Status, Output: res.Text, Reason: res.Reason, Turns: res.Turns,
		Usage: event.Usage{PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens},
	}
	var provider *llm.Error
	switch {
	case errors.As(err, &provider) && provider.Kind == llm.KindRateLimit:
		// Paused, not failed: the provider asked to wait.
		out.Status, out.Reason, out.Detail = event.StatusFailed, event.ReasonRateLimited, provider.Error()
		out.ResumeAfter = provider.ResumeAt(time.Now())
	case errors.As(err, &provider):
		out.Status, out.Reason, out.Detail = event.StatusFailed, event.ReasonProvider, provider.Error()
	case errors.Is(err, ErrParked):
		out.Status, out.Reason, out.Detail = event.StatusWaiting, event.ReasonWaiting, err.Error()
	case errors.As(err, new(*WaitFailedError)):
		out.Status, out.Reason, out.Detail = event.StatusFailed, event.ReasonTimeout, err.Error()
	case err != nil:
		out.Status, out.Reason, out.Detail = event.StatusFailed, event.ReasonError, err.Error()
	case res.Status != event.StatusCompleted && res.Detail != "":
		out.Detail = res.Detail
	case res.Status != event.StatusCompleted:
		out.Detail = cmp.Or(res.Detail, describeReason(res.Reason))
	}
	return out
}

// describeReason says a loop's end reason for people.
func describeReason(reason string) string {
	switch reason {
	case event.ReasonMaxTurns:
		return "stopped at the turn limit (--max-turns) before the task was done; resume to continue with a fresh budget"
	case event.ReasonMaxIterations:
		return "stopped at the iteration limit (--max-iterations) without the completion promise; resume to continue with a fresh budget"
	case event.ReasonToolLoop:
		return "stopped: the model repeated the same tool call (--max-repeats)"
	case event.ReasonBudgetExhausted:
		return "stopped: the run spent its budget (--max-tokens or --max-cost); resume with a new one to continue"
	}
	return reason
}

type loop struct {
	cfg    Config
	prompt string
	system string
	state  State

	lastCall string // signature of the previous tool call, for the loop guard
	repeats  int

	lastReason string // why the previous Ralph iteration ended, if known

	// Budgets count from these: a resumed run with State.Continue gets
	// fresh ones.
	turnBase      int // assistant messages of the history that do not count
	iterationBase int // iterations that do not count

	stopped *tools.Result // the result of a tool call that ended the loop
	nudges  int           // reminders sent for RequireTool

	checkpointed map[string]bool // files saved in this run, by workspace-relative path
	always       map[string]bool // approval rules allowed for the rest of the run

	hooked     map[string][]event.HookCompletedData // hook runs recorded, by event and key (hooks.go)
	stopActive bool                                 // a Stop hook already made the loop go on
	hookStop   string                               // why a hook stopped the run (reason hook)

	ratio float64 // provider tokens per estimated token, from the last answer

	// The output schema: its response_format (nil: not sent, or refused
	// by the provider), the fixes asked for before this drive, which do
	// not count (State.Continue), and why the last answer failed it.
	format    *llm.ResponseFormat
	fixBase   int
	schemaErr error

	process string // this process's nonce, in the ids of questions asked while a call runs (calls.go)
}

// looping reports whether the run is a series of fresh-context iterations:
// a Ralph loop, or a context budget that may start a fresh one.
func (l *loop) looping() bool { return l.cfg.Until != "" || l.cfg.ContextBudget > 0 }

// openingPrompt is the first user message of an iteration: the prompt
// itself, or in later Ralph iterations the continuation prompt. A run
// resumed at the start of a later iteration gets the continuation too.
func (l *loop) openingPrompt() (string, error) {
	if !l.looping() || l.state.Iteration <= 1 {
		return l.prompt, nil
	}
	return prompts.Render("continuation", prompts.Continuation{
		Objective: l.prompt, Iteration: l.state.Iteration, MaxIterations: l.lastIteration(),
		Promise: l.cfg.Until, Reason: l.lastReason,
	})
}

// Run drives the loop for prompt from state until the task completes, the
// turn or iteration budget runs out, or ctx ends. A provider failure or a
// cancelled ctx is returned as an error, with the turns and tokens spent
// so far in the Result; the caller records it.
func Run(ctx context.Context, cfg Config, prompt string, state State) (Result, error) {
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	if cfg.MaxRepeats <= 0 {
		cfg.MaxRepeats = DefaultMaxRepeats
	}
	if cfg.MaxSubagents <= 0 {
		cfg.MaxSubagents = DefaultMaxSubagents
	}
	if (cfg.Until != "" || cfg.ContextBudget > 0) && cfg.MaxIterations <= 0 {
		cfg.MaxIterations = DefaultMaxIterations
	}
	sys := prompts.System{Tools: cfg.Tools.Names(), Instructions: cfg.Instructions, Promise: cfg.Until, Skills: cfg.Skills}
	if cfg.Schema != nil {
		sys.OutputSchema = string(cfg.Schema.JSON())
	}
	system, err := prompts.Render("system", sys)
	if err != nil {
		return Result{}, err
	}
	if cfg.Waits == nil {
		cfg.Waits = map[string]adapter.Wait{}
	}
	l := &loop{cfg: cfg, prompt: prompt, system: system, state: state, checkpointed: map[string]bool{}, always: alwaysAllowed(cfg.Waits),
		hooked: hookRecords(cfg.Hooked), stopActive: stopHookActive(cfg.Hooked), process: processNonce()}
	if cfg.Schema != nil && cfg.ResponseFormat {
		if ok, strict := cfg.Schema.ResponseFormat(); ok {
			l.format = &llm.ResponseFormat{Name: "output", Schema: cfg.Schema.JSON(), Strict: strict}
		}
	}
	for _, p := range state.Checkpointed {
		l.checkpointed[p] = true
	}
	res, err := l.run(ctx)
	if err != nil {
		// Stopped early: what it spent so far still counts.
		res.Turns, res.Usage = l.state.Turns, l.state.Usage
	}
	return res, err
}

func (l *loop) run(ctx context.Context) (Result, error) {
	if l.state.Continue {
		if err := l.freshBudget(ctx); err != nil {
			return Result{}, err
		}
	}
	if !l.looping() {
		text, reason, err := l.answer(ctx)
		if err != nil {
			return Result{}, err
		}
		if reason != event.ReasonCompleted {
			return l.failed(text, reason), nil
		}
		return l.result(event.StatusCompleted, text, event.ReasonCompleted), nil
	}

	if l.state.Iteration == 0 {
		l.state.Iteration = 1
		l.state.History = nil
		if err := l.emitIterationStarted(ctx); err != nil {
			return Result{}, err
		}
	}
	for {
		text, reason, err := l.answer(ctx)
		if err != nil {
			return Result{}, err
		}
		if reason == event.ReasonHook {
			return l.failed(text, reason), nil
		}
		done := reason == event.ReasonCompleted && (l.cfg.Until == "" || HasPromise(text, l.cfg.Until))
		if reason == event.ReasonCompleted && !done {
			reason = "final message without the completion promise"
		}
		if err := l.emit(ctx, event.New(event.IterationCompleted, event.IterationData{
			Iteration: l.state.Iteration, MaxIterations: l.lastIteration(),
			Promise: l.cfg.Until, Completed: done, Reason: reason,
		})); err != nil {
			return Result{}, err
		}
		if done {
			return l.result(event.StatusCompleted, text, event.ReasonCompleted), nil
		}
		if reason == event.ReasonSchema {
			return l.result(event.StatusFailed, text, reason), nil
		}
		if l.state.Iteration >= l.lastIteration() {
			return l.result(event.StatusFailed, text, event.ReasonMaxIterations), nil
		}
		l.state.Iteration++
		l.state.History = nil
		l.state.Started = nil
		l.lastCall, l.repeats = "", 0
		l.lastReason = reason
		if err := l.emitIterationStarted(ctx); err != nil {
			return Result{}, err
		}
	}
}

// freshBudget starts the budgets of a resumed run anew. A Ralph loop that
// ran out of iterations finished its last one, so the next starts fresh.
func (l *loop) freshBudget(ctx context.Context) error {
	if !l.looping() {
		for _, m := range l.state.History {
			if m.Role == llm.RoleAssistant {
				l.turnBase++
			}
		}
		l.fixBase = l.fixesAsked()
		return nil
	}
	if l.state.Iteration == 0 {
		return nil // it never started one
	}
	l.iterationBase = l.state.Iteration
	l.state.Iteration++
	l.state.History = nil
	l.state.Started = nil
	return l.emitIterationStarted(ctx)
}

func (l *loop) emitIterationStarted(ctx context.Context) error {
	return l.emit(ctx, event.New(event.IterationStarted, event.IterationData{
		Iteration: l.state.Iteration, MaxIterations: l.lastIteration(), Promise: l.cfg.Until,
	}))
}

// lastIteration is the number of the iteration the budget ends with.
func (l *loop) lastIteration() int { return l.iterationBase + l.cfg.MaxIterations }

// iterate runs model turns until a final message or a budget ends the
// iteration. It returns the last assistant text and why it stopped.
func (l *loop) iterate(ctx context.Context) (string, string, error) {
	if len(l.state.History) == 0 {
		opening, err := l.openingPrompt()
		if err != nil {
			return "", "", err
		}
		if opening == l.prompt && l.state.Turns == 0 {
			// The person's prompt, sent for the first time.
			extra, stop, err := l.promptHooks(ctx)
			if err != nil {
				return "", "", err
			}
			if stop != "" {
				l.hookStop = stop
				return "", event.ReasonHook, nil
			}
			opening = joinNonEmpty(opening, extra)
		}
		if err := l.addUser(ctx, opening, l.cfg.Images); err != nil {
			return "", "", err
		}
	}
	// A resumed conversation may end in the middle of a turn: after an
	// assistant message followed by only some of its tool results, or
	// after a final answer.
	if last, ok := l.pendingTurn(); ok {
		if reason, err := l.runCalls(ctx, last.ToolCalls); err != nil || reason != "" {
			return l.endedBy(last.Content, reason, err)
		}
	}
	if newer := l.unsent(); len(newer) > 0 {
		if err := l.addUser(ctx, "", newer); err != nil {
			return "", "", err
		}
	}
	if last := l.state.History[len(l.state.History)-1]; last.Role == llm.RoleAssistant && len(last.ToolCalls) == 0 {
		reason := event.ReasonCompleted
		if l.cfg.RequireTool == "" {
			var err error
			if reason, err = l.stopHooks(ctx); err != nil {
				return "", "", err
			}
		}
		if reason != "" {
			return last.Content, reason, nil
		}
	}

	turns := -l.turnBase
	for _, m := range l.state.History {
		if m.Role == llm.RoleAssistant {
			turns++
		}
	}
	for {
		if turns >= l.cfg.MaxTurns {
			return l.lastAssistantText(), event.ReasonMaxTurns, nil
		}
		turns++
		resp, err := l.ask(ctx)
		if errors.Is(err, errBudget) {
			return l.lastAssistantText(), event.ReasonBudgetExhausted, nil
		}
		if err != nil {
			return "", "", err
		}
		if len(resp.Message.ToolCalls) == 0 {
			if l.cfg.RequireTool == "" {
				reason, err := l.stopHooks(ctx)
				if err != nil || reason != "" {
					return resp.Message.Content, reason, err
				}
				continue // a Stop hook made the loop go on
			}
			if l.nudges >= 2 {
				return resp.Message.Content, "finished without calling " + l.cfg.RequireTool, nil
			}
			l.nudges++
			if err := l.addUser(ctx, fmt.Sprintf(
				"You have not called %s. A plain reply does not count: call the %s tool now.",
				l.cfg.RequireTool, l.cfg.RequireTool), nil); err != nil {
				return "", "", err
			}
			continue
		}
		if reason, err := l.runCalls(ctx, resp.Message.ToolCalls); err != nil || reason != "" {
			return l.endedBy(resp.Message.Content, reason, err)
		}
		if l.overBudget(resp.Usage) {
			return resp.Message.Content, event.ReasonContextBudget, nil
		}
	}
}

// answer runs the iteration to its final answer, which must satisfy the
// output schema if the run has one: one that does not is sent back with
// what is wrong, MaxSchemaFixes times at most (each fix is a turn, counted
// against the turns and the budget like any other); then the iteration
// ends with reason schema. The fixes are counted from the conversation,
// so a resumed run asks for no more than it had left.
func (l *loop) answer(ctx context.Context) (string, string, error) {
	for {
		text, reason, err := l.iterate(ctx)
		if err != nil || reason != event.ReasonCompleted || l.cfg.Schema == nil {
			return text, reason, err
		}
		_, err = l.cfg.Schema.Check(text)
		var refused *schema.Error
		if !errors.As(err, &refused) {
			return text, reason, err
		}
		asked := l.fixesAsked() - l.fixBase
		if asked >= MaxSchemaFixes {
			l.schemaErr = refused
			return text, event.ReasonSchema, nil
		}
		fix, err := prompts.Render("schema_fix", prompts.SchemaFix{Why: refused.Why, Left: MaxSchemaFixes - asked - 1})
		if err != nil {
			return "", "", err
		}
		if err := l.addUser(ctx, fix, nil); err != nil {
			return "", "", err
		}
	}
}

// fixesAsked counts the fixes of the output schema asked for in the
// current conversation.
func (l *loop) fixesAsked() int {
	n := 0
	for _, m := range l.state.History {
		if m.Role == llm.RoleUser && strings.HasPrefix(m.Content, prompts.SchemaFixHeading) {
			n++
		}
	}
	return n
}

// pendingTurn returns the last assistant message when it has tool calls
// and nothing but tool results follow it, so some calls may lack a result.
func (l *loop) pendingTurn() (llm.Message, bool) {
	for i := len(l.state.History) - 1; i >= 0; i-- {
		switch m := l.state.History[i]; m.Role {
		case llm.RoleTool:
			continue
		case llm.RoleAssistant:
			return m, len(m.ToolCalls) > 0
		default:
			return llm.Message{}, false
		}
	}
	return llm.Message{}, false
}

// endedBy turns the way runCalls ended an iteration into its text and
// reason: a tool that stops the loop supplies the final text itself.
func (l *loop) endedBy(text, reason string, err error) (string, string, error) {
	if err != nil || reason != reasonStopped {
		return text, reason, err
	}
	if l.stopped.IsError {
		return l.stopped.Output, firstLine(l.stopped.Output), nil
	}
	return l.stopped.Output, event.ReasonCompleted, nil
}

// reasonStopped is internal: a tool result asked to end the loop.
const reasonStopped = "stopped by tool"

func (l *loop) overBudget(u llm.Usage) bool {
	return l.cfg.ContextBudget > 0 && u.PromptTokens > l.cfg.ContextBudget
}

func (l *loop) lastAssistantText() string {
	for i := len(l.state.History) - 1; i >= 0; i-- {
		if m := l.state.History[i]; m.Role == llm.RoleAssistant && m.Content != "" {
			return m.Content
		}
	}
	return ""
}

func (l *loop) addUser(ctx context.Context, text string, images []event.Image) error {
	l.state.History = append(l.state.History, llm.Message{Role: llm.RoleUser, Content: text, Images: forModel(images)})
	return l.emit(ctx, event.New(event.MessageCompleted, event.MessageData{
		Role: string(llm.RoleUser), Text: text, Images: images, Iteration: l.state.Iteration,
	}))
}

// unsent are the run's images no message of the conversation gives the
// model: those attached on resume, not yet recorded in a message.
func (l *loop) unsent() []event.Image {
	given := map[string]bool{}
	for _, m := range l.state.History {
		for _, img := range m.Images {
			given[img.SHA256] = true
		}
	}
	var out []event.Image
	for _, img := range l.cfg.Images {
		if !given[img.SHA256] {
			out = append(out, img)
		}
	}
	return out
}

// forModel is images as a message gives them to the model.
func forModel(images []event.Image) []llm.Image {
	var out []llm.Image
	for _, img := range images {
		out = append(out, vision.ForModel(img))
	}
	return out
}

// ask makes one model call and records the assistant message. A request
// that would not fit the context window, or that the provider refuses as
// too long, is made again after compacting the conversation.
func (l *loop) ask(ctx context.Context) (*llm.Response, error) {
	if l.spent() {
		return nil, errBudget
	}
	if l.cfg.CompactPrior && len(l.state.Prior) > 0 { // once: it leaves no Prior
		if _, err := l.compact(ctx, event.CompactAsked, 0); err != nil {
			return nil, err
		}
	}
	if l.wouldOverflow() {
		if _, err := l.compact(ctx, event.CompactWindow, l.keepTokens(0)); err != nil {
			return nil, err
		}
	}
	if err := l.refreshTools(ctx); err != nil {
		return nil, err
	}
	var resp *llm.Response
	var took time.Duration
	for attempt := 0; ; attempt++ {
		began := time.Now()
		req := llm.Request{
			Model:          l.cfg.ModelName,
			Messages:       l.messages(),
			Tools:          l.toolDefinitions(),
			ResponseFormat: l.format,
		}
		var deltaErr error
		r, err := l.cfg.Model.Stream(ctx, req, func(text string) {
			if deltaErr == nil {
				deltaErr = l.emit(ctx, event.New(event.MessageDelta, event.MessageDeltaData{Text: text}))
			}
		})
		if err != nil && req.ResponseFormat != nil && llm.RefusedFormat(err) {
			// Not every model of an endpoint takes it: the answer is
			// still checked against the schema, and fixed.
			l.format = nil
			if werr := l.emit(ctx, event.New(event.Warning, event.WarningData{Message: fmt.Sprintf(
				"the provider refused response_format (%v); the answer is checked against the output schema instead", err)})); werr != nil {
				return nil, werr
			}
			continue
		}
		if err != nil && llm.IsContextLength(err) && l.cfg.Compact && attempt < maxCompactions {
			if werr := l.learnWindow(ctx, llm.ContextWindowOf(err)); werr != nil {
				return nil, werr
			}
			compacted, cerr := l.compact(ctx, event.CompactContextError, l.keepTokens(attempt+1))
			if cerr != nil {
				return nil, cerr
			}
			if compacted {
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		if deltaErr != nil {
			return nil, deltaErr
		}
		l.calibrate(req.Messages, r.Usage.PromptTokens)
		resp, took = r, time.Since(began)
		break
	}
	l.state.Turns++
	l.state.Usage.PromptTokens += resp.Usage.PromptTokens
	l.state.Usage.CompletionTokens += resp.Usage.CompletionTokens
	msg := resp.Message
	msg.Role = llm.RoleAssistant
	resp.Message = msg
	l.state.History = append(l.state.History, msg)
	usage := event.Usage{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens}
	data := event.MessageData{
		Role: string(llm.RoleAssistant), Text: msg.Content, Usage: &usage, Iteration: l.state.Iteration,
		DurationMS: took.Milliseconds(),
	}
	for _, c := range msg.ToolCalls {
		data.ToolCalls = append(data.ToolCalls, event.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return resp, l.emit(ctx, event.New(event.MessageCompleted, data))
}

// errBudget stops the loop before a request the budget does not allow.
var errBudget = errors.New("budget exhausted")

// spent reports whether the run's usage has passed its budget.
func (l *loop) spent() bool {
	u := event.Usage{PromptTokens: l.state.Usage.PromptTokens, CompletionTokens: l.state.Usage.CompletionTokens}
	return l.cfg.MaxTokens < 0 || l.cfg.MaxTokens > 0 && u.Total() >= l.cfg.MaxTokens ||
		l.cfg.MaxCost < 0 || l.cfg.MaxCost > 0 && l.cfg.Price != nil && l.cfg.Price.Cost(u) >= l.cfg.MaxCost
}

// messages is the request's conversation: the system prompt, the
// session's earlier runs, then this run's current iteration; a model that
// does not see images reads a line about each instead.
func (l *loop) messages() []llm.Message {
	out := make([]llm.Message, 0, 1+len(l.state.Prior)+len(l.state.History))
	out = append(out, llm.Message{Role: llm.RoleSystem, Content: l.system})
	for _, part := range [][]llm.Message{l.state.Prior, l.state.History} {
		for _, m := range part {
			if !l.cfg.Vision {
				m = vision.Described(m)
			}
			out = append(out, m)
		}
	}
	return out
}

func (l *loop) toolDefinitions() []llm.Tool {
	defs := l.cfg.Tools.Definitions()
	out := make([]llm.Tool, 0, len(defs))
	for _, d := range defs {
		out = append(out, llm.Tool{Name: d.Name, Description: d.Description, Parameters: d.Parameters})
	}
	return out
}

// runCalls executes the calls of one assistant message that have no result
// yet. A call that started before a crash is re-run only when read-only.
// It returns a non-empty reason when the loop guard stops the iteration,
// or a hook the run. PostToolUse hooks' word for the model follows the
// turn's results, as one user message.
func (l *loop) runCalls(ctx context.Context, calls []llm.ToolCall) (string, error) {
	done := l.answered()
	var feedback []string // what PostToolUse hooks tell the model, once the turn's results are in
	for i := 0; i < len(calls); i++ {
		call := calls[i]
		if call.Name == tools.TaskName && l.cfg.Tasks != nil {
			// Task calls in a row run at once (task.go).
			j := i + 1
			for j < len(calls) && calls[j].Name == tools.TaskName {
				j++
			}
			said, reason, err := l.runTasks(ctx, calls[i:j], done)
			feedback = append(feedback, said...)
			if err != nil || reason != "" {
				return reason, err
			}
			i = j - 1
			continue
		}
		if done[call.ID] {
			feedback = append(feedback, l.recordedFeedback(call))
			continue
		}
		if l.wasStarted(call.ID) && !l.cfg.Tools.ReadOnly(call.Name) {
			res := tools.Result{IsError: true, Output: interruptedOutput(call.Name)}
			if err := l.recordResult(ctx, call, res); err != nil {
				return "", err
			}
			continue
		}
		call, repeats, started, stop, err := l.begin(ctx, call)
		if err != nil || stop != "" {
			return stop, err
		}
		if !started {
			continue
		}
		res, err := l.runCall(ctx, call, repeats)
		if err == nil && res.Wait != nil {
			res, err = l.waitTool(ctx, call, *res.Wait)
		}
		if err != nil {
			return "", err
		}
		// Cancelled mid-tool: leave the call without a result, as a crash
		// would, so resume applies the same rule.
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if volatile(call.Name) {
			repeats = l.countRepeat(fmt.Sprintf("%s\x00%t\x00%s", signature(call), res.IsError, res.Output))
			if repeats >= l.refuseAt() && repeats < l.cfg.MaxRepeats {
				res.Output += fmt.Sprintf("\n\n[this exact %s call returned this same result %d times in a row; "+
					"the run stops at %d: try a different approach]", call.Name, repeats, l.cfg.MaxRepeats)
			}
		}
		if err := l.recordResult(ctx, call, res); err != nil {
			return "", err
		}
		said, stop, err := l.postToolUse(ctx, call, res)
		if err != nil {
			return "", err
		}
		if stop != "" {
			l.hookStop = stop
			return event.ReasonHook, nil
		}
		feedback = append(feedback, said)
		if volatile(call.Name) && repeats >= l.cfg.MaxRepeats {
			return event.ReasonToolLoop, nil
		}
		if res.Stop {
			l.stopped = &res
			return reasonStopped, nil
		}
	}
	l.state.Started = nil
	if text := joinNonEmpty(feedback...); text != "" {
		return "", l.addUser(ctx, text, nil)
	}
	return "", nil
}

// begin does what comes before a call runs: the loop guard counts it,
// its PreToolUse hooks and its approval are asked, and its tool.started is
// recorded, with the arguments a hook may have changed. A call answered
// instead (refused, denied) is recorded as answered, and not started;
// stop says why the iteration ends, if it does (the loop guard, a hook).
func (l *loop) begin(ctx context.Context, call llm.ToolCall) (llm.ToolCall, int, bool, string, error) {
	// A volatile call is counted once it has its result. The tool
	// that must end the loop bounds its own calls (submit_plan: the
	// third invalid plan ends the planner with the plan's error).
	repeats := 0
	if !volatile(call.Name) {
		repeats = l.countRepeat(signature(call))
	}
	if call.Name == l.cfg.RequireTool {
		repeats = 0
	}
	if repeats >= l.cfg.MaxRepeats {
		// Answer the call so the conversation stays well formed
		// if the run is resumed.
		res := tools.Result{IsError: true, Output: fmt.Sprintf(
			"stopped: this exact %s call was made %d times in a row.", call.Name, repeats)}
		return call, repeats, false, event.ReasonToolLoop, l.recordResult(ctx, call, res)
	}
	// Nothing runs before its answer: the PreToolUse hooks' and an
	// approval's precede tool.started (and a side effect's intent).
	call, pre, err := l.preToolUse(ctx, call)
	if err != nil {
		return call, repeats, false, "", err
	}
	if pre.decision == hooks.Deny || pre.decision == hooks.Halt {
		if err := l.recordResult(ctx, call, hookRefusal(call, pre)); err != nil {
			return call, repeats, false, "", err
		}
		if pre.decision == hooks.Halt {
			l.hookStop = halted(hooks.PreToolUse, pre)
			return call, repeats, false, event.ReasonHook, nil
		}
		return call, repeats, false, "", nil
	}
	denied, err := l.approve(ctx, call, pre)
	if err != nil {
		return call, repeats, false, "", err
	}
	if denied != nil {
		return call, repeats, false, "", l.recordResult(ctx, call, *denied)
	}
	return call, repeats, true, "", l.emit(ctx, event.New(event.ToolStarted, event.ToolStartedData{
		CallID: call.ID, Name: call.Name, Args: argsJSON(call.Arguments),
	}))
}

// runCall runs one call whose tool.started is recorded: it refuses a call
// repeated too often, and saves the files the call will change first.
func (l *loop) runCall(ctx context.Context, call llm.ToolCall, repeats int) (tools.Result, error) {
	if repeats >= l.refuseAt() {
		return tools.Result{IsError: true, Output: fmt.Sprintf(
			"refused: this exact %s call was already made %d times in a row. Its result will not change; try a different approach.",
			call.Name, repeats-1)}, nil
	}
	refusal, err := l.checkpoint(ctx, call)
	if err != nil {
		return tools.Result{}, err
	}
	if refusal != "" {
		return tools.Result{IsError: true, Output: refusal}, nil
	}
	c, end := l.running(ctx, call)
	defer end()
	ctx = tools.WithCall(ctx, c)
	return l.cfg.Tools.Run(ctx, call.Name, call.Arguments), nil
}

// refreshTools takes the tools Config.Refresh says changed; a set that
// cannot be made keeps the one the run has, with a warning.
func (l *loop) refreshTools(ctx context.Context) error {
	if l.cfg.Refresh == nil {
		return nil
	}
	set, err := l.cfg.Refresh(ctx)
	switch {
	case err != nil:
		return l.emit(ctx, event.New(event.Warning, event.WarningData{Message: "the changed tool list could not be offered: " + err.Error()}))
	case set != nil:
		l.cfg.Tools = set
	}
	return nil
}

// checkpoint saves each file call will change that this run has not
// changed before, and records its checkpoint.created before the tool runs:
// the first snapshot of a file is its state before the run. A file that
// cannot be saved refuses the call, since rewind could not undo it; the
// error returned is the sink's.
func (l *loop) checkpoint(ctx context.Context, call llm.ToolCall) (string, error) {
	if l.cfg.Checkpoints == nil {
		return "", nil
	}
	for _, t := range l.cfg.Tools.WritesTo(call.Name, call.Arguments) {
		if l.checkpointed[t.Rel] {
			continue
		}
		d, ok, err := l.cfg.Checkpoints.Snapshot(ctx, l.cfg.Tools.Workspace().Root(), t.Rel)
		if err != nil {
			return fmt.Sprintf("not run: %s could not be saved before the change, so it could not be rewound: %v", t.Rel, err), nil
		}
		if !ok {
			continue
		}
		d.CallID, d.Tool = call.ID, call.Name
		if err := l.emit(ctx, event.New(event.CheckpointCreated, d)); err != nil {
			return "", err
		}
		l.checkpointed[t.Rel] = true
	}
	return "", nil
}

func interruptedOutput(tool string) string {
	return fmt.Sprintf("interrupted: this %s call started but the agent stopped before it finished, "+
		"so its effects are unknown. Check the workspace before deciding whether to run it again.", tool)
}

func (l *loop) recordResult(ctx context.Context, call llm.ToolCall, res tools.Result) error {
	return l.record(ctx, call, res, nil)
}

// record records a call's result; a task call's says which sub-run
// answered it and what that spent.
func (l *loop) record(ctx context.Context, call llm.ToolCall, res tools.Result, task *event.TaskResultData) error {
	l.state.History = append(l.state.History, llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: res.Output, Images: forModel(res.Images)})
	data := event.ToolCompletedData{CallID: call.ID, Name: call.Name, OK: !res.IsError, Output: res.Output, Truncated: res.Truncated, Images: res.Images}
	if res.IsError {
		data.Error = firstLine(res.Output)
	}
	if task != nil {
		data.Subagent = task.RunID
		if task.Usage.Total() > 0 {
			data.Usage = &task.Usage
		}
	}
	if err := l.emit(ctx, event.New(event.ToolCompleted, data)); err != nil {
		return err
	}
	for _, a := range res.Artifacts {
		if err := l.emit(ctx, event.New(event.ArtifactCreated, event.ArtifactData{Path: a.Path, SHA256: a.SHA256, Bytes: a.Bytes})); err != nil {
			return err
		}
	}
	for _, e := range res.Events {
		if err := l.emit(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// answered returns the ids of calls that already have a result in the
// current conversation.
func (l *loop) answered() map[string]bool {
	done := map[string]bool{}
	for _, m := range l.state.History {
		if m.Role == llm.RoleTool {
			done[m.ToolCallID] = true
		}
	}
	return done
}

func (l *loop) wasStarted(id string) bool {
	for _, s := range l.state.Started {
		if s == id {
			return true
		}
	}
	return false
}

// volatile reports whether a tool's result may change from one identical
// call to the next: a command's (bash) or an MCP server's, which a model
// may poll for a change. Such a call is a repeat only when its result is
// the same too.
func volatile(tool string) bool { return tool == "bash" || mcp.IsName(tool) }

// refuseAt is the repeat from which an identical call is refused (a
// volatile one runs, and its result says so).
func (l *loop) refuseAt() int { return max(2, l.cfg.MaxRepeats-2) }

// signature is a call as the loop guard compares calls: its tool and its
// arguments, whatever their formatting.
func signature(call llm.ToolCall) string { return call.Name + "\x00" + canonicalJSON(call.Arguments) }

// countRepeat returns how many times in a row a call of this signature
// has been made, counting this one; any other call in between starts the
// count again.
func (l *loop) countRepeat(sig string) int {
	if sig == l.lastCall {
		l.repeats++
	} else {
		l.lastCall, l.repeats = sig, 1
	}
	return l.repeats
}

func canonicalJSON(s string) string {
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// argsJSON makes arguments safe to embed in an event: invalid JSON from the
// model is carried as a JSON string instead of breaking the stream.
func argsJSON(s string) json.RawMessage {
	if strings.TrimSpace(s) == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func (l *loop) emit(ctx context.Context, e event.Event) error {
	if err := l.cfg.Sink.Emit(ctx, e); err != nil {
		return fmt.Errorf("emit %s: %w", e.Type, err)
	}
	return nil
}

func (l *loop) result(status, text, reason string) Result {
	res := Result{Status: status, Text: text, Reason: reason, Turns: l.state.Turns, Usage: l.state.Usage}
	if reason == event.ReasonSchema && l.schemaErr != nil {
		res.Detail = l.schemaErr.Error()
	}
	return res
}

// failed is the result of a loop that ended for reason before the task
// was done; a hook that stopped it says why.
func (l *loop) failed(text, reason string) Result {
	res := l.result(event.StatusFailed, text, reason)
	if reason == event.ReasonHook {
		res.Detail = l.hookStop
	}
	return res
}

// HasPromise reports whether text completes a Ralph iteration: the promise
// must be a line of its own, bare or as <promise>PROMISE</promise>.
func HasPromise(text, promise string) bool {
	promise = strings.TrimSpace(promise)
	if promise == "" {
		return false
	}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if inner, ok := strings.CutPrefix(line, "<promise>"); ok {
			if inner, ok = strings.CutSuffix(inner, "</promise>"); ok {
				line = strings.TrimSpace(inner)
			}
		}
		if line == promise {
			return true
		}
	}
	return false
}
