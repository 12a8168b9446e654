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

// Phase is one row of phases.
type Phase struct {
	RunID string
	ID    string
	Index int // position in the plan
	Title string
	// Status is event.StatusPending, event.StatusRunning, event.StatusCompleted or event.StatusFailed.
	// A phase goes back to pending when it will be retried or when its
	// attempt was interrupted or cancelled, so a resume runs it again.
	Status string
	// Attempts is the highest attempt number started. Attempts-BudgetBase
	// is what counts against MaxAttempts: ResetBudget raises BudgetBase.
	Attempts    int
	BudgetBase  int
	MaxAttempts int
	DependsOn   []string
	Spec        json.RawMessage // the phase object from mission.json
	Output      string          // the final message of the completed attempt
	StartedAt   time.Time       // of the first attempt
	CompletedAt time.Time
	UpdatedAt   time.Time
}

// ResetBudget gives a failed phase a fresh attempt budget and makes it
// pending again, so `agent resume` retries it up to MaxAttempts more times.
// Attempt numbers keep increasing. It returns an error wrapping
// ErrNotFound when there is no such phase.
func (db *DB) ResetBudget(ctx context.Context, runID, phaseID string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("reset budget of phase %s of run %s: %w", phaseID, runID, err)
	}
	defer tx.Rollback()
	if err := resetBudget(ctx, tx, runID, phaseID, db.now()); err != nil {
		return fmt.Errorf("reset budget of phase %s of run %s: %w", phaseID, runID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("reset budget of phase %s of run %s: %w", phaseID, runID, err)
	}
	return nil
}

func resetBudget(ctx context.Context, tx *txn, runID, phaseID string, now time.Time) error {
	res, err := tx.ExecContext(ctx, `
		UPDATE phases SET status = 'pending', budget_base = attempts, updated_at = ?
		WHERE run_id = ? AND id = ? AND status = 'failed'`, formatTime(now), runID, phaseID)
	if err != nil {
		return err
	}
	if err := oneRow(res); !errors.Is(err, ErrNotFound) {
		return err
	}
	// Nothing changed: say whether the phase is missing or not failed.
	var status string
	err = tx.QueryRowContext(ctx, `SELECT status FROM phases WHERE run_id = ? AND id = ?`, runID, phaseID).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("phase is %s, not failed", status)
}

func insertPhase(ctx context.Context, tx *txn, runID string, idx int, ph missionPhase, spec json.RawMessage, now time.Time) error {
	maxAttempts := ph.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = defaultMaxAttempts
	}
	deps := ph.DependsOn
	if deps == nil {
		deps = []string{}
	}
	depsJSON, err := json.Marshal(deps)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO phases (run_id, id, idx, title, status, max_attempts, depends_on_json, spec_json, updated_at)
		VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?)`,
		runID, ph.ID, idx, ph.Title, maxAttempts, string(depsJSON), string(spec), formatTime(now))
	return err
}

func listPhases(ctx context.Context, tx *txn, runID string) ([]Phase, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT run_id, id, idx, title, status, attempts, budget_base, max_attempts,
			depends_on_json, spec_json, output, started_at, completed_at, updated_at
		FROM phases WHERE run_id = ? ORDER BY idx`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var phases []Phase
	for rows.Next() {
		var p Phase
		var deps, spec string
		if err := rows.Scan(&p.RunID, &p.ID, &p.Index, &p.Title, &p.Status, &p.Attempts,
			&p.BudgetBase, &p.MaxAttempts, &deps, &spec, &p.Output,
			timeValue{&p.StartedAt}, timeValue{&p.CompletedAt}, timeValue{&p.UpdatedAt}); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(deps), &p.DependsOn); err != nil {
			return nil, fmt.Errorf("phase %s depends_on: %w", p.ID, err)
		}
		if len(p.DependsOn) == 0 {
			p.DependsOn = nil
		}
		p.Spec = json.RawMessage(spec)
		phases = append(phases, p)
	}
	return phases, rows.Err()
}

// startPhase projects phase.started: the phase runs attempt e.Attempt. A
// phase run again after completing (a rewind) loses its old output.
func startPhase(ctx context.Context, tx *txn, e event.Event, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `
		UPDATE phases SET status = 'running', attempts = `+tx.greatest(`attempts`, `?`)+`,
			started_at = COALESCE(started_at, ?), output = '', completed_at = NULL, updated_at = ?
		WHERE run_id = ? AND id = ?`,
		e.Attempt, formatTime(e.TS), formatTime(now), e.RunID, e.PhaseID); err != nil {
		return err
	}
	return startAttempt(ctx, tx, e)
}

// completePhase projects phase.completed.
func completePhase(ctx context.Context, tx *txn, e event.Event, d event.PhaseData, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `
		UPDATE phases SET status = 'completed', output = ?, completed_at = ?, updated_at = ?
		WHERE run_id = ? AND id = ?`,
		d.Output, formatTime(e.TS), formatTime(now), e.RunID, e.PhaseID); err != nil {
		return err
	}
	status := event.StatusPassed
	if d.Status != "" && finishedAttemptStatus(d.Status) {
		status = d.Status
	}
	return finishAttempt(ctx, tx, e, status, d)
}

// failPhase projects phase.failed. The phase is pending again if it will
// be retried, or if the attempt was interrupted or cancelled rather than
// failing on its own; otherwise it has failed for good.
func failPhase(ctx context.Context, tx *txn, e event.Event, d event.PhaseData, now time.Time) error {
	status := event.StatusFailed
	if d.Status != "" && d.Status != event.StatusPassed && finishedAttemptStatus(d.Status) {
		status = d.Status
	}
	phaseStatus := event.StatusFailed
	if d.WillRetry || status == event.StatusInterrupted || status == event.StatusCancelled {
		phaseStatus = event.StatusPending
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE phases SET status = ?, updated_at = ? WHERE run_id = ? AND id = ?`,
		phaseStatus, formatTime(now), e.RunID, e.PhaseID); err != nil {
		return err
	}
	return finishAttempt(ctx, tx, e, status, d)
}
