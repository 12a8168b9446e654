package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// defaultMaxAttempts is a phase's attempt budget when the plan gives none
// (docs/PROTOCOL.md#plan-format).
const defaultMaxAttempts = 3

// PlanState is a harness run's plan and the state of its phases, as
// projected from plan.created and the phase.* events.
type PlanState struct {
	RunID     string
	Objective string
	Mission   json.RawMessage // mission.json as last planned
	Phases    []Phase         // in plan order
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Started reports whether any phase has started an attempt; from then on
// plan.created no longer replaces the phases.
func (p *PlanState) Started() bool {
	for _, ph := range p.Phases {
		if ph.Attempts > 0 {
			return true
		}
	}
	return false
}

// PlanState returns the run's plan and phases. It returns an error
// wrapping ErrNotFound when the run has no plan.
func (db *DB) PlanState(ctx context.Context, runID string) (*PlanState, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("plan of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	p, err := getPlan(ctx, tx, runID)
	if err != nil {
		return nil, fmt.Errorf("plan of run %s: %w", runID, err)
	}
	if p.Phases, err = listPhases(ctx, tx, runID); err != nil {
		return nil, fmt.Errorf("plan of run %s: %w", runID, err)
	}
	return p, tx.Commit()
}

func getPlan(ctx context.Context, tx *txn, runID string) (*PlanState, error) {
	p := PlanState{RunID: runID}
	var mission string
	err := tx.QueryRowContext(ctx, `
		SELECT objective, mission_json, created_at, updated_at FROM plans WHERE run_id = ?`, runID).
		Scan(&p.Objective, &mission, timeValue{&p.CreatedAt}, timeValue{&p.UpdatedAt})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	p.Mission = json.RawMessage(mission)
	return &p, nil
}

// missionPhase is the part of a mission.json phase the store indexes; the
// whole phase object is kept raw in spec_json.
type missionPhase struct {
	ID          string   `json:"id"`
	Title       string   `json:"title"`
	DependsOn   []string `json:"depends_on"`
	MaxAttempts int      `json:"max_attempts"`
}

// createPlan projects plan.created: it stores the mission and replaces the
// run's phases with the plan's, all pending. A plan that does not decode,
// or has a phase without an id or two with the same id, is skipped whole.
// So is any plan after a phase has started: re-planning then would orphan
// attempts, and the orchestrator refuses it before emitting the event.
func createPlan(ctx context.Context, tx *txn, runID string, mission json.RawMessage, at, now time.Time) error {
	var m struct {
		Objective string            `json:"objective"`
		Phases    []json.RawMessage `json:"phases"`
	}
	if len(mission) == 0 || json.Unmarshal(mission, &m) != nil {
		return nil
	}
	phases := make([]missionPhase, len(m.Phases))
	seen := make(map[string]bool, len(m.Phases))
	for i, raw := range m.Phases {
		if json.Unmarshal(raw, &phases[i]) != nil || phases[i].ID == "" || seen[phases[i].ID] {
			return nil
		}
		seen[phases[i].ID] = true
	}

	var started bool
	if err := tx.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM phases WHERE run_id = ? AND attempts > 0)`, runID).Scan(&started); err != nil {
		return err
	}
	if started {
		return nil
	}

	if _, err := tx.ExecContext(ctx, `
		INSERT INTO plans (run_id, objective, mission_json, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (run_id) DO UPDATE SET
			objective = excluded.objective, mission_json = excluded.mission_json,
			updated_at = excluded.updated_at`,
		runID, m.Objective, string(mission), formatTime(at), formatTime(now)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM phases WHERE run_id = ?`, runID); err != nil {
		return err
	}
	for i, ph := range phases {
		if err := insertPhase(ctx, tx, runID, i, ph, m.Phases[i], now); err != nil {
			return err
		}
	}
	return nil
}
