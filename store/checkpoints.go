package store

import (
	"context"
	"fmt"
	"time"

	"agent/event"
)

// Checkpoint is one row of checkpoints: a file as it was before a run first
// changed it (projected from checkpoint.created). Its JSON is what `agent
// rewind --list --json` and the gateway's checkpoint.list show.
type Checkpoint struct {
	RunID   string `json:"-"`
	Number  int    `json:"number"` // 1, 2, 3… within the run, in the order recorded
	Seq     int64  `json:"seq"`    // of the checkpoint.created event
	PhaseID string `json:"phase_id,omitempty"`
	Attempt int    `json:"-"`
	CallID  string `json:"call_id,omitempty"` // the tool call that was about to change the file
	Tool    string `json:"tool,omitempty"`
	Path    string `json:"path"` // workspace-relative, slash separated
	Blob    string `json:"-"`    // sha256 of the saved content; "" when the file did not exist
	Existed bool   `json:"existed"`
	Mode    uint32 `json:"-"` // permission bits
	Bytes   int64  `json:"bytes"`

	CreatedAt time.Time `json:"-"`
}

// Checkpoints returns a run's checkpoints in number order.
func (db *DB) Checkpoints(ctx context.Context, runID string) ([]Checkpoint, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("checkpoints of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	cps, err := listCheckpoints(ctx, tx, runID)
	if err != nil {
		return nil, fmt.Errorf("checkpoints of run %s: %w", runID, err)
	}
	return cps, tx.Commit()
}

// LastWrites returns, for each path a run wrote with write_file or
// edit_file, the sha256 of the last content it wrote there: what the file
// holds unless something changed it after the run.
func (db *DB) LastWrites(ctx context.Context, runID string) (map[string]string, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("last writes of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx,
		`SELECT path, sha256 FROM artifacts WHERE run_id = ? ORDER BY id`, runID)
	if err != nil {
		return nil, fmt.Errorf("last writes of run %s: %w", runID, err)
	}
	defer rows.Close()
	last := map[string]string{}
	for rows.Next() {
		var path, sum string
		if err := rows.Scan(&path, &sum); err != nil {
			return nil, fmt.Errorf("last writes of run %s: %w", runID, err)
		}
		last[path] = sum // in write order, so the last write wins
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("last writes of run %s: %w", runID, err)
	}
	return last, tx.Commit()
}

// insertCheckpoint projects checkpoint.created, numbering it after the
// run's previous checkpoints.
func insertCheckpoint(ctx context.Context, tx *txn, e event.Event) error {
	var d event.CheckpointData
	if e.Decode(&d) != nil || d.Path == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO checkpoints (run_id, number, seq, phase_id, attempt, call_id, tool,
			path, blob, existed, mode, bytes, created_at)
		VALUES (?, (SELECT COALESCE(MAX(number), 0) + 1 FROM checkpoints WHERE run_id = ?),
			?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.RunID, e.RunID, e.Seq, e.PhaseID, e.Attempt, d.CallID, d.Tool,
		d.Path, d.Blob, d.Existed, d.Mode, d.Bytes, formatTime(e.TS))
	return err
}

func listCheckpoints(ctx context.Context, tx *txn, runID string) ([]Checkpoint, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT run_id, number, seq, phase_id, attempt, call_id, tool,
			path, blob, existed, mode, bytes, created_at
		FROM checkpoints WHERE run_id = ? ORDER BY number`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cps []Checkpoint
	for rows.Next() {
		var c Checkpoint
		if err := rows.Scan(&c.RunID, &c.Number, &c.Seq, &c.PhaseID, &c.Attempt, &c.CallID, &c.Tool,
			&c.Path, &c.Blob, &c.Existed, &c.Mode, &c.Bytes, timeValue{&c.CreatedAt}); err != nil {
			return nil, err
		}
		cps = append(cps, c)
	}
	return cps, rows.Err()
}
