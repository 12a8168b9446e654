package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Sub-runs (the task tool, docs/PROTOCOL.md#subagents): a run created for
// a task call of another run, its parent, and driven by the process that
// drives the parent.

// SubRun returns the latest sub-run of parentID for the task call named
// call (Run.ParentCall), or ErrNotFound: a resumed task call continues it
// rather than starting another.
func (db *DB) SubRun(ctx context.Context, parentID, call string) (*Run, error) {
	r, err := scanRun(db.ro.QueryRowContext(ctx, `SELECT `+runColumns+` FROM runs
		WHERE parent_run_id = ? AND parent_call = ? ORDER BY created_at DESC, rowid DESC LIMIT 1`, parentID, call))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sub-run of run %s for call %s: %w", parentID, call, err)
	}
	return r, nil
}

// SubRuns returns the sub-runs of parentID, oldest first.
func (db *DB) SubRuns(ctx context.Context, parentID string) ([]Run, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sub-runs of run %s: %w", parentID, err)
	}
	defer tx.Rollback()
	runs, err := queryRuns(ctx, tx, `SELECT `+runColumns+` FROM runs WHERE parent_run_id = ? ORDER BY created_at, rowid`, parentID)
	if err != nil {
		return nil, fmt.Errorf("sub-runs of run %s: %w", parentID, err)
	}
	return runs, tx.Commit()
}
