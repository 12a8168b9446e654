// Package gateway is the local daemon (DESIGN.md §9): HTTP and WebSocket
// on one port, sessions with replayable event streams, runs isolated in
// `agent runner` children, checkpoints and rewind, and token auth.
package gateway

import (
	"encoding/json"
	"time"
)

// Protocol is the protocol version this gateway speaks.
const Protocol = 1

// Frame types.
const (
	FrameReq   = "req"
	FrameRes   = "res"
	FrameEvent = "event"
)

// Request is a client's frame: {"type":"req","id":"c1","method":"run.start","params":{…}}.
type Request struct {
	Type   string          `json:"type"`
	ID     string          `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Response answers one Request.
type Response struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	OK     bool   `json:"ok"`
	Result any    `json:"result,omitempty"`
	Error  *Error `json:"error,omitempty"`
}

// EventFrame carries one persisted event: {"type":"event","event":"tool.started","session_id":…,"run_id":…,"seq":42,"ts":…,"data":{…}}.
type EventFrame struct {
	Type      string          `json:"type"`
	Event     string          `json:"event"`
	SessionID string          `json:"session_id,omitempty"`
	RunID     string          `json:"run_id,omitempty"`
	PhaseID   string          `json:"phase_id,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	Seq       int64           `json:"seq"`
	TS        time.Time       `json:"ts"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// Error is a failed request. Codes are stable strings clients switch on.
type Error struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Error codes.
const (
	CodeUnauthorized   = "unauthorized"   // no token, a wrong token, or a token in the URL
	CodeForbidden      = "forbidden"      // a foreign Origin
	CodeBadRequest     = "bad_request"    // malformed frame or params
	CodeUnknownMethod  = "unknown_method" // method not in the supported list
	CodeNotFound       = "not_found"      // no such session, run or checkpoint
	CodeSessionLocked  = "session_locked" // another client holds the session's write lock
	CodeConflict       = "conflict"       // e.g. the run already ended
	CodeUnavailable    = "unavailable"    // draining or over capacity; retryable
	CodeInternal       = "internal"       // a bug or a storage failure
	CodeProtocol       = "protocol"       // unsupported protocol version, or no connect first
	CodeNotConnected   = "not_connected"  // a method before connect
	CodeSchedulerOff   = "scheduler_disabled"
	CodeInvalidJob     = "invalid_job"
	CodeInvalidOptions = "invalid_options"
)

// Methods of protocol v1.
const (
	MethodConnect          = "connect"
	MethodSessionCreate    = "session.create"
	MethodSessionResume    = "session.resume"
	MethodSessionFork      = "session.fork"
	MethodSessionList      = "session.list"
	MethodSessionGet       = "session.get"
	MethodSessionLock      = "session.lock"
	MethodSessionRelease   = "session.release"
	MethodRunStart         = "run.start"
	MethodRunCancel        = "run.cancel"
	MethodRunGet           = "run.get"
	MethodCheckpointList   = "checkpoint.list"
	MethodCheckpointRewind = "checkpoint.rewind"
	MethodJobCreate        = "job.create"
	MethodJobUpdate        = "job.update"
	MethodJobPause         = "job.pause"
	MethodJobResume        = "job.resume"
	MethodJobDelete        = "job.delete"
	MethodJobList          = "job.list"
	MethodJobRunNow        = "job.run_now"
	MethodJobGetRuns       = "job.get_runs"
)

// ConnectParams is the first frame's params.
type ConnectParams struct {
	Protocol int    `json:"protocol"`
	Token    string `json:"token,omitempty"` // or an Authorization: Bearer header on the upgrade
}

// ConnectResult is the reply to connect.
type ConnectResult struct {
	Server   string   `json:"server"` // "agent VERSION"
	Protocol int      `json:"protocol"`
	Methods  []string `json:"methods"`
	Events   []string `json:"events"`
}

// RunStartParams starts a run in a session.
type RunStartParams struct {
	SessionID      string     `json:"session_id"`
	Input          string     `json:"input"`
	Workspace      string     `json:"workspace,omitempty"` // absolute; default the gateway's working directory
	Options        RunOptions `json:"options"`
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
}

// RunOptions are a run's settings; zero values take the gateway's defaults.
type RunOptions struct {
	Model         string   `json:"model,omitempty"`
	BaseURL       string   `json:"base_url,omitempty"`
	MaxTurns      int      `json:"max_turns,omitempty"`
	ModelAttempts int      `json:"model_attempts,omitempty"`
	AllowTools    []string `json:"allow_tools,omitempty"`
	DenyTools     []string `json:"deny_tools,omitempty"`
	Until         string   `json:"until,omitempty"`
	MaxIterations int      `json:"max_iterations,omitempty"`
	Timeout       string   `json:"timeout,omitempty"` // Go duration; default the gateway's run timeout
	Harness       bool     `json:"harness,omitempty"` // plan and run phases instead of one loop
	Parallel      int      `json:"parallel,omitempty"`
	Replay        string   `json:"replay,omitempty"` // cassette path, for offline runs and tests
}
