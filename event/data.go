package event

import (
	"encoding/json"
	"time"
)

// Usage counts tokens as the provider reported them.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// CostUSD is set on a run's final usage when the model's price is
	// known (docs/PROTOCOL.md#how-a-run-ends).
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// Total is prompt plus completion tokens.
func (u Usage) Total() int { return u.PromptTokens + u.CompletionTokens }

// Price is a model's price in USD per million tokens.
type Price struct {
	PromptPerMTok     float64 `json:"prompt_per_mtok"`
	CompletionPerMTok float64 `json:"completion_per_mtok"`
}

// Cost is what u costs at p, in USD.
func (p Price) Cost(u Usage) float64 {
	return (float64(u.PromptTokens)*p.PromptPerMTok + float64(u.CompletionTokens)*p.CompletionPerMTok) / 1e6
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens + o.PromptTokens, CompletionTokens: u.CompletionTokens + o.CompletionTokens}
}

// RunStartedData opens a run.
type RunStartedData struct {
	Prompt        string   `json:"prompt,omitempty"`
	Model         string   `json:"model,omitempty"`
	Workspace     string   `json:"workspace,omitempty"`
	Tools         []string `json:"tools,omitempty"`
	Resumed       bool     `json:"resumed,omitempty"`
	Until         string   `json:"until,omitempty"`
	MaxIterations int      `json:"max_iterations,omitempty"`
	// Sandbox is the mode the model's commands run in; Network says
	// whether they have the network (docs/PROTOCOL.md#run-events).
	Sandbox string `json:"sandbox,omitempty"`
	Network bool   `json:"network,omitempty"`
	// MCPServers are the MCP servers whose tools the run may offer (§11).
	MCPServers []string `json:"mcp_servers,omitempty"`
	// OutputSchema: the final answer must be JSON valid against the run's
	// output schema; run.completed carries it as data.output.
	OutputSchema bool `json:"output_schema,omitempty"`
	// ParentRunID and Task, on a sub-run's run.started: the run whose
	// task call it answers, and the task's description.
	ParentRunID string `json:"parent_run_id,omitempty"`
	Task        string `json:"task,omitempty"`
}

// RunFinishedData is the data of the last event of a run.
type RunFinishedData struct {
	Status     string `json:"status"`
	Result     string `json:"result"`
	Turns      int    `json:"turns"`
	Usage      Usage  `json:"usage"`
	DurationMS int64  `json:"duration_ms"`
	ExitCode   int    `json:"exit_code"`
	Reason     string `json:"reason,omitempty"` // one of the Reason words
	Detail     string `json:"detail,omitempty"` // the same, said for people
	// ResumeAfter (RFC 3339) is when a run interrupted by a rate limit
	// may go on (docs/PROTOCOL.md#how-a-run-ends).
	ResumeAfter string `json:"resume_after,omitempty"`
	// Output is the final answer as the JSON value the run's output
	// schema asked for (run.completed only).
	Output json.RawMessage `json:"output,omitempty"`
}

// ResumeAt is when a run that ended rate-limited may go on: ResumeAfter,
// or a minute from now if it is unreadable, rather than never.
func (d RunFinishedData) ResumeAt(now time.Time) time.Time {
	if at, err := time.Parse(time.RFC3339, d.ResumeAfter); err == nil {
		return at
	}
	return now.Add(time.Minute)
}

// RunWaitingData is run.waiting: what the run waits for, until when, and
// what the deadline does (docs/PROTOCOL.md#waits). WaitID is the same
// every time the same wait is asked again (after a crash or a wake-up
// without an answer), so it is one wait however often it is recorded.
type RunWaitingData struct {
	WaitID    string `json:"wait_id"`
	Kind      string `json:"kind"`  // WaitApproval, WaitQuestion, WaitSleep, WaitSignal
	Until     string `json:"until"` // RFC 3339
	OnTimeout string `json:"on_timeout"`
	// The tool call that waits (approval) or that asked (the wait tools).
	CallID string          `json:"call_id,omitempty"`
	Tool   string          `json:"tool,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
	Rule   string          `json:"rule,omitempty"` // approval: the rule that asked
	// question
	Question string   `json:"question,omitempty"`
	Options  []string `json:"options,omitempty"`
	// sleep: why (rate_limited for a provider's pause, with ResumeAfter)
	Reason      string `json:"reason,omitempty"`
	ResumeAfter string `json:"resume_after,omitempty"`
	// signal
	Name string `json:"name,omitempty"`
	// Server, on a question, is the MCP server that asked it while the
	// call ran (an elicitation): it can be answered only while the run's
	// process lives.
	Server string `json:"server,omitempty"`
	// Detail says, for people, how to answer.
	Detail string `json:"detail,omitempty"`
}

// UntilTime is the wait's deadline; an unreadable one is now, so that
// the wait times out rather than never.
func (d RunWaitingData) UntilTime(now time.Time) time.Time {
	if at, err := time.Parse(time.RFC3339Nano, d.Until); err == nil {
		return at
	}
	return now
}

// WaitResolvedData is wait.resolved: the one answer a wait got.
type WaitResolvedData struct {
	WaitID  string `json:"wait_id"`
	Outcome string `json:"outcome"` // WaitAllowed … WaitTimedOut
	Via     string `json:"via"`     // ViaTerminal … ViaTimeout
	Who     string `json:"who,omitempty"`
	Answer  string `json:"answer,omitempty"` // a question's answer
	Reason  string `json:"reason,omitempty"` // why it was denied
	// Always allows the approval's rule for the rest of the run.
	Always bool `json:"always,omitempty"`
	// Data is a signal's payload (JSON).
	Data json.RawMessage `json:"data,omitempty"`
	At   string          `json:"at"` // RFC 3339
}

// MessageDeltaData is a fragment of streamed assistant text.
type MessageDeltaData struct {
	Text string `json:"text"`
}

// ToolCall is a tool call as the model asked for it.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// MessageData is a whole conversation message. Role is "user" or
// "assistant"; tool results travel as tool.completed. Persisting these
// events is enough to rebuild the conversation.
type MessageData struct {
	Role      string     `json:"role"`
	Text      string     `json:"text"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Images are given with a user message (--image; attached on resume).
	Images    []Image `json:"images,omitempty"`
	Usage     *Usage  `json:"usage,omitempty"`
	Iteration int     `json:"iteration,omitempty"`
	// DurationMS, on an assistant message, is how long the model call
	// that answered took, the client's retries included: model latency for
	// metrics and traces.
	DurationMS int64 `json:"duration_ms,omitempty"`
}

// ToolStartedData is emitted, and persisted, before a tool runs.
type ToolStartedData struct {
	CallID string          `json:"call_id"`
	Name   string          `json:"name"`
	Args   json.RawMessage `json:"args"`
}

// ToolProgressData is tool.progress: how far the call has come, out of
// Total when the tool knows it (0: unknown), and what it is doing.
type ToolProgressData struct {
	CallID   string  `json:"call_id"`
	Name     string  `json:"name"`
	Progress float64 `json:"progress"`
	Total    float64 `json:"total,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// ToolCompletedData carries the result exactly as the model will see it.
type ToolCompletedData struct {
	CallID    string `json:"call_id"`
	Name      string `json:"name,omitempty"`
	OK        bool   `json:"ok"`
	Output    string `json:"output"`
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
	// Images are the result's images (read_file of one, an MCP tool's
	// image content), given to the model besides Output.
	Images []Image `json:"images,omitempty"`
	// Usage, on a task call's, is what its sub-run spent: the parent's
	// usage counts it (docs/PROTOCOL.md#subagents).
	Usage *Usage `json:"usage,omitempty"`
	// Subagent, on a task call's, is the sub-run's id.
	Subagent string `json:"subagent,omitempty"`
}

// Image is an image a message gives the model (docs/PROTOCOL.md#images):
// what it is, as read from its bytes, and its sha256, by which the store
// keeps its bytes once. Data carries the bytes only on the way from the
// loop to the store, which keeps them and records the event without them.
type Image struct {
	SHA256    string `json:"sha256"`
	MediaType string `json:"media_type"` // image/png, image/jpeg, image/gif or image/webp
	Name      string `json:"name,omitempty"`
	Bytes     int64  `json:"bytes"`
	Width     int    `json:"width"`
	Height    int    `json:"height"`
	Data      []byte `json:"data,omitempty"`
}

// ArtifactData describes a file a tool wrote.
type ArtifactData struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// ReceiptData proves a side effect happened.
type ReceiptData struct {
	Type    string          `json:"type"`
	Key     string          `json:"key"`
	Details json.RawMessage `json:"details,omitempty"`
}

// IterationData marks a Ralph loop iteration.
type IterationData struct {
	Iteration     int    `json:"iteration"`
	MaxIterations int    `json:"max_iterations"`
	Promise       string `json:"promise,omitempty"`
	Completed     bool   `json:"completed,omitempty"`
	Reason        string `json:"reason,omitempty"`
}

// RetryData reports a model call that will be retried.
type RetryData struct {
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	DelayMS     int64  `json:"delay_ms"`
	Error       string `json:"error"`
	Status      int    `json:"status,omitempty"`
}

// HookCompletedData is one run of a hook (docs/PROTOCOL.md#hooks): the
// event that ran it, its command, how it exited (-1: it did not start,
// or was killed at its timeout) and what it decided, recorded before the
// run acts on it. Key is what it was run for, unique in the run (a tool
// call at a turn, a wait, the run's start): a resumed run acts on the
// records of a key it finds, and runs only the hooks that have none.
// The decision's reason, context and new arguments (updated_input, by
// agent's field names: what runs is what the journal says) are kept for
// that.
type HookCompletedData struct {
	Event        string          `json:"event"`
	Command      string          `json:"command"`
	ExitCode     int             `json:"exit_code"`
	Decision     string          `json:"decision,omitempty"` // allow, deny, ask, block or stop
	DurationMS   int64           `json:"duration_ms"`
	Key          string          `json:"key,omitempty"`
	CallID       string          `json:"call_id,omitempty"`
	Tool         string          `json:"tool,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	Context      string          `json:"context,omitempty"`
	UpdatedInput json.RawMessage `json:"updated_input,omitempty"`
	TimedOut     bool            `json:"timed_out,omitempty"`
}

// WarningData is a diagnostic worth showing to a person.
type WarningData struct {
	Message string `json:"message"`
}

// RunnerResultData is the last event of an `agent runner` child, and how
// a loop run in-process ended, in the same words.
type RunnerResultData struct {
	Status string `json:"status"` // completed, failed or cancelled
	Output string `json:"output"`
	// Reason is one of the Reason words: a provider failure is
	// ReasonProvider, whatever the child's exit code.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	Turns  int    `json:"turns"`
	Usage  Usage  `json:"usage"`
	// ResumeAfter, with ReasonRateLimited, is when to go on (RFC 3339).
	ResumeAfter string `json:"resume_after,omitempty"`
}

// EffectIntentData announces a side effect the child wants to start; it
// waits for the parent's ack before acting.
type EffectIntentData struct {
	ID          string          `json:"id"`
	CallID      string          `json:"call_id,omitempty"` // the tool call that asks (see adapter/trust.go)
	Tool        string          `json:"tool"`
	Key         string          `json:"key"`
	ReceiptType string          `json:"receipt_type,omitempty"`
	Args        json.RawMessage `json:"args,omitempty"`
}

// TaskRequestData asks the parent to run the sub-run of a task call
// (docs/PROTOCOL.md#subagents), carrying the call's token; the parent's
// ack carries a TaskResultData.
type TaskRequestData struct {
	ID          string `json:"id"`
	CallID      string `json:"call_id"`
	Description string `json:"description"`
	Prompt      string `json:"prompt"`
	// Resume: the call started before the parent stopped; its sub-run, if
	// it has one, goes on (or gives the answer it already gave).
	Resume bool `json:"resume,omitempty"`
	// MaxTokens and MaxCost are the sub-run's share of what the parent's
	// budget has left; 0: no bound, below 0: nothing left.
	MaxTokens int     `json:"max_tokens,omitempty"`
	MaxCost   float64 `json:"max_cost,omitempty"`
}

// TaskResultData is how a task call's sub-run ended, as the call's result.
type TaskResultData struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"` // completed, failed, cancelled, or waiting (parked: the parent parks too)
	Output string `json:"output"` // its final answer
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	Usage  Usage  `json:"usage"`
}

// EffectFailedData says a side effect certainly did not happen (the
// server refused it before accepting anything), so its intent may be
// retried: the store forgets the intent.
type EffectFailedData struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// EffectUnknownData says a side effect that went ahead may or may not
// have happened. Its intent becomes unknown: never retried on its own, and
// no later receipt makes it done (the user may resend it: resume
// --resend-unknown).
type EffectUnknownData struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// LearningData is something worth knowing in later phases.
type LearningData struct {
	Text string `json:"text"`
}

// ApproachData is an approach that failed, kept as a guardrail.
type ApproachData struct {
	Approach string `json:"approach"`
	Why      string `json:"why"`
}

// PlanData carries a plan (mission.json) as JSON.
type PlanData struct {
	Plan json.RawMessage `json:"plan"`
	Path string          `json:"path,omitempty"`
}

// PhaseData describes a phase transition. The event's PhaseID and
// Attempt say which phase and attempt.
type PhaseData struct {
	Title string `json:"title,omitempty"`
	// Status is how the attempt ended: passed, failed, crashed, timeout,
	// interrupted or cancelled.
	Status     string   `json:"status,omitempty"`
	Output     string   `json:"output,omitempty"` // the phase's final message, for later phases
	Reason     string   `json:"reason,omitempty"`
	WillRetry  bool     `json:"will_retry,omitempty"`
	Reasons    []string `json:"reasons,omitempty"`
	DurationMS int64    `json:"duration_ms,omitempty"`
	Usage      *Usage   `json:"usage,omitempty"`
}

// VerificationData is the findings of one verification (docs/PROTOCOL.md#verification-findings).
type VerificationData struct {
	VerificationID        string   `json:"verification_id"`
	TaskID                string   `json:"task_id"`
	TaskType              string   `json:"task_type"`
	EvidenceType          string   `json:"evidence_type"`
	EvidenceRefs          []string `json:"evidence_refs"`
	VerifierVersion       string   `json:"verifier_version"`
	VerificationTimestamp string   `json:"verification_timestamp"`
	Status                string   `json:"status"` // pass, fail or warn
	Notes                 []string `json:"notes"`
	Path                  string   `json:"path,omitempty"`
}

// CheckpointData is a file as it was before a run first changed it, saved
// so `agent rewind` can put it back. The store numbers a run's checkpoints
// 1, 2, 3… in the order it records them.
type CheckpointData struct {
	Path    string `json:"path"`           // workspace-relative, slash separated
	Existed bool   `json:"existed"`        // false: the run created the file
	Blob    string `json:"blob,omitempty"` // sha256 of the saved content in $AGENT_HOME/blobs
	Mode    uint32 `json:"mode,omitempty"` // permission bits of the file
	Bytes   int64  `json:"bytes"`
	CallID  string `json:"call_id,omitempty"` // the tool call about to change it
	Tool    string `json:"tool,omitempty"`
}

// SyncData names a sync request; the parent's ack carries the same id.
type SyncData struct {
	ID string `json:"id"`
}

// HoldData is hold: the ack's id, and the wait (recorded by the child's
// run.waiting before it) whose answer the parent sends.
type HoldData struct {
	ID     string `json:"id"`
	WaitID string `json:"wait_id"`
}

// ContextCompactedData is the data of context.compacted (docs/PROTOCOL.md#run-events):
// a span of the conversation was replaced by a summary so the next
// request fits the model's context window. The span is messages
// [From, From+Count) of the iteration's conversation as it stood (0 is
// its first user message, always kept); Prior says the session's earlier
// runs were replaced too. The store fills in the seqs of the first and
// last message replaced.
// What made a compaction: the request would not have fit the window; the
// provider refused it as too long; the run's options asked for it (agent
// chat's /compact: the session's earlier conversation, whatever its size).
const (
	CompactWindow       = "window"
	CompactContextError = "context_error"
	CompactAsked        = "asked"
)

type ContextCompactedData struct {
	Iteration       int    `json:"iteration,omitempty"`
	From            int    `json:"from"`
	Count           int    `json:"count"`
	Prior           bool   `json:"prior,omitempty"`
	ReplacedSeqFrom int64  `json:"replaced_seq_from,omitempty"`
	ReplacedSeqTo   int64  `json:"replaced_seq_to,omitempty"`
	TokensBefore    int    `json:"tokens_before"`
	TokensAfter     int    `json:"tokens_after"`
	Summary         string `json:"summary"`
	// Trigger is CompactWindow, CompactContextError or CompactAsked.
	Trigger string `json:"trigger"`
	// Usage is what the summary request cost.
	Usage Usage `json:"usage"`
}
