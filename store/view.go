package store

import (
	"context"
	"encoding/json"
	"time"

	"agent/event"
)

// RunView is a run as every front-end shows it to programs: `agent runs
// list|show --json`, the gateway's RunInfo (run.get, session.get, GET
// /v1/runs/ID) and agent mcp serve's tools (mcpserve.Report). One shape,
// one status word (ShownStatus) and one rule for a holder that is gone,
// whoever asks. id and run_id are the same: the CLI has always said id,
// the gateway and MCP run_id, and scripts read both.
type RunView struct {
	ID                string      `json:"id"`
	Kind              string      `json:"kind"` // KindRun or KindHarness
	SessionID         string      `json:"session_id,omitempty"`
	Status            string      `json:"status"`
	Prompt            string      `json:"prompt"`
	Workspace         string      `json:"workspace"`
	Model             string      `json:"model"`
	Result            string      `json:"result,omitempty"`
	Reason            string      `json:"reason,omitempty"` // one word, as in the terminal event
	Detail            string      `json:"detail,omitempty"` // the reason, for people
	ExitCode          int         `json:"exit_code"`
	Turns             int         `json:"turns"`
	Usage             event.Usage `json:"usage"`
	Iteration         int         `json:"iteration,omitempty"`
	MaxIterations     int         `json:"max_iterations,omitempty"`
	CompletionPromise string      `json:"completion_promise,omitempty"`
	// The lease of a running run, and whether its holder is gone
	// (HolderGone).
	LeaseOwner     string     `json:"lease_owner,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	HolderGone     bool       `json:"lease_holder_gone,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	PrunedAt       *time.Time `json:"pruned_at,omitempty"` // agent prune removed its deltas and tool outputs
	RunID          string     `json:"run_id"`
	Reclaims       int        `json:"reclaims,omitempty"` // times a rescuer took it over
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
	// Resumable: resume (agent resume, run.resume) can continue it, since
	// it ended without completing or its holder is gone.
	Resumable bool `json:"resumable,omitempty"`
	// A sub-run's parent and its task's description (the task tool).
	ParentRunID string `json:"parent_run_id,omitempty"`
	Task        string `json:"task,omitempty"`
}

// RunView is r as the front-ends show it.
func (db *DB) RunView(r *Run) RunView {
	v := RunView{
		ID: r.ID, RunID: r.ID, SessionID: r.SessionID, Kind: r.Kind, Status: r.ShownStatus(), Prompt: r.Prompt,
		Workspace: r.Workspace, Model: r.Model, Result: r.Result, Reason: r.Reason, Detail: r.Detail, ExitCode: r.ExitCode,
		Turns: r.Turns, Usage: r.Usage, Iteration: r.IterationCount, MaxIterations: r.MaxIterations,
		CompletionPromise: r.CompletionPromise, Reclaims: r.Reclaims, IdempotencyKey: r.IdempotencyKey,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FinishedAt: timePtr(r.FinishedAt), PrunedAt: timePtr(r.PrunedAt),
		ParentRunID: r.ParentRunID, Task: r.Description,
	}
	if r.Status == event.StatusRunning && r.LeaseOwner != "" {
		v.LeaseOwner, v.LeaseExpiresAt, v.HolderGone = r.LeaseOwner, timePtr(r.LeaseExpiresAt), db.HolderGone(r)
	}
	v.Resumable = r.Status == event.StatusFailed || r.Status == event.StatusInterrupted || v.HolderGone
	return v
}

// RunViews are runs as the front-ends show them.
func (db *DB) RunViews(runs []Run) []RunView {
	views := make([]RunView, len(runs))
	for i := range runs {
		views[i] = db.RunView(&runs[i])
	}
	return views
}

// HolderGone reports whether the process that holds a running run is
// gone: its lease expired, or it is provably dead. Nothing drives the run
// any more, and resume takes it over at once.
func (db *DB) HolderGone(r *Run) bool {
	return r.Status == event.StatusRunning && r.LeaseOwner != "" && db.abandoned(*r, db.now())
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// NotificationView is a notification as runs show tells it.
type NotificationView struct {
	Event string `json:"event"` // waiting, completed, failed, job_failed
	// Channel says where, for people (config.Notify.Channel, without a
	// webhook's secret path); Block is the [[notify]] block it is said from.
	Channel   string          `json:"channel"`
	Block     json.RawMessage `json:"-"`
	State     string          `json:"state"` // queued, pending, done, unknown, failed, skipped
	Tries     int             `json:"tries"`
	LastError string          `json:"last_error,omitempty"`
}

// RunDetail is a run with its story, as `agent runs show` tells it: a
// single run's transcript and side effects, or a harness's phase board
// and learnings (its messages come from many phases).
type RunDetail struct {
	RunView
	Sandbox   string         `json:"sandbox,omitempty"` // e.g. "workspace-write, network off", from its options
	Phases    []BoardPhase   `json:"phases,omitempty"`
	Receipts  []BoardReceipt `json:"receipts,omitempty"`
	Learnings []string       `json:"learnings,omitempty"` // "PHASE: text"
	// Waiting are the waits nobody has answered (docs/PROTOCOL.md#waits).
	Waiting []event.RunWaitingData `json:"waiting,omitempty"`
	// Subagents are the runs its task calls started, oldest first.
	Subagents []RunView `json:"subagents,omitempty"`
	// Notifications are what the run's [[notify]] blocks were told, and
	// how each delivery stands (docs/PROTOCOL.md#notifications).
	Notifications []NotificationView `json:"notifications,omitempty"`
	Messages      []MessageView      `json:"messages,omitempty"`
	ToolCalls     []ToolCallView     `json:"tool_calls,omitempty"`
	Config        json.RawMessage    `json:"config,omitempty"`
}

// MessageView is one message of a run's transcript.
type MessageView struct {
	Iteration  int              `json:"iteration,omitempty"`
	Role       string           `json:"role"`
	Content    string           `json:"content"`
	ToolCalls  []event.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
	Images     []event.Image    `json:"images,omitempty"` // given to the model with it, without their bytes
}

// ToolCallView is one tool call of a run, without its output.
type ToolCallView struct {
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args,omitempty"`
	Status    string          `json:"status"`
	Error     string          `json:"error,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
}

// RunDetail reads r's story. Sandbox is left to who reads r's options.
func (db *DB) RunDetail(ctx context.Context, r *Run) (RunDetail, error) {
	d := RunDetail{RunView: db.RunView(r), Config: r.Config}
	waits, err := db.Waits(ctx, r.ID)
	if err != nil {
		return d, err
	}
	for _, w := range waits {
		if w.Resolution == nil {
			d.Waiting = append(d.Waiting, w.Waiting)
		}
	}
	ns, err := db.Notifications(ctx, r.ID)
	if err != nil {
		return d, err
	}
	for _, n := range ns {
		d.Notifications = append(d.Notifications, NotificationView{Event: n.Event, Block: n.Channel, State: n.State, Tries: n.Tries, LastError: n.LastError})
	}
	subs, err := db.SubRuns(ctx, r.ID)
	if err != nil {
		return d, err
	}
	d.Subagents = db.RunViews(subs)
	if r.Kind == KindHarness {
		board, err := db.Board(ctx, r)
		if err != nil {
			return d, err
		}
		d.Phases = board.Phases
		for _, l := range board.Learnings {
			d.Learnings = append(d.Learnings, l.PhaseID+": "+l.Text)
		}
		return d, nil
	}
	receipts, err := db.Receipts(ctx, r.ID, "")
	if err != nil {
		return d, err
	}
	if len(receipts) > 0 {
		d.Receipts = BoardReceipts(r, receipts)
	}
	msgs, err := db.Messages(ctx, r.ID)
	if err != nil {
		return d, err
	}
	for _, m := range msgs {
		d.Messages = append(d.Messages, MessageView{Iteration: m.Iteration, Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Images: m.Images})
	}
	calls, err := db.ToolCalls(ctx, r.ID)
	if err != nil {
		return d, err
	}
	for _, tc := range calls {
		d.ToolCalls = append(d.ToolCalls, ToolCallView{CallID: tc.CallID, Name: tc.Name, Args: tc.Args, Status: tc.Status, Error: tc.Error, Truncated: tc.Truncated})
	}
	return d, nil
}

// SessionView is a session as the front-ends show it to programs: `agent
// sessions list|show|fork --json` and the gateway's SessionInfo. As for
// runs, id and session_id are the same: the CLI's name and the gateway's.
type SessionView struct {
	ID            string    `json:"id"`
	SessionID     string    `json:"session_id"`
	Title         string    `json:"title,omitempty"`
	ParentID      string    `json:"parent_id,omitempty"`
	ForkedFromSeq int64     `json:"forked_from_seq,omitempty"`
	JobID         string    `json:"job_id,omitempty"` // the scheduled job whose tick created it
	Local         bool      `json:"local,omitempty"`  // agent chat's, kept without a gateway
	LastSeq       int64     `json:"last_seq"`
	Runs          int       `json:"runs"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// View is s as the front-ends show it.
func (s *Session) View() SessionView {
	return SessionView{ID: s.ID, SessionID: s.ID, Title: s.Title, ParentID: s.ParentID, ForkedFromSeq: s.ForkedFromSeq,
		JobID: s.JobID, Local: s.Local, LastSeq: s.LastSeq, Runs: s.Runs, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}
