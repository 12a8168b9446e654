package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"agent/event"
)

// Guardrails and learnings are what later attempts and phases are told:
// guardrails say what not to do again, learnings what is worth knowing.

// Guardrail kinds.
const (
	GuardrailFailedApproach = "failed_approach" // from approach.failed
	GuardrailVerification   = "verification"    // from a failed verification
)

// Guardrail is one row of guardrails.
type Guardrail struct {
	PhaseID   string
	Attempt   int
	Kind      string // GuardrailFailedApproach or GuardrailVerification
	Text      string
	CreatedAt time.Time
}

// Learning is one row of learnings.
type Learning struct {
	PhaseID   string
	Attempt   int
	Text      string
	CreatedAt time.Time
}

// Guardrails returns the guardrails of one phase of a run, or of the whole
// run when phaseID is "", oldest first.
func (db *DB) Guardrails(ctx context.Context, runID, phaseID string) ([]Guardrail, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("guardrails of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	gs, err := listGuardrails(ctx, tx, runID, phaseID)
	if err != nil {
		return nil, fmt.Errorf("guardrails of run %s: %w", runID, err)
	}
	return gs, tx.Commit()
}

// Learnings returns every learning of a run, oldest first.
func (db *DB) Learnings(ctx context.Context, runID string) ([]Learning, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("learnings of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	ls, err := listLearnings(ctx, tx, runID)
	if err != nil {
		return nil, fmt.Errorf("learnings of run %s: %w", runID, err)
	}
	return ls, tx.Commit()
}

// approachText renders a failed approach as one line: "APPROACH — WHY".
func approachText(d event.ApproachData) string {
	approach, why := strings.TrimSpace(d.Approach), strings.TrimSpace(d.Why)
	switch {
	case approach == "":
		return why
	case why == "":
		return approach
	}
	return approach + " — " + why
}

// verificationText renders a failed verification's notes as one guardrail.
func verificationText(d event.VerificationData) string {
	var notes []string
	for _, n := range d.Notes {
		if n = strings.TrimSpace(n); n != "" {
			notes = append(notes, n)
		}
	}
	if len(notes) == 0 {
		return "verification failed"
	}
	return strings.Join(notes, "; ")
}

// insertGuardrail adds a guardrail for the event's phase and attempt;
// empty text is nothing to tell anyone, so it is skipped.
func insertGuardrail(ctx context.Context, tx *txn, e event.Event, kind, text string) error {
	if text == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO guardrails (run_id, phase_id, attempt, kind, text, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`,
		e.RunID, e.PhaseID, e.Attempt, kind, text, formatTime(e.TS))
	return err
}

// insertLearning projects learning.recorded; an empty one is skipped.
func insertLearning(ctx context.Context, tx *txn, e event.Event, d event.LearningData) error {
	text := strings.TrimSpace(d.Text)
	if text == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO learnings (run_id, phase_id, attempt, text, created_at) VALUES (?, ?, ?, ?, ?)`,
		e.RunID, e.PhaseID, e.Attempt, text, formatTime(e.TS))
	return err
}

func listGuardrails(ctx context.Context, tx *txn, runID, phaseID string) ([]Guardrail, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT phase_id, attempt, kind, text, created_at
		FROM guardrails WHERE run_id = ? AND (? = '' OR phase_id = ?) ORDER BY id`,
		runID, phaseID, phaseID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gs []Guardrail
	for rows.Next() {
		var g Guardrail
		if err := rows.Scan(&g.PhaseID, &g.Attempt, &g.Kind, &g.Text, timeValue{&g.CreatedAt}); err != nil {
			return nil, err
		}
		gs = append(gs, g)
	}
	return gs, rows.Err()
}

func listLearnings(ctx context.Context, tx *txn, runID string) ([]Learning, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT phase_id, attempt, text, created_at FROM learnings WHERE run_id = ? ORDER BY id`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ls []Learning
	for rows.Next() {
		var l Learning
		if err := rows.Scan(&l.PhaseID, &l.Attempt, &l.Text, timeValue{&l.CreatedAt}); err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, rows.Err()
}
