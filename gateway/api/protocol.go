// Package gateway is the local daemon (docs/PROTOCOL.md#gateway-protocol-v1): HTTP and WebSocket
// on one port, sessions with replayable event streams, runs isolated in
// `agent runner` children, checkpoints and rewind, and token auth.
package api

import (
	"encoding/json"
	"time"

	"agent/scheduler"
	"agent/store"
	"agent/supervisor"
)

// Protocol is the protocol version this gateway speaks.
const Protocol = 1

// DefaultListen is where a gateway listens, and its clients look for it,
// unless told otherwise.
const DefaultListen = "127.0.0.1:7420"

// MaxFrame is the largest frame a gateway takes from a client: a
// run.start's images, base64-encoded, must fit in it with the rest.
const MaxFrame = 4 << 20

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
// Job events are the exception: they belong to no session, are not
// persisted as events, and have seq 0 (see "Scheduled jobs" below).
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
	// Subagent: the event is a sub-run's, shown in its parent's stream
	// (docs/PROTOCOL.md#subagents).
	Subagent string `json:"subagent,omitempty"`
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
	MethodSessionDelete    = "session.delete"
	MethodRunStart         = "run.start"
	MethodRunCancel        = "run.cancel"
	MethodRunResume        = "run.resume"
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
	// Scheduling says, for a gateway with scheduled jobs, whether they
	// fire: without --scheduler they can be managed but never run.
	Scheduling *bool `json:"scheduling,omitempty"`
}

// RunStartParams starts a run in a session.
// Without SessionID the gateway checks the options, then creates a
// session for the run, titled Title (default: the input's first line);
// a run refused leaves no session behind.
type RunStartParams struct {
	SessionID      string     `json:"session_id,omitempty"`
	Title          string     `json:"title,omitempty"` // of the session it creates
	Input          string     `json:"input"`
	Workspace      string     `json:"workspace,omitempty"` // absolute; default the gateway's working directory
	Options        RunOptions `json:"options"`
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
}

// FrameError is an error that answers no request: a first frame that is
// not connect, or a subscriber that fell too far behind. The connection
// closes after it.
const FrameError = "error"

// ErrorFrame is {"type":"error","error":{…},"session_id":…,"after_seq":N}.
// For CodeSlowConsumer, SessionID and AfterSeq say where to resume: the
// last event this connection was sent for that session.
type ErrorFrame struct {
	Type      string `json:"type"`
	Error     *Error `json:"error"`
	SessionID string `json:"session_id,omitempty"`
	AfterSeq  int64  `json:"after_seq,omitempty"`
}

// More error codes.
const (
	// CodeSlowConsumer: the connection fell too far behind a session's
	// live stream and is closed; reconnect and session.resume with the
	// ErrorFrame's after_seq. Nothing is lost: every event is persisted.
	CodeSlowConsumer = "slow_consumer"
)

// SessionCreateParams are session.create's params.
type SessionCreateParams struct {
	Title string `json:"title,omitempty"`
}

// SessionListParams are session.list's params; a zero Limit means 100.
// Sessions a job's tick created are listed only with IncludeJobs.
type SessionListParams struct {
	Limit       int  `json:"limit,omitempty"`
	IncludeJobs bool `json:"include_jobs,omitempty"`
}

// SessionParams name a session: session.get, session.lock, session.release.
// SessionID may be a unique prefix.
type SessionParams struct {
	SessionID string `json:"session_id"`
}

// SessionResumeParams attach the connection to a session's stream: every
// persisted event with seq > AfterSeq, then live events.
//
// message.delta frames are streamed before they are durable: the store
// writes them with the session's next other event, as the fast path does,
// at seqs reserved beforehand. Across reconnects to a running gateway
// nothing is lost either way. After a gateway crash the deltas of the
// reply in flight are gone, and each of their seqs holds a lost delta
// ({"text":"","lost":true}): no seq is given to another event and none is
// missing; the message.completed that follows carries the whole text.
type SessionResumeParams struct {
	SessionID string `json:"session_id"`
	AfterSeq  int64  `json:"after_seq"`
}

// SessionResumeResult answers session.resume. It is sent BEFORE the
// replayed event frames: events with seq <= LastSeq are the replay, the
// rest are live. Seqs arrive strictly increasing, with no gap and no
// duplicate.
type SessionResumeResult struct {
	SessionID string `json:"session_id"`
	AfterSeq  int64  `json:"after_seq"`
	LastSeq   int64  `json:"last_seq"` // the session's last seq when the stream was attached
}

// SessionForkParams fork a session: the new session starts with the
// source's events up to Seq (0: all of them).
type SessionForkParams struct {
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq,omitempty"`
	Title     string `json:"title,omitempty"`
}

// SessionDeleteResult answers session.delete: the session as it was, now
// gone with its runs.
type SessionDeleteResult struct {
	SessionInfo
	Deleted bool `json:"deleted"`
}

// SessionLockResult answers session.lock and session.release.
type SessionLockResult struct {
	SessionID string `json:"session_id"`
	Locked    bool   `json:"locked"` // whether this connection now holds the lock
}

// SessionInfo is a session as the gateway shows it: the one view of a
// session (store.SessionView), and who holds its lock.
type SessionInfo struct {
	store.SessionView
	LockedBy string `json:"locked_by,omitempty"` // "this connection" or "another client" while locked
}

// SessionList answers session.list and GET /v1/sessions, newest first.
type SessionList struct {
	Sessions []SessionInfo `json:"sessions"`
}

// SessionDetail answers session.get: the session and its runs, oldest first.
type SessionDetail struct {
	Session SessionInfo `json:"session"`
	Runs    []RunInfo   `json:"runs"`
}

// RunParams name a run: run.get. RunID may be a unique prefix.
type RunParams struct {
	RunID string `json:"run_id"`
}

// Modes of run.cancel (docs/PROTOCOL.md#interrupts-and-cancel).
const (
	CancelModeInterrupt = "interrupt" // stop resumably, as Ctrl-C does locally
	CancelModeCancel    = "cancel"    // end the run for good
)

// RunCancelParams stop a run: Mode interrupt stops it resumably, as Ctrl-C
// does locally (run.interrupted; run.resume or `agent resume` continues
// it); cancel, the default, ends it for good (run.cancelled).
type RunCancelParams struct {
	RunID string `json:"run_id"`
	Mode  string `json:"mode,omitempty"`
}

// RunResumeParams continue a session's run that ended without completing,
// as `agent resume` does. ResendUnknown first sends again the side effects
// whose outcome was lost, the user's choice after checking they did not
// arrive. The connection is attached to the run's session.
type RunResumeParams struct {
	RunID         string `json:"run_id"`
	ResendUnknown bool   `json:"resend_unknown,omitempty"`
}

// RunStartResult answers run.start and POST /v1/runs (HTTP 202).
type RunStartResult struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
	Status    string `json:"status"` // queued, running, or the outcome of an earlier run with the same idempotency key
}

// RunInfo is a run as the gateway shows it: the one view of a run every
// front-end shows (store.RunView), its status queued while it waits here.
type RunInfo = store.RunView

// RunDetail answers GET /v1/runs/ID: the run and how many events it has.
type RunDetail struct {
	Run    RunInfo `json:"run"`
	Events int     `json:"events"`
}

// Health answers GET /healthz: to anyone, only that the gateway is up;
// with the token (or a signed-in page's cookie), also its version.
type Health struct {
	OK      bool   `json:"ok"`
	Version string `json:"version,omitempty"`
}

// HTTPError is the body of every failed HTTP request.
type HTTPError struct {
	Error *Error `json:"error"`
}

// Scheduled jobs (docs/PROTOCOL.md#scheduled-jobs). The job.* methods exist when the
// gateway has a scheduler (connect lists them); they work whether or not
// scheduling is enabled, except job.run_now, which answers
// scheduler_disabled while it is off. A job is named by its id, its name
// or a unique id prefix. A job shows as scheduler.Job, one attempt of one
// tick as scheduler.JobRun; both are what `agent jobs --json` prints.
//
// Job events (job.created, job.updated, job.triggered, job.started,
// job.completed, job.failed, job.skipped_overlap) belong to no session:
// every connected client receives them live, as event frames without
// session_id and with seq 0, from the moment its connect is answered.
// They are not replayed; job.get_runs is their durable record. The runs
// a job starts are normal runs, whose events are in their session (the
// job's target session, or a new one titled after the job) like any
// other run's; job.started carries the run_id.

// JobPolicy is the policy object of job.create and job.update, e.g.
//
//	{"overlap":"queue_one","missed":"run_once_on_recovery","timeout":"5m",
//	 "retry":{"max_attempts":3,"base":"30s","cap":"10m"},"tools":["read_file","bash"]}
//
// overlap: skip_if_running (default), queue_one or parallel. missed: skip
// or run_once_on_recovery; absent means the gateway's recovery policy.
// timeout: per attempt, default 10m. tools: the runs' allowlist, checked
// like run.start's options.allow_tools; absent or empty means the
// default tools. Durations are Go durations or numbers of seconds.
type JobPolicy = scheduler.Policy

// JobCreateParams are job.create's params. Policy fields left out take
// their defaults. SessionID, if set, names the session every run goes
// to; otherwise each run gets a new session titled after the job.
type JobCreateParams struct {
	Name      string          `json:"name"`
	CronExpr  string          `json:"cron_expr"`          // 5 fields, 6 with seconds, @hourly…, @every 90s
	Timezone  string          `json:"timezone,omitempty"` // IANA zone the schedule is read in; default UTC
	Prompt    string          `json:"prompt"`             // text/template: {{.JobName}} {{.ScheduledFor}} {{.Attempt}} {{.JobID}}
	SessionID string          `json:"session_id,omitempty"`
	Policy    json.RawMessage `json:"policy,omitempty"` // JobPolicy
	Paused    bool            `json:"paused,omitempty"` // create it paused
}

// JobUpdateParams are job.update's params: only the fields given change,
// policy fields included ({"policy":{"timeout":"1m"}} changes only the
// timeout). A new schedule or zone takes effect from now. SessionID ""
// goes back to a new session per run.
type JobUpdateParams struct {
	JobID     string          `json:"job_id"`
	Name      *string         `json:"name,omitempty"`
	CronExpr  *string         `json:"cron_expr,omitempty"`
	Timezone  *string         `json:"timezone,omitempty"`
	Prompt    *string         `json:"prompt,omitempty"`
	SessionID *string         `json:"session_id,omitempty"`
	Policy    json.RawMessage `json:"policy,omitempty"` // JobPolicy, partial
}

// JobParams name a job: job.pause, job.resume, job.delete, job.run_now.
type JobParams struct {
	JobID string `json:"job_id"`
}

// JobRunsParams are job.get_runs' params; a zero Limit means 50.
type JobRunsParams struct {
	JobID string `json:"job_id"`
	Limit int    `json:"limit,omitempty"`
}

// JobList answers job.list: every job, by name.
type JobList struct {
	Jobs []scheduler.Job `json:"jobs"`
}

// JobRunList answers job.get_runs: the job and its runs, newest tick
// first and, within a tick, the latest attempt first.
type JobRunList struct {
	Job  scheduler.Job      `json:"job"`
	Runs []scheduler.JobRun `json:"runs"`
}

// JobDeleted answers job.delete.
type JobDeleted struct {
	JobID   string `json:"id"`
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

// job.create, job.update, job.pause and job.resume answer the job
// (scheduler.Job); job.run_now answers the claimed tick's first attempt
// (scheduler.JobRun), status queued, or skipped when the overlap policy
// skipped it (error_text says why). job.run_now waits a few seconds for the
// run to be started, so its run_id is usually set: the run `agent runs
// show` and run.get know.

// RunOptions are run.start's options: a run's settings, the same as the
// CLI's flags. Zero values take the gateway's defaults.
type RunOptions = supervisor.Options

// CheckpointListParams name the run whose checkpoints to list.
type CheckpointListParams struct {
	RunID string `json:"run_id"`
}

// CheckpointList answers checkpoint.list.
type CheckpointList struct {
	RunID       string             `json:"run_id"`
	Checkpoints []store.Checkpoint `json:"checkpoints"`
}

// CheckpointRewindParams rewind a run's files: all of them (To 0 or 1)
// or those first changed at checkpoint To or later. Force restores files
// changed after the run too.
type CheckpointRewindParams struct {
	RunID string `json:"run_id"`
	To    int    `json:"to,omitempty"`
	Force bool   `json:"force,omitempty"`
}
