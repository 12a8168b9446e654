package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"agent/event"
)

// Wait is one wait of a run (docs/PROTOCOL.md#waits): what run.waiting
// asked and, once resolved, its one answer.
type Wait struct {
	RunID     string
	SessionID string
	PhaseID   string
	Attempt   int   // of the phase, when a phase asked it
	Seq       int64 // of its first run.waiting
	Waiting   event.RunWaitingData
	Until     time.Time
	// Resolution is nil while nobody has answered.
	Resolution *event.WaitResolvedData
	// Journaled says the run's journal records the resolution.
	Journaled bool
	CreatedAt time.Time
}

// AnsweredError is a second answer to a wait: the first one won.
type AnsweredError struct {
	First event.WaitResolvedData
}

func (e *AnsweredError) Error() string {
	return fmt.Sprintf("already answered (%s, %s via %s)", e.First.Outcome, e.First.At, e.First.Via)
}

// recordWait is the projection of run.waiting: the wait's row, once, and
// the status of the run, or of the phase attempt that asked it. Asked
// again (a wake-up without an answer, a resume after a crash), the row
// stays as first recorded.
func recordWait(ctx context.Context, tx *txn, e event.Event, d event.RunWaitingData, now time.Time) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO waits (run_id, wait_id, seq, phase_id, attempt, kind, call_id, until_at, data, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id, wait_id) DO NOTHING`,
		e.RunID, d.WaitID, e.Seq, e.PhaseID, e.Attempt, d.Kind, d.CallID, formatTime(d.UntilTime(now)), string(e.Data), formatTime(now))
	if err != nil {
		return err
	}
	if e.PhaseID != "" {
		// The attempt parks (its phase.started continues it); the harness
		// parks once no phase can go on, and its own run.waiting says so.
		return waitAttempt(ctx, tx, e, now)
	}
	return setRunStatus(ctx, tx, e.RunID, event.StatusWaiting, now)
}

// journalResolution is the projection of wait.resolved: the journal now
// records the answer. Only ResolveWait answers a wait: an event alone
// (forged by a child's tool, say) never does.
func journalResolution(ctx context.Context, tx *txn, e event.Event, d event.WaitResolvedData, now time.Time) error {
	_, err := tx.ExecContext(ctx, `
		UPDATE waits SET journaled = 1 WHERE run_id = ? AND wait_id = ? AND outcome IS NOT NULL`, e.RunID, d.WaitID)
	if err != nil || e.PhaseID != "" {
		return err
	}
	// The run goes on: it waited in the process that drives it.
	_, err = tx.ExecContext(ctx, `UPDATE runs SET status = ?, updated_at = ? WHERE id = ? AND status = ?`,
		event.StatusRunning, formatTime(now), e.RunID, event.StatusWaiting)
	return err
}

// ResolveWait records the answer to a wait, unless it already has one:
// then *AnsweredError says the first. ErrNotFound: no such wait.
func (db *DB) ResolveWait(ctx context.Context, runID, waitID string, res event.WaitResolvedData) (Wait, error) {
	res.WaitID = waitID
	if res.Outcome == "" {
		return Wait{}, fmt.Errorf("resolve wait %s of run %s: no outcome", waitID, runID)
	}
	now := db.now()
	if res.At == "" {
		res.At = now.UTC().Format(time.RFC3339)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return Wait{}, err
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return Wait{}, fmt.Errorf("resolve wait %s of run %s: %w", waitID, runID, err)
	}
	defer tx.Rollback()
	out, err := tx.ExecContext(ctx, `
		UPDATE waits SET outcome = ?, resolution = ?, resolved_at = ?
		WHERE run_id = ? AND wait_id = ? AND outcome IS NULL`,
		res.Outcome, string(raw), formatTime(now), runID, waitID)
	if err != nil {
		return Wait{}, fmt.Errorf("resolve wait %s of run %s: %w", waitID, runID, err)
	}
	n, err := out.RowsAffected()
	if err != nil {
		return Wait{}, err
	}
	ws, err := scanWaits(tx.QueryContext(ctx, waitSelect+` WHERE w.run_id = ? AND w.wait_id = ?`, runID, waitID))
	if err != nil {
		return Wait{}, fmt.Errorf("resolve wait %s of run %s: %w", waitID, runID, err)
	}
	switch {
	case len(ws) == 0:
		return Wait{}, fmt.Errorf("run %s has no wait %s: %w", runID, waitID, ErrNotFound)
	case n == 0:
		return ws[0], &AnsweredError{First: *ws[0].Resolution}
	}
	if err := notify(ctx, tx, ChannelWaits, runID); err != nil {
		return Wait{}, err
	}
	// A run parked in the workers' queue until its deadline may go on
	// now, on whichever worker is free, whoever answered.
	woken, err := tx.ExecContext(ctx, `
		UPDATE runs SET queued_at = ? WHERE id = ? AND status = ? AND queue = 'waiting' AND lease_owner IS NULL AND queued_at > ?`,
		formatTime(now), runID, event.StatusWaiting, formatTime(now))
	if err != nil {
		return Wait{}, fmt.Errorf("resolve wait %s of run %s: %w", waitID, runID, err)
	}
	if n, _ := woken.RowsAffected(); n > 0 {
		if err := notify(ctx, tx, ChannelRuns, runID); err != nil {
			return Wait{}, err
		}
	}
	return ws[0], tx.Commit()
}

// wakeTimes are the waits not yet journaled as resolved (run_id, at),
// with when each lets its run go on: at once once answered (at is an
// empty string, which sorts first), else at its deadline. Each half reads
// a partial index, so a poll costs what is open, not the history (joined
// to runs by CROSS JOIN, which keeps SQLite from scanning runs instead).
const wakeTimes = `(SELECT run_id, until_at AS at FROM waits WHERE outcome IS NULL
	UNION ALL SELECT run_id, '' AS at FROM waits WHERE outcome IS NOT NULL AND journaled = 0)`

// QueueParkedRun queues a run that parked (on a worker), for a worker to
// claim once it may go on: at once if a wait has an answer its journal
// lacks, else at the soonest deadline. An answer that comes later moves
// it up (ResolveWait). It reads the waits in its write transaction, so an
// answer given meanwhile is never missed. A run with nothing to wait for
// is left unqueued (false).
func (db *DB) QueueParkedRun(ctx context.Context, runID string) (at time.Time, queued bool, err error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return at, false, fmt.Errorf("queue parked run %s: %w", runID, err)
	}
	defer tx.Rollback()
	var when sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT MIN(w.at) FROM `+wakeTimes+` w WHERE w.run_id = ?`, runID).Scan(&when); err != nil {
		return at, false, fmt.Errorf("queue parked run %s: %w", runID, err)
	}
	if !when.Valid {
		return at, false, nil
	}
	now := db.now()
	at = now
	if when.String != "" {
		if at, err = time.Parse(timeLayout, when.String); err != nil {
			at = now // unreadable: go on now rather than never
		}
	}
	if err := queueAt(ctx, tx, runID, at, now); err != nil {
		return at, false, fmt.Errorf("queue parked run %s: %w", runID, err)
	}
	return at, true, tx.Commit()
}

// RequeueStranded queues a waiting run that its worker left claimed, once
// that worker is gone: it died (or could not queue it) between recording
// the run's run.waiting and queueing it (QueueParkedRun). A worker calls it
// for the runs Wakeable finds, so the answer or the deadline that was to
// wake it still does. False: the run is not stranded.
func (db *DB) RequeueStranded(ctx context.Context, runID string) (bool, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("requeue run %s: %w", runID, err)
	}
	defer tx.Rollback()
	r, err := getRun(ctx, tx, runID)
	if err != nil {
		return false, fmt.Errorf("requeue run %s: %w", runID, err)
	}
	now := db.now()
	if r.Status != event.StatusWaiting || r.Queue != event.StatusClaimed || r.LeaseOwner != "" && !db.abandoned(*r, now) {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, lease_heartbeat_at = NULL WHERE id = ?`, runID); err != nil {
		return false, fmt.Errorf("requeue run %s: %w", runID, err)
	}
	if err := queueAt(ctx, tx, runID, now, now); err != nil {
		return false, fmt.Errorf("requeue run %s: %w", runID, err)
	}
	return true, tx.Commit()
}

// Waits returns a run's waits, oldest first.
func (db *DB) Waits(ctx context.Context, runID string) ([]Wait, error) {
	ws, err := scanWaits(db.ro.QueryContext(ctx, waitSelect+` WHERE w.run_id = ? ORDER BY w.seq, w.wait_id`, runID))
	if err != nil {
		return nil, fmt.Errorf("waits of run %s: %w", runID, err)
	}
	return ws, nil
}

// OpenWaits is the inbox: every wait nobody has answered of a run that
// waits, the soonest deadline first. A sub-run's wait is its parent's too,
// and answered there (docs/PROTOCOL.md#subagents).
func (db *DB) OpenWaits(ctx context.Context) ([]Wait, error) {
	ws, err := scanWaits(db.ro.QueryContext(ctx, waitSelect+`
		WHERE w.outcome IS NULL AND r.status = ? AND r.parent_run_id IS NULL ORDER BY w.until_at, w.run_id`, event.StatusWaiting))
	if err != nil {
		return nil, fmt.Errorf("waiting runs: %w", err)
	}
	return ws, nil
}

// Wakeable returns the waiting runs that may go on now: an answer their
// journal does not record yet, or a deadline passed. A sub-run goes on
// only with its parent. next is the soonest
// deadline after now of the others (zero if none).
func (db *DB) Wakeable(ctx context.Context, now time.Time) (runIDs []string, next time.Time, err error) {
	rows, err := db.ro.QueryContext(ctx, `
		SELECT w.run_id, MIN(w.at) FROM `+wakeTimes+` w CROSS JOIN runs r
		WHERE r.id = w.run_id AND r.status = ? AND r.parent_run_id IS NULL GROUP BY w.run_id`, event.StatusWaiting)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("waiting runs: %w", err)
	}
	defer rows.Close()
	cut := formatTime(now)
	for rows.Next() {
		var id, at string
		if err := rows.Scan(&id, &at); err != nil {
			return nil, time.Time{}, err
		}
		if at <= cut {
			runIDs = append(runIDs, id)
			continue
		}
		if t, err := time.Parse(timeLayout, at); err == nil && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return runIDs, next, rows.Err()
}

const waitSelect = `
	SELECT w.run_id, COALESCE(r.session_id, ''), w.phase_id, w.attempt, w.seq, w.until_at, w.data,
		COALESCE(w.resolution, ''), w.journaled, w.created_at
	FROM waits w JOIN runs r ON r.id = w.run_id`

func scanWaits(rows *rows, err error) ([]Wait, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Wait
	for rows.Next() {
		var w Wait
		var data, resolution string
		var journaled int
		if err := rows.Scan(&w.RunID, &w.SessionID, &w.PhaseID, &w.Attempt, &w.Seq, timeValue{&w.Until}, &data,
			&resolution, &journaled, timeValue{&w.CreatedAt}); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(data), &w.Waiting); err != nil {
			return nil, fmt.Errorf("wait of run %s: %w", w.RunID, err)
		}
		if resolution != "" {
			var res event.WaitResolvedData
			if err := json.Unmarshal([]byte(resolution), &res); err != nil {
				return nil, fmt.Errorf("wait %s of run %s: %w", w.Waiting.WaitID, w.RunID, err)
			}
			w.Resolution = &res
		}
		w.Journaled = journaled != 0
		out = append(out, w)
	}
	return out, rows.Err()
}
