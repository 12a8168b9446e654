package store

import (
	"context"
	"fmt"

	"agent/event"
)

// Stats are counts over everything the store holds, for metrics (the
// gateway's /metrics): read from the rows at each scrape, they survive
// restarts and are the same for every process on a shared database.
// Forks' synthetic runs are left out: no model was called, no tool ran.
// Pruning keeps what they count (runs' rows, tool calls' names and
// outcomes), so the totals only grow.
type Stats struct {
	// Runs counts runs by the status people are shown (Run.ShownStatus):
	// "queued" are the runs waiting for a worker.
	Runs map[string]int64
	// Tokens the model reported, over every run.
	PromptTokens, CompletionTokens int64
	// ToolCalls counts the tool calls that returned, by tool and outcome.
	ToolCalls []ToolCallCount
	// JobRuns counts the attempts of scheduled jobs' ticks by status
	// (event.StatusQueued … event.StatusSkipped).
	JobRuns map[string]int64
}

// ToolCallCount is the number of calls of one tool with one outcome.
type ToolCallCount struct {
	Tool  string
	OK    bool
	Count int64
}

// Stats counts what the store holds.
func (db *DB) Stats(ctx context.Context) (Stats, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return Stats{}, fmt.Errorf("stats: %w", err)
	}
	defer tx.Rollback()
	st := Stats{Runs: map[string]int64{}, JobRuns: map[string]int64{}}
	if err := runStats(ctx, tx, &st); err != nil {
		return Stats{}, fmt.Errorf("stats of runs: %w", err)
	}
	if st.ToolCalls, err = toolCallStats(ctx, tx); err != nil {
		return Stats{}, fmt.Errorf("stats of tool calls: %w", err)
	}
	if err := jobRunStats(ctx, tx, st.JobRuns); err != nil {
		return Stats{}, fmt.Errorf("stats of job runs: %w", err)
	}
	return st, tx.Commit()
}

// runStats groups by what ShownStatus reads, so that rule stays in one
// place. PostgreSQL's SUM of a BIGINT is a NUMERIC: cast back.
func runStats(ctx context.Context, tx *txn, st *Stats) error {
	rows, err := tx.QueryContext(ctx, `
		SELECT status, CASE WHEN reason = 'planned' THEN 'planned' ELSE '' END, COALESCE(queue, ''),
			COUNT(*), CAST(COALESCE(SUM(prompt_tokens), 0) AS BIGINT), CAST(COALESCE(SUM(completion_tokens), 0) AS BIGINT)
		FROM runs WHERE fork = 0
		GROUP BY 1, 2, 3`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r Run
		var n, prompt, completion int64
		if err := rows.Scan(&r.Status, &r.Reason, &r.Queue, &n, &prompt, &completion); err != nil {
			return err
		}
		st.Runs[r.ShownStatus()] += n
		st.PromptTokens += prompt
		st.CompletionTokens += completion
	}
	return rows.Err()
}

// toolCallStats leaves out calls still under way, or whose run stopped
// during them: they have no outcome yet.
func toolCallStats(ctx context.Context, tx *txn) ([]ToolCallCount, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT name, status, COUNT(*) FROM tool_calls
		WHERE status <> ? AND run_id NOT IN (SELECT id FROM runs WHERE fork = 1)
		GROUP BY name, status ORDER BY name, status`, event.StatusStarted)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ToolCallCount
	for rows.Next() {
		var c ToolCallCount
		var status string
		if err := rows.Scan(&c.Tool, &status, &c.Count); err != nil {
			return nil, err
		}
		c.OK = status == event.StatusCompleted
		out = append(out, c)
	}
	return out, rows.Err()
}

func jobRunStats(ctx context.Context, tx *txn, byStatus map[string]int64) error {
	rows, err := tx.QueryContext(ctx, `SELECT status, COUNT(*) FROM job_runs GROUP BY status`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			return err
		}
		byStatus[status] = n
	}
	return rows.Err()
}
