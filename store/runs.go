package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"agent/event"
)

// Run kinds.
const (
	KindRun     = "run"
	KindHarness = "harness"
)

// ErrAmbiguous is returned when an id prefix matches more than one run or
// session.
var ErrAmbiguous = errors.New("ambiguous")

// ErrDuplicateKey is returned by CreateRun when the run's idempotency key
// is already used in its session: the caller should return that run.
var ErrDuplicateKey = errors.New("idempotency key already used")

// Run is one row of runs: an agent run (fast path) or a harness run.
type Run struct {
	ID        string
	Kind      string // KindRun or KindHarness
	SessionID string
	Status    string
	Prompt    string
	Workspace string
	Model     string
	Config    json.RawMessage // how the run is driven (supervisor.Options), opaque here

	// IdempotencyKey, if not empty, is unique within the session, so a
	// retried start finds the run it already created.
	IdempotencyKey string
	// Fork marks the synthetic run that holds a forked session's copied
	// conversation (ForkSession): no model was called. ListRuns leaves it
	// out; the session's history (SessionPrior, ListSessionRuns) keeps it.
	Fork bool
	// Reclaims counts the times a rescuer took the run over from a dead
	// process.
	Reclaims int

	Result   string
	Reason   string // one of event's Reason words
	Detail   string // the reason, said for people
	ExitCode int
	Turns    int
	Usage    event.Usage

	IterationCount    int
	MaxIterations     int
	CompletionPromise string

	LeaseOwner       string
	LeaseExpiresAt   time.Time
	LeaseHeartbeatAt time.Time

	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time
	// PrunedAt is when `agent prune` last removed the run's message
	// deltas and tool outputs (prune.go); zero if never.
	PrunedAt time.Time

	// Queue is "" for a run no worker drives, else event.StatusWaiting
	// (queued; no worker holds it yet) or event.StatusClaimed (a worker
	// took it; taken over if that worker dies); a run waiting for a worker
	// shows as event.StatusQueued. QueuedAt is when it was queued.
	Queue    string
	QueuedAt time.Time
	// StopRequest is a gateway asking the run's worker to stop it:
	// StopCancel or StopInterrupt; "" if none.
	StopRequest string

	// A sub-run (the task tool) answers its parent's task call: ParentCall
	// names the call (PHASE/ATTEMPT/CALL_ID in a harness phase), and
	// Description is the task's. All empty for other runs.
	ParentRunID string
	ParentCall  string
	Description string
}

// ShownStatus is the status people are shown: a harness stopped after
// planning (--plan) is "planned", not interrupted; one waiting for a
// worker is "queued"; one parked on a wait is "waiting", though it is
// queued for whichever worker wakes it (QueueParkedRun).
func (r *Run) ShownStatus() string {
	if r.Status == event.StatusWaiting {
		return event.StatusWaiting
	}
	if r.Queue == event.StatusWaiting {
		return event.StatusQueued
	}
	if r.Status == event.StatusInterrupted && r.Reason == event.ReasonPlanned {
		return event.StatusPlanned
	}
	return r.Status
}

// CreateRun inserts r with status running and, if leaseOwner is not empty,
// the lease held by leaseOwner for ttl. It sets r's status, lease and times.
// With r.Queue event.StatusWaiting (and no owner), the run waits for a worker.
// A key already used in the session gives an error matching ErrDuplicateKey.
func (db *DB) CreateRun(ctx context.Context, r *Run, leaseOwner string, ttl time.Duration) error {
	return db.createRun(ctx, r, leaseOwner, ttl, false)
}

// CreateRunAlone is CreateRun for a run that must be the only one of its
// session a live process drives (agent chat's local session, whose
// sequence the chat keeps): in the same transaction, one such run of the
// session is a *LeaseHeldError and nothing is created. Two chats that send
// at once cannot both pass.
func (db *DB) CreateRunAlone(ctx context.Context, r *Run, leaseOwner string, ttl time.Duration) error {
	return db.createRun(ctx, r, leaseOwner, ttl, true)
}

func (db *DB) createRun(ctx context.Context, r *Run, leaseOwner string, ttl time.Duration, alone bool) error {
	if r.ID == "" {
		return errors.New("create run: empty id")
	}
	if r.Kind == "" {
		r.Kind = KindRun
	}
	now := db.now()
	r.Status = event.StatusRunning
	r.CreatedAt, r.UpdatedAt, r.FinishedAt = now, now, time.Time{}
	r.Reclaims = 0
	r.LeaseOwner, r.LeaseExpiresAt, r.LeaseHeartbeatAt = "", time.Time{}, time.Time{}
	if leaseOwner != "" {
		r.LeaseOwner, r.LeaseExpiresAt, r.LeaseHeartbeatAt = leaseOwner, now.Add(ttl), now
	}
	r.QueuedAt = time.Time{}
	if r.Queue == event.StatusWaiting {
		if leaseOwner != "" {
			return fmt.Errorf("create run %s: a queued run has no lease yet", r.ID)
		}
		r.QueuedAt = now
	}

	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create run %s: %w", r.ID, err)
	}
	defer tx.Rollback()
	if r.IdempotencyKey != "" {
		// Checked here rather than left to the unique index so the caller
		// gets a sentinel, and so runs without a session are covered too
		// (the index treats NULL sessions as all distinct). Writes are
		// serialised, so nothing can slip in between.
		other, err := runByIdempotencyKey(ctx, tx, r.SessionID, r.IdempotencyKey)
		if err == nil {
			return fmt.Errorf("create run %s: key %q has run %s: %w", r.ID, r.IdempotencyKey, other.ID, ErrDuplicateKey)
		}
		if !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("create run %s: %w", r.ID, err)
		}
	}
	if alone && r.SessionID != "" {
		if err := db.aloneInSession(ctx, tx, r.SessionID, now); err != nil {
			return err
		}
	}
	if err := insertRun(ctx, tx, r); err != nil {
		return fmt.Errorf("create run %s: %w", r.ID, err)
	}
	if r.Queue == event.StatusWaiting {
		if err := notify(ctx, tx, ChannelRuns, r.ID); err != nil {
			return fmt.Errorf("create run %s: %w", r.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("create run %s: %w", r.ID, err)
	}
	return nil
}

// GetRun returns the run with this id, or the one run whose id starts with
// it, as git does with commit hashes. A prefix that more than one run has
// is ErrAmbiguous.
func (db *DB) GetRun(ctx context.Context, id string) (*Run, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	defer tx.Rollback()
	r, err := getRun(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	return r, tx.Commit()
}

// ListRuns returns up to limit runs, newest first; limit <= 0 means all.
// Forks' synthetic runs (Run.Fork) are not listed: nothing ran.
func (db *DB) ListRuns(ctx context.Context, limit int) ([]Run, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer tx.Rollback()
	runs, err := listRuns(ctx, tx, limit)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, tx.Commit()
}

// ListSessionRuns returns the runs of a session, oldest first.
func (db *DB) ListSessionRuns(ctx context.Context, sessionID string) ([]Run, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list runs of session %s: %w", sessionID, err)
	}
	defer tx.Rollback()
	runs, err := listSessionRuns(ctx, tx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list runs of session %s: %w", sessionID, err)
	}
	return runs, tx.Commit()
}

// RunByIdempotencyKey returns the session's run started with key, or
// ErrNotFound. An empty key matches nothing.
func (db *DB) RunByIdempotencyKey(ctx context.Context, sessionID, key string) (*Run, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("run with key %q in session %s: %w", key, sessionID, err)
	}
	defer tx.Rollback()
	r, err := runByIdempotencyKey(ctx, tx, sessionID, key)
	if err != nil {
		return nil, fmt.Errorf("run with key %q in session %s: %w", key, sessionID, err)
	}
	return r, tx.Commit()
}

// SetRunStatus sets a run's status. Going back to running (a resume)
// clears the outcome of the previous attempt.
func (db *DB) SetRunStatus(ctx context.Context, id, status string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("set run %s status: %w", id, err)
	}
	defer tx.Rollback()
	if err := setRunStatus(ctx, tx, id, status, db.now()); err != nil {
		return fmt.Errorf("set run %s status: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("set run %s status: %w", id, err)
	}
	return nil
}

// SetRunConfig replaces the options a run is stored with: a resume that
// changed them (a new budget) keeps them for the next one.
func (db *DB) SetRunConfig(ctx context.Context, id string, config []byte) error {
	res, err := db.rw.ExecContext(ctx, `UPDATE runs SET config_json = ?, updated_at = ? WHERE id = ?`,
		string(config), formatTime(db.now()), id)
	if err != nil {
		return fmt.Errorf("set run %s options: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set run %s options: %w", id, ErrNotFound)
	}
	return nil
}

func validStatus(s string) bool {
	switch s {
	case event.StatusRunning, event.StatusCompleted, event.StatusFailed, event.StatusInterrupted, event.StatusCancelled,
		event.StatusWaiting:
		return true
	}
	return false
}

func insertRun(ctx context.Context, tx *txn, r *Run) error {
	var config any
	if len(r.Config) > 0 {
		config = string(r.Config)
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO runs (
			id, kind, session_id, status, prompt, workspace, model, config_json,
			result, reason, detail, exit_code, turns, prompt_tokens, completion_tokens,
			iteration_count, max_iterations, completion_promise,
			lease_owner, lease_expires_at, lease_heartbeat_at,
			created_at, updated_at, finished_at, idempotency_key, reclaims, fork, queue, queued_at,
			parent_run_id, parent_call, description
		) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Kind, nullString(r.SessionID), r.Status, r.Prompt, r.Workspace, r.Model, config,
		r.Result, r.Reason, r.Detail, r.ExitCode, r.Turns, r.Usage.PromptTokens, r.Usage.CompletionTokens,
		r.IterationCount, r.MaxIterations, r.CompletionPromise,
		nullString(r.LeaseOwner), nullTime(r.LeaseExpiresAt), nullTime(r.LeaseHeartbeatAt),
		formatTime(r.CreatedAt), formatTime(r.UpdatedAt), nullTime(r.FinishedAt), r.IdempotencyKey, r.Reclaims, r.Fork,
		nullString(r.Queue), nullTime(r.QueuedAt),
		nullString(r.ParentRunID), r.ParentCall, r.Description,
	)
	return err
}

const runColumns = `
	id, kind, COALESCE(session_id, ''), status, prompt, workspace, model, COALESCE(config_json, ''),
	result, reason, detail, exit_code, turns, prompt_tokens, completion_tokens,
	iteration_count, max_iterations, completion_promise,
	COALESCE(lease_owner, ''), lease_expires_at, lease_heartbeat_at,
	created_at, updated_at, finished_at, idempotency_key, reclaims, fork != 0, pruned_at,
	COALESCE(queue, ''), queued_at, COALESCE(stop_request, ''),
	COALESCE(parent_run_id, ''), parent_call, description`

func scanRun(row scanner) (*Run, error) {
	var r Run
	var config string
	err := row.Scan(
		&r.ID, &r.Kind, &r.SessionID, &r.Status, &r.Prompt, &r.Workspace, &r.Model, &config,
		&r.Result, &r.Reason, &r.Detail, &r.ExitCode, &r.Turns, &r.Usage.PromptTokens, &r.Usage.CompletionTokens,
		&r.IterationCount, &r.MaxIterations, &r.CompletionPromise,
		&r.LeaseOwner, timeValue{&r.LeaseExpiresAt}, timeValue{&r.LeaseHeartbeatAt},
		timeValue{&r.CreatedAt}, timeValue{&r.UpdatedAt}, timeValue{&r.FinishedAt}, &r.IdempotencyKey, &r.Reclaims, &r.Fork,
		timeValue{&r.PrunedAt}, &r.Queue, timeValue{&r.QueuedAt}, &r.StopRequest,
		&r.ParentRunID, &r.ParentCall, &r.Description,
	)
	if err != nil {
		return nil, err
	}
	if config != "" {
		r.Config = json.RawMessage(config)
	}
	return &r, nil
}

// getRun resolves id exactly, then as a prefix.
func getRun(ctx context.Context, tx *txn, id string) (*Run, error) {
	r, err := scanRun(tx.QueryRowContext(ctx, `SELECT `+runColumns+` FROM runs WHERE id = ?`, id))
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	full, err := prefixMatch(ctx, tx, "run", "runs", id)
	if err != nil {
		return nil, err
	}
	r, err = scanRun(tx.QueryRowContext(ctx, `SELECT `+runColumns+` FROM runs WHERE id = ?`, full))
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	return r, nil
}

func listRuns(ctx context.Context, tx *txn, limit int) ([]Run, error) {
	if limit <= 0 {
		limit = noLimit
	}
	return queryRuns(ctx, tx,
		`SELECT `+runColumns+` FROM runs WHERE fork = 0 ORDER BY created_at DESC, id DESC LIMIT ?`, limit)
}

// listSessionRuns orders by rowid after created_at: runs created in the
// same microsecond keep their insertion order.
func listSessionRuns(ctx context.Context, tx *txn, sessionID string) ([]Run, error) {
	return queryRuns(ctx, tx,
		`SELECT `+runColumns+` FROM runs WHERE session_id = ? ORDER BY created_at, rowid`, sessionID)
}

// runByIdempotencyKey repeats the partial index's condition so SQLite
// can use it; "IS NOT DISTINCT FROM ?" matches a NULL session for sessionID "".
func runByIdempotencyKey(ctx context.Context, tx *txn, sessionID, key string) (*Run, error) {
	if key == "" {
		return nil, ErrNotFound
	}
	r, err := scanRun(tx.QueryRowContext(ctx, `
		SELECT `+runColumns+` FROM runs
		WHERE session_id IS NOT DISTINCT FROM ? AND idempotency_key = ? AND idempotency_key != ''`,
		nullString(sessionID), key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	return r, err
}

func queryRuns(ctx context.Context, tx *txn, query string, args ...any) ([]Run, error) {
	return scanAll(ctx, tx, func(r scanner) (Run, error) {
		run, err := scanRun(r)
		if err != nil {
			return Run{}, err
		}
		return *run, nil
	}, query, args...)
}

func setRunStatus(ctx context.Context, tx *txn, id, status string, now time.Time) error {
	if !validStatus(status) {
		return fmt.Errorf("invalid run status %q", status)
	}
	var res sql.Result
	var err error
	if status == event.StatusRunning {
		res, err = tx.ExecContext(ctx, `
			UPDATE runs SET status = ?, result = '', reason = '', detail = '', exit_code = 0,
				finished_at = NULL, updated_at = ?
			WHERE id = ?`, status, formatTime(now), id)
	} else {
		res, err = tx.ExecContext(ctx,
			`UPDATE runs SET status = ?, updated_at = ? WHERE id = ?`, status, formatTime(now), id)
	}
	if err != nil {
		return err
	}
	return oneRow(res)
}

// oneRow turns an UPDATE that touched no row into ErrNotFound.
func oneRow(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// aloneInSession fails with a *LeaseHeldError when a live process drives
// a run of the session. Write transactions are serialised (docs/SCHEMA.md),
// so no other creation slips in between this and the insert.
func (db *DB) aloneInSession(ctx context.Context, tx *txn, sessionID string, now time.Time) error {
	runs, err := listSessionRuns(ctx, tx, sessionID)
	if err != nil {
		return fmt.Errorf("runs of session %s: %w", sessionID, err)
	}
	for _, o := range runs {
		if o.Status == event.StatusRunning && o.LeaseOwner != "" && !db.abandoned(o, now) {
			return &LeaseHeldError{RunID: o.ID, Owner: o.LeaseOwner, ExpiresAt: o.LeaseExpiresAt}
		}
	}
	return nil
}
