package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The run queue of `agent worker` (migration 0013, docs/SCHEMA.md#runs): a
// gateway queues a run; a worker claims it by taking its lease, drives it,
// and renews the lease while it does; another worker takes over a claimed
// run whose lease expired. A lease is a fencing token: writes made for a
// run under a lease (Journal.Fence, Receipt.LeaseOwner) fail once another
// process holds it.

// Stop requests (Run.StopRequest).
const (
	StopCancel    = "cancel"    // end the run for good
	StopInterrupt = "interrupt" // stop it resumably
)

// Channels of PostgreSQL's LISTEN/NOTIFY: a run was queued (payload: its
// id), a session has new events (payload: the session id), a wait was
// answered (payload: the run id).
const (
	ChannelRuns   = "agent_runs"
	ChannelEvents = "agent_events"
	ChannelWaits  = "agent_waits"
)

// QueueRun queues a run that no process holds, for a worker to start or
// resume it. A pending stop request is dropped: queueing is a new ask.
func (db *DB) QueueRun(ctx context.Context, runID string) error {
	return db.QueueRunAt(ctx, runID, time.Time{})
}

// QueueRunAt is QueueRun for a run no worker may claim before at (a rate
// limit's resume_after); a zero or past at is now.
func (db *DB) QueueRunAt(ctx context.Context, runID string, at time.Time) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue run %s: %w", runID, err)
	}
	defer tx.Rollback()
	if err := queueAt(ctx, tx, runID, at, db.now()); err != nil {
		return fmt.Errorf("queue run %s: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue run %s: %w", runID, err)
	}
	return nil
}

// queueAt queues a run no process holds, claimable from at (now if
// earlier).
func queueAt(ctx context.Context, tx *txn, runID string, at, now time.Time) error {
	if at.Before(now) {
		at = now
	}
	res, err := tx.ExecContext(ctx, `
		UPDATE runs SET queue = 'waiting', queued_at = ?, stop_request = NULL, updated_at = ?
		WHERE id = ? AND lease_owner IS NULL`, formatTime(at), formatTime(now), runID)
	if err != nil {
		return err
	}
	if err := oneRow(res); err != nil {
		var owner string
		if tx.QueryRowContext(ctx, `SELECT COALESCE(lease_owner, '') FROM runs WHERE id = ?`, runID).Scan(&owner) == nil && owner != "" {
			return &LeaseHeldError{RunID: runID, Owner: owner}
		}
		return err
	}
	return notify(ctx, tx, ChannelRuns, runID)
}

// Claim is a run a worker claimed.
type Claim struct {
	Run *Run
	// Resume says the run has started before (its events are stored):
	// drive it as a resume.
	Resume bool
	// TakenOver says a dead worker held it.
	TakenOver bool
}

// ClaimRun gives owner the lease of one queued run of kind (KindRun,
// KindHarness, or "" for either) for ttl, or nil when there is none: first
// a claimed run whose worker is gone (its lease expired, or its process
// provably dead), then the longest waiting run whose session has no run
// held by anyone, since a session's runs go one at a time.
//
// A worker asks whenever a slot frees and at every poll, and mostly there
// is nothing for it; on PostgreSQL every write transaction waits for every
// other (dialect.go), so ClaimRun first looks in a snapshot, without the
// write lock, and takes the lock only when there may be a run to claim. It
// chooses the run again under the lock. A run queued after the snapshot
// is found at the next look: its queueing notifies the workers.
func (db *DB) ClaimRun(ctx context.Context, owner string, ttl time.Duration, kind string) (*Claim, error) {
	if owner == "" {
		return nil, errors.New("claim run: empty owner")
	}
	if ok, err := db.mayClaimRun(ctx, owner, kind); err != nil || !ok {
		return nil, err
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("claim run: %w", err)
	}
	defer tx.Rollback()
	now := db.now()
	claim, err := db.takeOver(ctx, tx, owner, ttl, kind, now)
	if err == nil && claim == nil {
		claim, err = db.claimWaiting(ctx, tx, owner, ttl, kind, now)
	}
	if err != nil || claim == nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("claim run %s: %w", claim.Run.ID, err)
	}
	return claim, nil
}

// mayClaimRun reports whether a snapshot shows a run ClaimRun would
// claim: one to take over or one waiting.
func (db *DB) mayClaimRun(ctx context.Context, owner, kind string) (bool, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("claim run: %w", err)
	}
	defer tx.Rollback()
	now := db.now()
	gone, err := db.abandonedRun(ctx, tx, owner, kind, now)
	if err != nil || gone != "" {
		return gone != "", err
	}
	id, err := waitingRun(ctx, tx, kind, now)
	return id != "", err
}

// kindPattern matches runs of kind in a LIKE, any run for "".
func kindPattern(kind string) string {
	if kind == "" {
		return "%"
	}
	return kind
}

// takeOver takes the lease of a claimed run whose worker is gone.
func (db *DB) takeOver(ctx context.Context, tx *txn, owner string, ttl time.Duration, kind string, now time.Time) (*Claim, error) {
	id, err := db.abandonedRun(ctx, tx, owner, kind, now)
	if err != nil || id == "" {
		return nil, err
	}
	if err := db.acquireLease(ctx, tx, id, owner, ttl); err != nil {
		return nil, fmt.Errorf("claim run %s: %w", id, err)
	}
	if _, err := noteReclaim(ctx, tx, id, now); err != nil {
		return nil, fmt.Errorf("claim run %s: %w", id, err)
	}
	got, err := getRun(ctx, tx, id)
	if err != nil {
		return nil, fmt.Errorf("claim run %s: %w", id, err)
	}
	return &Claim{Run: got, Resume: true, TakenOver: true}, nil
}

// abandonedRun is the id of the claimed run of kind held longest past
// its lease, or by a process provably dead, by another owner than owner;
// "" if none. It reads only the leases: every worker's every look runs
// it over every claimed run.
func (db *DB) abandonedRun(ctx context.Context, tx *txn, owner, kind string, now time.Time) (string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, lease_owner, lease_expires_at FROM runs
		WHERE status = 'running' AND queue = 'claimed' AND lease_owner IS NOT NULL AND lease_owner != ?
			AND kind LIKE ?
		ORDER BY lease_expires_at, rowid`, owner, kindPattern(kind))
	if err != nil {
		return "", fmt.Errorf("claim run: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r Run
		if err := rows.Scan(&r.ID, &r.LeaseOwner, timeValue{&r.LeaseExpiresAt}); err != nil {
			return "", fmt.Errorf("claim run: %w", err)
		}
		if db.abandoned(r, now) {
			return r.ID, nil
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("claim run: %w", err)
	}
	return "", nil
}

// claimWaiting takes the lease of the longest waiting run that can start.
func (db *DB) claimWaiting(ctx context.Context, tx *txn, owner string, ttl time.Duration, kind string, now time.Time) (*Claim, error) {
	id, err := waitingRun(ctx, tx, kind, now)
	if err != nil || id == "" {
		return nil, err
	}
	return claimRow(ctx, tx, id, owner, ttl, now)
}

// waitingRun is the id of the longest waiting run of kind that can start
// (no run of its session is held); "" if none.
func waitingRun(ctx context.Context, tx *txn, kind string, now time.Time) (string, error) {
	lock := ""
	if tx.pg && tx.write {
		// Writers are serialised already; this keeps a future finer lock
		// from handing one row to two workers.
		lock = " FOR UPDATE SKIP LOCKED"
	}
	var id string
	err := tx.QueryRowContext(ctx, `
		SELECT id FROM runs r
		WHERE queue = 'waiting' AND lease_owner IS NULL AND queued_at <= ? AND kind LIKE ?
			AND NOT EXISTS (SELECT 1 FROM runs o
				WHERE o.session_id = r.session_id AND o.id != r.id AND o.lease_owner IS NOT NULL)
		ORDER BY queued_at, rowid LIMIT 1`+lock, formatTime(now), kindPattern(kind)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("claim run: %w", err)
	}
	return id, nil
}

// claimRow gives owner the lease of the waiting run id.
func claimRow(ctx context.Context, tx *txn, id, owner string, ttl time.Duration, now time.Time) (*Claim, error) {
	if _, err := tx.ExecContext(ctx, `
		UPDATE runs SET queue = 'claimed', lease_owner = ?, lease_expires_at = ?, lease_heartbeat_at = ?
		WHERE id = ?`, owner, formatTime(now.Add(ttl)), formatTime(now), id); err != nil {
		return nil, fmt.Errorf("claim run %s: %w", id, err)
	}
	r, err := getRun(ctx, tx, id)
	if err != nil {
		return nil, fmt.Errorf("claim run %s: %w", id, err)
	}
	var started int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM events WHERE run_id = ?`, id).Scan(&started); err != nil {
		return nil, fmt.Errorf("claim run %s: %w", id, err)
	}
	return &Claim{Run: r, Resume: started > 0}, nil
}

// ClaimQueuedRun gives owner the lease of one run still waiting for a
// worker, whatever its session's other runs do; nil if no worker may claim
// it any more (one did, or it is not queued). A gateway takes a run it is
// asked to stop this way, to end it at once.
func (db *DB) ClaimQueuedRun(ctx context.Context, runID, owner string, ttl time.Duration) (*Claim, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("claim run %s: %w", runID, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM runs WHERE id = ? AND queue = 'waiting' AND lease_owner IS NULL`,
		runID).Scan(&n); err != nil || n == 0 {
		return nil, err
	}
	c, err := claimRow(ctx, tx, runID, owner, ttl, db.now())
	if err != nil {
		return nil, err
	}
	return c, tx.Commit()
}

// Requeue gives a claimed run back to the queue, for another worker to
// resume: owner stops driving it (the worker is shutting down).
func (db *DB) Requeue(ctx context.Context, runID, owner string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("requeue run %s: %w", runID, err)
	}
	defer tx.Rollback()
	now := formatTime(db.now())
	res, err := tx.ExecContext(ctx, `
		UPDATE runs SET queue = 'waiting', queued_at = ?, updated_at = ?,
			lease_owner = NULL, lease_expires_at = NULL, lease_heartbeat_at = NULL
		WHERE id = ? AND lease_owner = ?`, now, now, runID, owner)
	if err != nil {
		return fmt.Errorf("requeue run %s: %w", runID, err)
	}
	if err := oneRow(res); err != nil {
		return fmt.Errorf("requeue run %s: %w", runID, ErrLeaseLost)
	}
	if err := notify(ctx, tx, ChannelRuns, runID); err != nil {
		return fmt.Errorf("requeue run %s: %w", runID, err)
	}
	return tx.Commit()
}

// RequestStop asks the worker of a queued or running run to stop it
// (StopCancel or StopInterrupt). It reports false if the run is not
// queued for workers or has ended.
func (db *DB) RequestStop(ctx context.Context, runID, kind string) (bool, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("stop run %s: %w", runID, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `
		UPDATE runs SET stop_request = ?, updated_at = ?
		WHERE id = ? AND queue IS NOT NULL AND (queue = 'waiting' OR status = 'running')`,
		kind, formatTime(db.now()), runID)
	if err != nil {
		return false, fmt.Errorf("stop run %s: %w", runID, err)
	}
	if oneRow(res) != nil {
		return false, nil
	}
	if err := notify(ctx, tx, ChannelRuns, runID); err != nil {
		return false, fmt.Errorf("stop run %s: %w", runID, err)
	}
	return true, tx.Commit()
}

// StopRequests returns the stop requests of the runs owner holds, by run.
func (db *DB) StopRequests(ctx context.Context, owner string) (map[string]string, error) {
	rows, err := db.ro.QueryContext(ctx,
		`SELECT id, stop_request FROM runs WHERE lease_owner = ? AND stop_request IS NOT NULL`, owner)
	if err != nil {
		return nil, fmt.Errorf("stop requests: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, kind string
		if err := rows.Scan(&id, &kind); err != nil {
			return nil, fmt.Errorf("stop requests: %w", err)
		}
		out[id] = kind
	}
	return out, rows.Err()
}

// QueueDepth counts the runs waiting for a worker.
func (db *DB) QueueDepth(ctx context.Context) (int, error) {
	var n int
	err := db.ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM runs WHERE queue = 'waiting'`).Scan(&n)
	return n, err
}

// SessionHeld reports whether a run of the session other than except is
// being driven (its lease is held): then only its driver may write to the
// session. A worker claims no run of a session while any of its runs is
// held, so once except's lease is taken the answer cannot turn true.
func (db *DB) SessionHeld(ctx context.Context, sessionID, except string) (bool, error) {
	var n int
	err := db.ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM runs
		WHERE session_id = ? AND id != ? AND status = 'running' AND lease_owner IS NOT NULL`, sessionID, except).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("runs of session %s: %w", sessionID, err)
	}
	return n > 0, nil
}

// fence fails with ErrLeaseLost unless owner holds the run's lease: a
// process that lost it writes nothing more for the run. A run nobody holds
// (lease_owner NULL: requeued, released) is not owner's either.
func fence(ctx context.Context, tx *txn, runID, owner string) error {
	var holder string
	err := tx.QueryRowContext(ctx, `SELECT COALESCE(lease_owner, '') FROM runs WHERE id = ?`, runID).Scan(&holder)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if holder != owner {
		return fmt.Errorf("run %s is held by %q, not %q: %w", runID, holder, owner, ErrLeaseLost)
	}
	return nil
}

// notify sends payload on a PostgreSQL channel when tx commits; SQLite's
// readers poll instead.
func notify(ctx context.Context, tx *txn, channel, payload string) error {
	if !tx.pg {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_notify(?, ?)`, channel, payload)
	return err
}
