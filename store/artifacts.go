package store

import (
	"context"
	"fmt"
	"time"

	"agent/event"
)

// Artifact is one row of artifacts: a file a tool wrote, once per write.
type Artifact struct {
	RunID     string
	PhaseID   string // "" on the fast path
	Attempt   int
	Path      string // relative to the workspace
	SHA256    string
	Bytes     int64
	CreatedAt time.Time
}

// Artifacts returns the artifacts of one phase of a run, or of the whole
// run when phaseID is "", in the order they were written.
func (db *DB) Artifacts(ctx context.Context, runID, phaseID string) ([]Artifact, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("artifacts of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	as, err := listArtifacts(ctx, tx, runID, phaseID)
	if err != nil {
		return nil, fmt.Errorf("artifacts of run %s: %w", runID, err)
	}
	return as, tx.Commit()
}

// insertArtifact projects artifact.created.
func insertArtifact(ctx context.Context, tx *txn, e event.Event, d event.ArtifactData) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO artifacts (run_id, phase_id, attempt, path, sha256, bytes, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		e.RunID, e.PhaseID, e.Attempt, d.Path, d.SHA256, d.Bytes, formatTime(e.TS))
	return err
}

func listArtifacts(ctx context.Context, tx *txn, runID, phaseID string) ([]Artifact, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT run_id, phase_id, attempt, path, sha256, bytes, created_at
		FROM artifacts WHERE run_id = ? AND (? = '' OR phase_id = ?) ORDER BY id`,
		runID, phaseID, phaseID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var as []Artifact
	for rows.Next() {
		var a Artifact
		if err := rows.Scan(&a.RunID, &a.PhaseID, &a.Attempt, &a.Path, &a.SHA256, &a.Bytes,
			timeValue{&a.CreatedAt}); err != nil {
			return nil, err
		}
		as = append(as, a)
	}
	return as, rows.Err()
}
