package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"agent/event"
)

// Verification is one row of verifications: the findings of checking one
// attempt's evidence.
type Verification struct {
	PhaseID      string
	Attempt      int
	Status       string // pass, fail or warn
	EvidenceType string
	Findings     json.RawMessage // the findings as the event carried them
	Path         string          // the findings artifact, verification/PHASE-ATTEMPT.json
	CreatedAt    time.Time
}

// Verifications returns every verification of a run, oldest first.
func (db *DB) Verifications(ctx context.Context, runID string) ([]Verification, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("verifications of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	vs, err := listVerifications(ctx, tx, runID)
	if err != nil {
		return nil, fmt.Errorf("verifications of run %s: %w", runID, err)
	}
	return vs, tx.Commit()
}

// insertVerification projects verification.completed. A failed one also
// becomes a guardrail, so the next attempt is told what was missing.
func insertVerification(ctx context.Context, tx *txn, e event.Event, d event.VerificationData) error {
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO verifications (run_id, phase_id, attempt, status, evidence_type, findings_json, path, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		e.RunID, e.PhaseID, e.Attempt, d.Status, d.EvidenceType, string(e.Data), d.Path,
		formatTime(e.TS)); err != nil {
		return err
	}
	if d.Status != "fail" {
		return nil
	}
	return insertGuardrail(ctx, tx, e, GuardrailVerification, verificationText(d))
}

func listVerifications(ctx context.Context, tx *txn, runID string) ([]Verification, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT phase_id, attempt, status, evidence_type, findings_json, path, created_at
		FROM verifications WHERE run_id = ? ORDER BY id`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var vs []Verification
	for rows.Next() {
		var v Verification
		var findings string
		if err := rows.Scan(&v.PhaseID, &v.Attempt, &v.Status, &v.EvidenceType, &findings, &v.Path,
			timeValue{&v.CreatedAt}); err != nil {
			return nil, err
		}
		v.Findings = json.RawMessage(findings)
		vs = append(vs, v)
	}
	return vs, rows.Err()
}
