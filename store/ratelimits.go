package store

import (
	"context"
	"fmt"
	"time"

	"agent/event"
)

// Paused is a run a rate limit interrupted, and when it may go on.
type Paused struct {
	RunID       string
	SessionID   string
	ResumeAfter time.Time
}

// RateLimited returns the gateway runs (those in a session) a rate limit
// interrupted and nothing has resumed since (README.md#context-and-spend).
func (db *DB) RateLimited(ctx context.Context) ([]Paused, error) {
	rows, err := db.ro.QueryContext(ctx, `
		SELECT id, session_id, resume_after FROM runs
		WHERE status = ? AND reason = ? AND session_id IS NOT NULL AND session_id != '' AND resume_after IS NOT NULL
		ORDER BY resume_after`, event.StatusInterrupted, event.ReasonRateLimited)
	if err != nil {
		return nil, fmt.Errorf("rate-limited runs: %w", err)
	}
	defer rows.Close()
	var out []Paused
	for rows.Next() {
		var p Paused
		var at string
		if err := rows.Scan(&p.RunID, &p.SessionID, &at); err != nil {
			return nil, fmt.Errorf("rate-limited runs: %w", err)
		}
		if p.ResumeAfter, err = time.Parse(time.RFC3339, at); err != nil {
			p.ResumeAfter = time.Now() // unreadable: go on now rather than never
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
