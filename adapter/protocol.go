// Package adapter is the bridge to a child `agent runner` process: it
// starts the child with a PhaseSpec on stdin, reads its JSON-lines events
// from stdout, answers side-effect intents, enforces timeouts and
// heartbeats, and returns what the attempt produced (docs/PROTOCOL.md#runner-protocol).
package adapter

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"agent/event"
	"agent/llm"
)

// PhaseSpec is line 1 of the child's stdin. Secrets are not in it; they
// travel in the environment.
type PhaseSpec struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id,omitempty"`
	PhaseID   string `json:"phase_id"`
	Attempt   int    `json:"attempt"`
	Workspace string `json:"workspace"`

	// Mode is ModePhase for a plan phase, ModePlan for the planner, or
	// ModeRun for a whole single run in a child (the gateway, workers). A
	// ModeRun child has no phase: its events read like `agent run --json`.
	Mode string `json:"mode"`

	Model Model `json:"model"`

	System string   `json:"system,omitempty"` // extra system instructions, e.g. AGENTS.md
	Prompt string   `json:"prompt"`           // the rendered phase context: the first user message
	Tools  []string `json:"tools"`            // allowed tools; empty means the mode's default set
	// Images go with the prompt, with their bytes (a ModeRun child's:
	// --image, attached on resume too); Vision says the model sees them
	// (docs/PROTOCOL.md#images).
	Images []event.Image `json:"images,omitempty"`
	Vision bool          `json:"vision,omitempty"`
	// Deny removes tools Tools names as a group (an MCP server's, by
	// mcp__SERVER__TOOL); MCPConfig are the run's --mcp-config files.
	Deny      []string `json:"deny,omitempty"`
	MCPConfig []string `json:"mcp_config,omitempty"`
	// Settings is the run's --settings file, whose hooks run besides
	// config.toml's (docs/PROTOCOL.md#hooks); Hooked are the runs of
	// hooks the journal records for this loop (a phase: this attempt),
	// which a resumed loop acts on rather than running them again.
	Settings string                    `json:"settings,omitempty"`
	Hooked   []event.HookCompletedData `json:"hooked,omitempty"`
	// Sandbox and Network confine the model's commands (README.md#the-sandbox);
	// "" is the default mode.
	Sandbox string `json:"sandbox,omitempty"`
	Network bool   `json:"network,omitempty"`

	MaxTurns   int `json:"max_turns,omitempty"`
	MaxRepeats int `json:"max_repeats,omitempty"` // the loop guard's limit (runner.Config.MaxRepeats); 0: 5
	// MaxSubagents is how many task calls of one reply run at once (the
	// task tool, docs/PROTOCOL.md#subagents); 0 offers no task tool.
	// ParentRunID says the spec is a sub-run's, which never has one.
	MaxSubagents  int    `json:"max_subagents,omitempty"`
	ParentRunID   string `json:"parent_run_id,omitempty"`
	Until         string `json:"until,omitempty"`
	MaxIterations int    `json:"max_iterations,omitempty"`
	ContextBudget int    `json:"context_budget,omitempty"`

	// Context and spend (README.md#context-and-spend): the window in tokens (0: the
	// model's known one), compaction unless NoCompact (CompactPrior: of
	// the session's earlier conversation before the first request), and the budget of
	// the run as a whole (Usage and, for a phase, what the run spent
	// before it count).
	ContextWindow int          `json:"context_window,omitempty"`
	NoCompact     bool         `json:"no_compact,omitempty"`
	CompactPrior  bool         `json:"compact_prior,omitempty"`
	MaxTokens     int          `json:"max_tokens,omitempty"`
	MaxCost       float64      `json:"max_cost,omitempty"`
	Price         *event.Price `json:"price,omitempty"`

	// OutputSchema (mode run) is the JSON Schema the final answer must
	// satisfy: the loop asks the model to fix an answer that does not,
	// twice at most (README.md#structured-output).
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`

	// Receipts already recorded for this phase, so a retried attempt
	// never repeats a side effect.
	Receipts []event.ReceiptData `json:"receipts,omitempty"`

	HeartbeatMS int `json:"heartbeat_ms,omitempty"`

	// Where the run stands, so it can continue a session (Prior, ModeRun
	// only) or resume (the rest), exactly as it would in-process; a phase
	// attempt that waited goes on from its own (docs/PROTOCOL.md#waits).
	Prior     []llm.Message `json:"prior,omitempty"`
	History   []llm.Message `json:"history,omitempty"`
	Started   []string      `json:"started,omitempty"` // tool calls that started and never completed
	Iteration int           `json:"iteration,omitempty"`
	Turns     int           `json:"turns,omitempty"`
	Usage     event.Usage   `json:"usage,omitempty"`
	// Continue: the run ran out of turns or iterations, or of fixes of its
	// answer, and is resumed with a fresh budget.
	Continue bool `json:"continue,omitempty"`

	Checkpointed []string `json:"checkpointed,omitempty"` // files this run already checkpointed: not saved again

	// Waits (docs/PROTOCOL.md#waits): the run's approval rules and wait
	// tools, and the waits the run (a phase: this attempt) already has,
	// answered or not, so that a wait asked again is the same wait.
	WaitOptions
	Waits []Wait `json:"waits,omitempty"`
	// Hold: the parent answers hold lines (Config.OnHold), so a question
	// that cannot park is waited for in its process; without it the child
	// declines such questions at once.
	Hold bool `json:"hold,omitempty"`
}

// WaitOptions are a run's approval rules and their deadline, and the wait
// tools it offers: the same in every loop of the run, its phases' and its
// planner's too.
type WaitOptions struct {
	Ask          []string `json:"ask,omitempty"`
	AskTimeoutMS int64    `json:"ask_timeout_ms,omitempty"`
	AskOnTimeout string   `json:"ask_on_timeout,omitempty"`
	AskHuman     bool     `json:"ask_human,omitempty"`
	WaitTools    bool     `json:"wait_tools,omitempty"`
	MaxWaitMS    int64    `json:"max_wait_ms,omitempty"`
}

// Wait is a wait the run recorded, with its answer once it has one;
// Journaled says the run's journal records the answer already.
type Wait struct {
	Waiting    event.RunWaitingData    `json:"waiting"`
	Resolution *event.WaitResolvedData `json:"resolution,omitempty"`
	Journaled  bool                    `json:"journaled,omitempty"`
}

// Modes of a child.
const (
	ModePhase = "phase"
	ModePlan  = "plan"
	ModeRun   = "run"
)

// Model is the model settings of a child.
type Model struct {
	Name        string `json:"name"`
	BaseURL     string `json:"base_url"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	// Record and Replay are cassette paths; Scope keeps this child's
	// exchanges apart from other children's in a shared cassette.
	Record string `json:"record,omitempty"`
	Replay string `json:"replay,omitempty"`
	Scope  string `json:"scope,omitempty"`
	// IdleTimeoutMS and CallTimeoutMS bound waiting for the model: for a
	// data chunk, and for a whole call with its retries (0: the defaults).
	IdleTimeoutMS int64 `json:"idle_timeout_ms,omitempty"`
	CallTimeoutMS int64 `json:"call_timeout_ms,omitempty"`
}

// Control is a later line on the child's stdin.
type Control struct {
	Type string `json:"type"` // ControlAck or ControlCancel
	// For acks: the intent id, whether to proceed, and the receipt when
	// the effect already happened.
	ID      string             `json:"id,omitempty"`
	Proceed bool               `json:"proceed,omitempty"`
	Receipt *event.ReceiptData `json:"receipt,omitempty"`
	Reason  string             `json:"reason,omitempty"`
	// Unknown: an identical earlier effect has an unknown outcome, so this
	// one must not happen (the user may allow it: resume --resend-unknown).
	Unknown bool `json:"unknown,omitempty"`
	// Different: the effect under this key already happened (Receipt)
	// with other arguments (Args), so this one must not happen either.
	Different bool            `json:"different,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"`
	// Token, on the ack of a sync while a tool call is open, is the call's
	// token: the child puts it on the call's later events (event.Token).
	Token string `json:"token,omitempty"`
	// Task, on the ack of a task.request, is how its sub-run ended.
	Task *event.TaskResultData `json:"task,omitempty"`
	// Resolution, on the ack of a hold, is the wait's answer.
	Resolution *event.WaitResolvedData `json:"resolution,omitempty"`
}

// Control message types.
const (
	ControlAck    = "ack"
	ControlCancel = "cancel"
)

// SpecError names the PhaseSpec field that is missing or invalid.
type SpecError struct {
	Field   string // the JSON name, e.g. "run_id"
	Problem string
}

func (e *SpecError) Error() string { return "phase spec: " + e.Field + " " + e.Problem }

// Validate checks the fields a child cannot run without. Both ends call
// it: the parent before starting a child, the child in ReadSpec.
func (s PhaseSpec) Validate() error {
	phase := s.Mode != ModeRun
	switch {
	case s.RunID == "":
		return &SpecError{Field: "run_id", Problem: "is required"}
	case phase && s.PhaseID == "":
		return &SpecError{Field: "phase_id", Problem: "is required"}
	case phase && s.Attempt < 1:
		return &SpecError{Field: "attempt", Problem: fmt.Sprintf("must be at least 1, got %d", s.Attempt)}
	case s.Workspace == "":
		return &SpecError{Field: "workspace", Problem: "is required"}
	case !filepath.IsAbs(s.Workspace):
		return &SpecError{Field: "workspace", Problem: fmt.Sprintf("must be an absolute path, got %q", s.Workspace)}
	}
	switch s.Mode {
	case ModePhase, ModePlan, ModeRun:
		return nil
	case "":
		return &SpecError{Field: "mode", Problem: "is required (phase, plan or run)"}
	default:
		return &SpecError{Field: "mode", Problem: fmt.Sprintf("%q is unknown (want phase, plan or run)", s.Mode)}
	}
}
