// Package event defines the JSON-lines envelope every part of agent speaks:
// the runner writes it, the adapter and gateway read it, the store keeps it.
package event

import (
	"encoding/json"
	"fmt"
	"time"
)

// Version is the envelope version written in every event's "v" field.
const Version = 1

// Event types of protocol v1 (docs/PROTOCOL.md#run-events). A new type is added here and
// to Types (or ProtocolTypes); the tests of every consumer that switches
// on types (the store's projector, the console's printer and board, the
// trace, the web view) then say which of them must handle it.
const (
	RunStarted     = "run.started"
	RunCompleted   = "run.completed"
	RunFailed      = "run.failed"
	RunCancelled   = "run.cancelled"
	RunInterrupted = "run.interrupted"

	PlanCreated    = "plan.created"
	PhaseStarted   = "phase.started"
	PhaseCompleted = "phase.completed"
	PhaseFailed    = "phase.failed"

	IterationStarted   = "iteration.started"
	IterationCompleted = "iteration.completed"

	MessageDelta     = "message.delta"
	MessageCompleted = "message.completed"

	ToolStarted   = "tool.started"
	ToolCompleted = "tool.completed"
	// ToolProgress is how far a running call has come (an MCP server's
	// progress notifications), at most one a second per call.
	ToolProgress = "tool.progress"

	ArtifactCreated       = "artifact.created"
	ReceiptRecorded       = "receipt.recorded"
	LearningRecorded      = "learning.recorded"
	ApproachFailed        = "approach.failed"
	VerificationCompleted = "verification.completed"
	CheckpointCreated     = "checkpoint.created"
	RewindCompleted       = "rewind.completed"
	ContextCompacted      = "context.compacted"

	Retry     = "retry"
	Heartbeat = "heartbeat"
	Warning   = "warning"

	// A run stops to wait for a person or a time (docs/PROTOCOL.md#waits):
	// run.waiting ends the drive, without ending the run; wait.resolved
	// records the one answer, before the run goes on.
	RunWaiting   = "run.waiting"
	WaitResolved = "wait.resolved"

	// HookCompleted records one run of a hook (docs/PROTOCOL.md#hooks)
	// and what it decided, before the run acts on it: a resumed run acts
	// on the record and does not run the hook again.
	HookCompleted = "hook.completed"

	// A side effect's outcome other than its receipt, recorded as run
	// events: it failed before it happened, or it went ahead and may or may
	// not have happened (the send broke after it could have been taken).
	EffectFailed  = "effect.failed"
	EffectUnknown = "effect.unknown"

	// Runner protocol only (docs/PROTOCOL.md#runner-protocol-only-types): never shown as run events.
	EffectIntent = "effect.intent"
	RunnerResult = "runner.result"
	// Sync asks the parent to ack once every earlier event is persisted,
	// so a child never runs a tool whose tool.started could still be lost.
	Sync = "sync"
	// TaskRequest asks the parent to run a task call's sub-run (the task
	// tool): only the parent keeps the store; its ack carries the result.
	TaskRequest = "task.request"
	// Hold asks the parent to wait, in its process, for the answer to a
	// question the child recorded that cannot park (an MCP server's, asked
	// while a call runs), and to send it on the child's stdin.
	Hold = "hold"
)

// Event is one line of the stream. Seq is assigned by the process that
// persists the event, never by a child, so it is zero until then.
type Event struct {
	V         int             `json:"v"`
	Seq       int64           `json:"seq,omitempty"`
	TS        time.Time       `json:"ts"`
	RunID     string          `json:"run_id,omitempty"`
	SessionID string          `json:"session_id,omitempty"`
	PhaseID   string          `json:"phase_id,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data,omitempty"`
	// Subagent, on an event of a sub-run shown in its parent's stream
	// (the task tool, docs/PROTOCOL.md#subagents), is the sub-run's id;
	// RunID is then the parent's. Such an event changes nothing of the
	// parent's state: the sub-run's own journal holds the original.
	Subagent string `json:"subagent,omitempty"`
	// Blob, in the runner protocol only, says the data is too large for a
	// line and is in the blob store under this sha256 instead.
	Blob string `json:"blob,omitempty"`
	// Token, in the runner protocol only, is the secret the parent gave
	// the child for its open tool call, on the ack of the sync after its
	// tool.started: only the child reads its stdin, so it marks the
	// call's intent, outcomes and end as the child's own.
	Token string `json:"token,omitempty"`
}

// New builds an event of the given type with data marshalled to JSON.
// Data types in this package always marshal, so a failure is a programming error.
func New(typ string, data any) Event {
	e := Event{V: Version, TS: time.Now().UTC(), Type: typ}
	if data != nil {
		raw, err := json.Marshal(data)
		if err != nil {
			panic(fmt.Sprintf("event %s: marshal data: %v", typ, err))
		}
		e.Data = raw
	}
	return e
}

// Decode unmarshals the event's data into v.
func (e Event) Decode(v any) error {
	if len(e.Data) == 0 {
		return fmt.Errorf("event %s has no data", e.Type)
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("decode %s data: %w", e.Type, err)
	}
	return nil
}

// Types are the run events, every one of them: what a run's journal holds
// and its clients are shown.
var Types = []string{
	RunStarted, RunCompleted, RunFailed, RunCancelled, RunInterrupted,
	PlanCreated, PhaseStarted, PhaseCompleted, PhaseFailed,
	IterationStarted, IterationCompleted,
	MessageDelta, MessageCompleted,
	ToolStarted, ToolCompleted, ToolProgress,
	ArtifactCreated, ReceiptRecorded, LearningRecorded, ApproachFailed, VerificationCompleted,
	CheckpointCreated, RewindCompleted, ContextCompacted,
	Retry, Heartbeat, Warning,
	EffectFailed, EffectUnknown,
	RunWaiting, WaitResolved,
	HookCompleted,
}

// ProtocolTypes are the runner protocol's own lines, never run events.
var ProtocolTypes = []string{EffectIntent, RunnerResult, Sync, TaskRequest, Hold}

// IsTerminal reports whether t ends a run.
func IsTerminal(t string) bool {
	switch t {
	case RunCompleted, RunFailed, RunCancelled, RunInterrupted:
		return true
	}
	return false
}
