package store

import (
	"context"
	"encoding/json"
	"fmt"

	"agent/event"
)

// HookRecords are the hook runs (hook.completed) of a single run's loop,
// in the order they were recorded: a resumed loop acts on them rather
// than running the hooks again (docs/PROTOCOL.md#hooks). A phase
// attempt's are in its AttemptState.
func (db *DB) HookRecords(ctx context.Context, runID string) ([]event.HookCompletedData, error) {
	q := `SELECT COALESCE(data, '') FROM events WHERE run_id = ? AND type = ? AND phase_id IS NULL ORDER BY seq`
	args := []any{runID, event.HookCompleted}
	rows, err := db.ro.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("hook runs of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []event.HookCompletedData
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		var d event.HookCompletedData
		if json.Unmarshal([]byte(data), &d) == nil && d.Event != "" {
			out = append(out, d)
		}
	}
	return out, rows.Err()
}
