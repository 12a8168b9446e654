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

// The attempt queue (migration 0015, docs/SCHEMA.md#attempt_queue): a worker driving a
// harness run queues each phase attempt as a unit of its own; any worker
// claims it, runs its child, and writes the attempt's events and intents
// fenced by the unit (Journal.FenceAttempt, Receipt.AttemptLease), then
// leaves the result in it. The harness reads the result and deletes the
// unit. A harness that starts again deletes every unit it left
// (InterruptAttempts), so their workers can write nothing more.

// AttemptKey names one attempt of one phase of a harness run.
type AttemptKey struct {
	RunID   string
	PhaseID string
	Attempt int
}

func (k AttemptKey) String() string { return fmt.Sprintf("%s/%s/%d", k.RunID, k.PhaseID, k.Attempt) }

// AttemptUnit is a phase attempt in the queue.
type AttemptUnit struct {
	AttemptKey
	SessionID string
	// Spec is what the worker needs to run the child, as the harness
	// encoded it; Result is what the child produced, as the worker did.
	Spec json.RawMessage
	// State is event.StatusWaiting (queued; no worker holds it),
	// event.StatusClaimed (a worker runs its child) or event.StatusDone (its
	// result is in).
	State          string
	Holder         string
	LeaseExpiresAt time.Time
	StopRequest    string // StopCancel or StopInterrupt
	Result         json.RawMessage
	QueuedAt       time.Time
}

const unitColumns = `run_id, phase_id, attempt, COALESCE(session_id, ''), spec_json, state, COALESCE(holder, ''),
	lease_expires_at, COALESCE(stop_request, ''), result_json, queued_at`

func scanUnit(row interface{ Scan(...any) error }) (*AttemptUnit, error) {
	var u AttemptUnit
	var spec string
	var result sql.NullString
	err := row.Scan(&u.RunID, &u.PhaseID, &u.Attempt, &u.SessionID, &spec, &u.State, &u.Holder,
		timeValue{&u.LeaseExpiresAt}, &u.StopRequest, &result, timeValue{&u.QueuedAt})
	if err != nil {
		return nil, err
	}
	u.Spec = json.RawMessage(spec)
	if result.Valid {
		u.Result = json.RawMessage(result.String)
	}
	return &u, nil
}

const unitWhere = ` WHERE run_id = ? AND phase_id = ? AND attempt = ?`

func (k AttemptKey) args(first ...any) []any {
	return append(first, k.RunID, k.PhaseID, k.Attempt)
}

// QueueAttempt queues a phase attempt for any worker. owner must hold the
// harness run's lease: only its driver queues its attempts.
func (db *DB) QueueAttempt(ctx context.Context, u AttemptUnit, owner string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue attempt %s: %w", u.AttemptKey, err)
	}
	defer tx.Rollback()
	if err := fence(ctx, tx, u.RunID, owner); err != nil {
		return fmt.Errorf("queue attempt %s: %w", u.AttemptKey, err)
	}
	now := formatTime(db.now())
	// An attempt number started again starts over (startAttempt).
	if _, err := tx.ExecContext(ctx, `DELETE FROM attempt_queue`+unitWhere, u.args()...); err != nil {
		return fmt.Errorf("queue attempt %s: %w", u.AttemptKey, err)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO attempt_queue (run_id, phase_id, attempt, session_id, spec_json, state, queued_at, updated_at)
		VALUES (?, ?, ?, ?, ?, 'waiting', ?, ?)`,
		u.RunID, u.PhaseID, u.Attempt, nullString(u.SessionID), string(u.Spec), now, now); err != nil {
		return fmt.Errorf("queue attempt %s: %w", u.AttemptKey, err)
	}
	if err := notify(ctx, tx, ChannelRuns, u.RunID); err != nil {
		return fmt.Errorf("queue attempt %s: %w", u.AttemptKey, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue attempt %s: %w", u.AttemptKey, err)
	}
	return nil
}

// ClaimAttempt gives owner the longest waiting attempt whose harness is
// being driven (its run's lease is live), for ttl; nil when there is none.
// An attempt of a harness nobody drives waits for the harness to start
// again, which deletes it. As ClaimRun, it looks in a snapshot first and
// takes the write lock only when there may be one.
func (db *DB) ClaimAttempt(ctx context.Context, owner string, ttl time.Duration) (*AttemptUnit, error) {
	if owner == "" {
		return nil, errors.New("claim attempt: empty owner")
	}
	if ok, err := db.mayClaimAttempt(ctx); err != nil || !ok {
		return nil, err
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("claim attempt: %w", err)
	}
	defer tx.Rollback()
	now := db.now()
	k, err := waitingAttempt(ctx, tx, now)
	if err != nil || k == nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE attempt_queue SET state = 'claimed', holder = ?, lease_expires_at = ?, updated_at = ?`+unitWhere,
		k.args(owner, formatTime(now.Add(ttl)), formatTime(now))...); err != nil {
		return nil, fmt.Errorf("claim attempt %s: %w", k, err)
	}
	u, err := scanUnit(tx.QueryRowContext(ctx, `SELECT `+unitColumns+` FROM attempt_queue`+unitWhere, k.args()...))
	if err != nil {
		return nil, fmt.Errorf("claim attempt %s: %w", k, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("claim attempt %s: %w", k, err)
	}
	return u, nil
}

// mayClaimAttempt reports whether a snapshot shows an attempt ClaimAttempt
// would claim.
func (db *DB) mayClaimAttempt(ctx context.Context) (bool, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("claim attempt: %w", err)
	}
	defer tx.Rollback()
	k, err := waitingAttempt(ctx, tx, db.now())
	return k != nil, err
}

// waitingAttempt is the longest waiting attempt whose harness is being
// driven; nil if none.
func waitingAttempt(ctx context.Context, tx *txn, now time.Time) (*AttemptKey, error) {
	lock := ""
	if tx.pg && tx.write {
		lock = " FOR UPDATE OF q SKIP LOCKED"
	}
	var k AttemptKey
	err := tx.QueryRowContext(ctx, `
		SELECT q.run_id, q.phase_id, q.attempt FROM attempt_queue q JOIN runs r ON r.id = q.run_id
		WHERE q.state = 'waiting' AND r.status = 'running' AND r.lease_owner IS NOT NULL AND r.lease_expires_at > ?
		ORDER BY q.queued_at, q.run_id, q.phase_id, q.attempt LIMIT 1`+lock, formatTime(now)).Scan(&k.RunID, &k.PhaseID, &k.Attempt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim attempt: %w", err)
	}
	return &k, nil
}

// RenewAttempt extends owner's hold on a claimed attempt to now+ttl. It
// returns ErrLeaseLost once the attempt finished or its harness took it
// back or started again.
func (db *DB) RenewAttempt(ctx context.Context, k AttemptKey, owner string, ttl time.Duration) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("renew attempt %s: %w", k, err)
	}
	defer tx.Rollback()
	if err := fenceAttempt(ctx, tx, k, owner); err != nil {
		return fmt.Errorf("renew attempt %s: %w", k, err)
	}
	now := db.now()
	if _, err := tx.ExecContext(ctx, `UPDATE attempt_queue SET lease_expires_at = ?, updated_at = ?`+unitWhere,
		k.args(formatTime(now.Add(ttl)), formatTime(now))...); err != nil {
		return fmt.Errorf("renew attempt %s: %w", k, err)
	}
	return tx.Commit()
}

// FinishAttempt records the result of the attempt owner ran, for the
// harness to read; it fails with ErrLeaseLost if owner no longer holds it.
func (db *DB) FinishAttempt(ctx context.Context, k AttemptKey, owner string, result json.RawMessage) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("finish attempt %s: %w", k, err)
	}
	defer tx.Rollback()
	if err := fenceAttempt(ctx, tx, k, owner); err != nil {
		return fmt.Errorf("finish attempt %s: %w", k, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE attempt_queue SET state = 'done', result_json = ?, updated_at = ?`+unitWhere,
		k.args(string(result), formatTime(db.now()))...); err != nil {
		return fmt.Errorf("finish attempt %s: %w", k, err)
	}
	return tx.Commit()
}

// GetAttemptUnit reads a unit; ErrNotFound once it is deleted.
func (db *DB) GetAttemptUnit(ctx context.Context, k AttemptKey) (*AttemptUnit, error) {
	u, err := scanUnit(db.ro.QueryRowContext(ctx, `SELECT `+unitColumns+` FROM attempt_queue`+unitWhere, k.args()...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("attempt %s: %w", k, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("attempt %s: %w", k, err)
	}
	return u, nil
}

// UnitAbandoned reports whether a claimed unit's worker is gone: its hold
// expired, or its process is provably dead.
func (db *DB) UnitAbandoned(u *AttemptUnit) bool {
	return u.State == event.StatusClaimed && (u.LeaseExpiresAt.Before(db.now()) || db.OwnerDead(u.Holder))
}

// StopAttempt asks for an attempt to stop (StopCancel or StopInterrupt).
// A unit no worker claimed yet is deleted at once, and StopAttempt reports
// false: nothing runs it. Otherwise the request waits for its worker,
// which stops the child and records how it ended.
func (db *DB) StopAttempt(ctx context.Context, k AttemptKey, kind string) (bool, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("stop attempt %s: %w", k, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM attempt_queue`+unitWhere+` AND state = 'waiting'`, k.args()...)
	if err != nil {
		return false, fmt.Errorf("stop attempt %s: %w", k, err)
	}
	if oneRow(res) == nil {
		return false, tx.Commit()
	}
	res, err = tx.ExecContext(ctx, `UPDATE attempt_queue SET stop_request = ?, updated_at = ?`+unitWhere+` AND state = 'claimed'`,
		k.args(kind, formatTime(db.now()))...)
	if err != nil {
		return false, fmt.Errorf("stop attempt %s: %w", k, err)
	}
	return oneRow(res) == nil, tx.Commit()
}

// EndAttempt deletes a unit: the harness has its result, or gives up on
// it (its worker is gone). With holder set, only while holder still holds
// it claimed; it reports whether it deleted it. Its worker, if any, can
// write nothing more for it.
func (db *DB) EndAttempt(ctx context.Context, k AttemptKey, holder string) (bool, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("end attempt %s: %w", k, err)
	}
	defer tx.Rollback()
	query, args := `DELETE FROM attempt_queue`+unitWhere, k.args()
	if holder != "" {
		query += ` AND state = 'claimed' AND holder = ?`
		args = append(args, holder)
	}
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return false, fmt.Errorf("end attempt %s: %w", k, err)
	}
	return oneRow(res) == nil, tx.Commit()
}

// AttemptStopRequests returns the stop requests of the attempts owner
// holds.
func (db *DB) AttemptStopRequests(ctx context.Context, owner string) (map[AttemptKey]string, error) {
	rows, err := db.ro.QueryContext(ctx, `SELECT run_id, phase_id, attempt, stop_request FROM attempt_queue
		WHERE holder = ? AND state = 'claimed' AND stop_request IS NOT NULL`, owner)
	if err != nil {
		return nil, fmt.Errorf("attempt stop requests: %w", err)
	}
	defer rows.Close()
	out := map[AttemptKey]string{}
	for rows.Next() {
		var k AttemptKey
		var kind string
		if err := rows.Scan(&k.RunID, &k.PhaseID, &k.Attempt, &kind); err != nil {
			return nil, fmt.Errorf("attempt stop requests: %w", err)
		}
		out[k] = kind
	}
	return out, rows.Err()
}

// fenceAttempt fails with ErrLeaseLost unless owner holds the attempt:
// claimed by it, not finished, not deleted by its harness.
func fenceAttempt(ctx context.Context, tx *txn, k AttemptKey, owner string) error {
	var holder, state string
	err := tx.QueryRowContext(ctx, `SELECT COALESCE(holder, ''), state FROM attempt_queue`+unitWhere, k.args()...).Scan(&holder, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("attempt %s was taken back by its harness: %w", k, ErrLeaseLost)
	}
	if err != nil {
		return err
	}
	if holder != owner || state != event.StatusClaimed {
		return fmt.Errorf("attempt %s is %s by %q, not held by %q: %w", k, state, holder, owner, ErrLeaseLost)
	}
	return nil
}
