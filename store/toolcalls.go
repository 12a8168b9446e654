package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"agent/event"
)

// ToolCall is one row of tool_calls, projected from tool.started and
// tool.completed. A row left "started" is a call a crash interrupted.
type ToolCall struct {
	RunID       string
	CallID      string
	Name        string
	Args        json.RawMessage
	Status      string // event.StatusStarted, event.StatusCompleted or event.StatusFailed
	Output      string
	Error       string
	Truncated   bool
	StartedAt   time.Time
	CompletedAt time.Time
}

// ToolCalls returns the run's tool calls in the order they first started.
func (db *DB) ToolCalls(ctx context.Context, runID string) ([]ToolCall, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("tool calls of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	calls, err := listToolCalls(ctx, tx, runID)
	if err != nil {
		return nil, fmt.Errorf("tool calls of run %s: %w", runID, err)
	}
	return calls, tx.Commit()
}

// startToolCall records a call before it runs. A call run again after a
// resume overwrites its row back to started.
func startToolCall(ctx context.Context, tx *txn, runID string, d event.ToolStartedData, at time.Time) error {
	var args any
	if len(d.Args) > 0 {
		args = string(d.Args)
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO tool_calls (run_id, call_id, name, args_json, status, started_at)
		VALUES (?, ?, ?, ?, 'started', ?)
		ON CONFLICT (run_id, call_id) DO UPDATE SET
			name = excluded.name, args_json = excluded.args_json, status = 'started',
			output = '', error = '', truncated = 0,
			started_at = excluded.started_at, completed_at = NULL`,
		runID, d.CallID, d.Name, args, formatTime(at))
	return err
}

// completeToolCall records a call's result, inserting the row if its
// tool.started was never seen.
func completeToolCall(ctx context.Context, tx *txn, runID string, d event.ToolCompletedData, at time.Time) error {
	status := event.StatusCompleted
	if !d.OK {
		status = event.StatusFailed
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO tool_calls (run_id, call_id, name, status, output, error, truncated, completed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id, call_id) DO UPDATE SET
			name = COALESCE(NULLIF(excluded.name, ''), tool_calls.name),
			status = excluded.status, output = excluded.output, error = excluded.error,
			truncated = excluded.truncated, completed_at = excluded.completed_at`,
		runID, d.CallID, d.Name, status, d.Output, d.Error, d.Truncated, formatTime(at))
	return err
}

func listToolCalls(ctx context.Context, tx *txn, runID string) ([]ToolCall, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT run_id, call_id, name, COALESCE(args_json, ''), status, output, error, truncated,
			started_at, completed_at
		FROM tool_calls WHERE run_id = ? ORDER BY rowid`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var calls []ToolCall
	for rows.Next() {
		var c ToolCall
		var args string
		if err := rows.Scan(&c.RunID, &c.CallID, &c.Name, &args, &c.Status, &c.Output, &c.Error,
			&c.Truncated, timeValue{&c.StartedAt}, timeValue{&c.CompletedAt}); err != nil {
			return nil, err
		}
		if args != "" {
			c.Args = json.RawMessage(args)
		}
		calls = append(calls, c)
	}
	return calls, rows.Err()
}
