package e2etest

import (
	"encoding/json"
	"time"

	"agent/event"
	"agent/mcp"
	"agent/store"
)

// The JSON the CLI prints, as a script reads it: these are the shapes it
// prints (store.RunView and RunDetail, store.SessionView, its pruneView,
// mcp.Listing's JSON), declared again on the reading side, as any client
// of the CLI would, so that a change of what it prints fails a test.

// RunView is a run as 'agent runs show --json' and 'agent runs list
// --json' print it.
type RunView struct {
	ID                string               `json:"id"`
	Kind              string               `json:"kind"`
	SessionID         string               `json:"session_id,omitempty"`
	Status            string               `json:"status"`
	Prompt            string               `json:"prompt"`
	Workspace         string               `json:"workspace"`
	Model             string               `json:"model"`
	Sandbox           string               `json:"sandbox,omitempty"`
	Result            string               `json:"result,omitempty"`
	Reason            string               `json:"reason,omitempty"`
	Detail            string               `json:"detail,omitempty"`
	ExitCode          int                  `json:"exit_code"`
	Turns             int                  `json:"turns"`
	Usage             event.Usage          `json:"usage"`
	Iteration         int                  `json:"iteration,omitempty"`
	MaxIterations     int                  `json:"max_iterations,omitempty"`
	CompletionPromise string               `json:"completion_promise,omitempty"`
	LeaseOwner        string               `json:"lease_owner,omitempty"`
	LeaseExpiresAt    *time.Time           `json:"lease_expires_at,omitempty"`
	LeaseHolderGone   bool                 `json:"lease_holder_gone,omitempty"`
	CreatedAt         time.Time            `json:"created_at"`
	FinishedAt        *time.Time           `json:"finished_at,omitempty"`
	PrunedAt          *time.Time           `json:"pruned_at,omitempty"`
	Phases            []store.BoardPhase   `json:"phases,omitempty"`
	Receipts          []store.BoardReceipt `json:"receipts,omitempty"`
	Learnings         []string             `json:"learnings,omitempty"`
	Messages          []MessageView        `json:"messages,omitempty"`
	ToolCalls         []ToolCallView       `json:"tool_calls,omitempty"`
	Config            json.RawMessage      `json:"config,omitempty"`
}

// MessageView is one message of a run's transcript in RunView.
type MessageView struct {
	Iteration  int              `json:"iteration,omitempty"`
	Role       string           `json:"role"`
	Content    string           `json:"content"`
	ToolCalls  []event.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

// ToolCallView is one tool call of a run in RunView.
type ToolCallView struct {
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args,omitempty"`
	Status    string          `json:"status"`
	Error     string          `json:"error,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
}

// SessionView is a session as 'agent sessions list|show --json' print it.
type SessionView struct {
	ID            string    `json:"id"`
	Title         string    `json:"title,omitempty"`
	ParentID      string    `json:"parent_id,omitempty"`
	ForkedFromSeq int64     `json:"forked_from_seq,omitempty"`
	JobID         string    `json:"job_id,omitempty"`
	LastSeq       int64     `json:"last_seq"`
	Runs          int       `json:"runs"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	RunList       []RunView `json:"run_list,omitempty"`
}

// PruneView is what 'agent prune --json' prints.
type PruneView struct {
	DryRun         bool      `json:"dry_run"`
	OlderThan      string    `json:"older_than"`
	Before         time.Time `json:"before"`
	Runs           int       `json:"runs"`
	RunIDs         []string  `json:"run_ids"`
	Deltas         int64     `json:"deltas"`
	ToolOutputs    int64     `json:"tool_outputs"`
	ToolMessages   int64     `json:"tool_messages"`
	Bytes          int64     `json:"bytes"`
	Blobs          int       `json:"blobs"`
	BlobBytes      int64     `json:"blob_bytes"`
	BlobsSkipped   string    `json:"blobs_skipped,omitempty"`
	DatabaseBefore int64     `json:"database_bytes_before,omitempty"`
	DatabaseAfter  int64     `json:"database_bytes_after,omitempty"`
}

// ServerListing is one line of 'agent mcp list --json'.
type ServerListing struct {
	Server    string         `json:"server"`
	Source    string         `json:"source"`
	Transport string         `json:"transport"`
	Required  bool           `json:"required"`
	OK        bool           `json:"ok"`
	Error     string         `json:"error,omitempty"`
	Tools     []mcp.ToolInfo `json:"tools"`
}
