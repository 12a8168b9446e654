package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"agent/event"
	"agent/llm"
	"agent/prompts"
)

// interruptedReason is the reason InterruptAttempts gives.
const interruptedReason = "the harness stopped during this attempt"

// finishedAttemptStatus reports whether s is a status an attempt can end with.
func finishedAttemptStatus(s string) bool {
	switch s {
	case event.StatusPassed, event.StatusFailed, event.StatusCrashed, event.StatusTimeout, event.StatusInterrupted, event.StatusCancelled:
		return true
	}
	return false
}

// Attempt is one row of phase_attempts: one try at a phase.
type Attempt struct {
	RunID      string
	PhaseID    string
	Attempt    int
	Status     string // event.StatusRunning until it ends
	Reason     string
	Reasons    []string // the verifier's reasons, when it failed verification
	Output     string
	Usage      event.Usage
	DurationMS int64
	StartedAt  time.Time
	FinishedAt time.Time
}

// Attempts returns every attempt of the run's phases, in plan order and
// then attempt order.
func (db *DB) Attempts(ctx context.Context, runID string) ([]Attempt, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("attempts of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	as, err := listAttempts(ctx, tx, runID, false)
	if err != nil {
		return nil, fmt.Errorf("attempts of run %s: %w", runID, err)
	}
	return as, tx.Commit()
}

// InterruptAttempts is for resuming after a crash: every attempt still
// running belonged to the harness that stopped, so it becomes interrupted
// and its phase pending, to be run again. It returns the attempts it
// changed, as they are now.
func (db *DB) InterruptAttempts(ctx context.Context, runID string) ([]Attempt, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("interrupt attempts of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	as, err := interruptAttempts(ctx, tx, runID, db.now())
	if err != nil {
		return nil, fmt.Errorf("interrupt attempts of run %s: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("interrupt attempts of run %s: %w", runID, err)
	}
	return as, nil
}

func interruptAttempts(ctx context.Context, tx *txn, runID string, now time.Time) ([]Attempt, error) {
	// Attempts queued for workers end too: whoever runs one can write
	// nothing more for it (fenceAttempt).
	if _, err := tx.ExecContext(ctx, `DELETE FROM attempt_queue WHERE run_id = ?`, runID); err != nil {
		return nil, err
	}
	as, err := listAttempts(ctx, tx, runID, true)
	if err != nil || len(as) == 0 {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE phase_attempts SET status = 'interrupted', reason = ?, finished_at = ?
		WHERE run_id = ? AND status = 'running'`, interruptedReason, formatTime(now), runID); err != nil {
		return nil, err
	}
	// Every running phase, not only those of the attempts above: no phase
	// runs while the harness is down.
	if _, err := tx.ExecContext(ctx, `
		UPDATE phases SET status = 'pending', updated_at = ? WHERE run_id = ? AND status = 'running'`,
		formatTime(now), runID); err != nil {
		return nil, err
	}
	for i := range as {
		as[i].Status, as[i].Reason, as[i].FinishedAt = event.StatusInterrupted, interruptedReason, now
	}
	return as, nil
}

// startAttempt records an attempt as running. An attempt number started
// again starts over, unless it waited: then it goes on, and keeps when it
// started.
func startAttempt(ctx context.Context, tx *txn, e event.Event) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO phase_attempts (run_id, phase_id, attempt, status, started_at)
		VALUES (?, ?, ?, 'running', ?)
		ON CONFLICT (run_id, phase_id, attempt) DO UPDATE SET
			status = 'running', reason = '', reasons_json = NULL, output = '',
			prompt_tokens = 0, completion_tokens = 0, duration_ms = 0,
			started_at = CASE WHEN phase_attempts.status = 'waiting' THEN phase_attempts.started_at ELSE excluded.started_at END,
			finished_at = NULL`,
		e.RunID, e.PhaseID, e.Attempt, formatTime(e.TS))
	return err
}

// waitAttempt projects a phase's run.waiting: its running attempt, and
// the phase, wait (docs/PROTOCOL.md#waits). A waiting attempt is no
// running one: a resume continues it (its phase.started again) rather
// than interrupting it.
func waitAttempt(ctx context.Context, tx *txn, e event.Event, now time.Time) error {
	res, err := tx.ExecContext(ctx, `
		UPDATE phase_attempts SET status = 'waiting'
		WHERE run_id = ? AND phase_id = ? AND attempt = ? AND status = 'running'`, e.RunID, e.PhaseID, e.Attempt)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // not a running attempt (the planner has none)
	}
	_, err = tx.ExecContext(ctx, `
		UPDATE phases SET status = 'waiting', updated_at = ? WHERE run_id = ? AND id = ? AND status = 'running'`,
		formatTime(now), e.RunID, e.PhaseID)
	return err
}

// finishAttempt records how an attempt ended, inserting the row if its
// phase.started was never seen.
func finishAttempt(ctx context.Context, tx *txn, e event.Event, status string, d event.PhaseData) error {
	var reasons any
	if len(d.Reasons) > 0 {
		raw, err := json.Marshal(d.Reasons)
		if err != nil {
			return err
		}
		reasons = string(raw)
	}
	var u event.Usage
	if d.Usage != nil {
		u = *d.Usage
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO phase_attempts (run_id, phase_id, attempt, status, reason, reasons_json, output,
			prompt_tokens, completion_tokens, duration_ms, finished_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id, phase_id, attempt) DO UPDATE SET
			status = excluded.status, reason = excluded.reason, reasons_json = excluded.reasons_json,
			output = excluded.output, prompt_tokens = excluded.prompt_tokens,
			completion_tokens = excluded.completion_tokens, duration_ms = excluded.duration_ms,
			finished_at = excluded.finished_at`,
		e.RunID, e.PhaseID, e.Attempt, status, d.Reason, reasons, d.Output,
		u.PromptTokens, u.CompletionTokens, d.DurationMS, formatTime(e.TS))
	return err
}

// listAttempts returns the run's attempts in plan order, only the running
// ones if runningOnly. Attempts of a phase not in the plan come last.
func listAttempts(ctx context.Context, tx *txn, runID string, runningOnly bool) ([]Attempt, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT a.run_id, a.phase_id, a.attempt, a.status, a.reason, COALESCE(a.reasons_json, ''),
			a.output, a.prompt_tokens, a.completion_tokens, a.duration_ms, a.started_at, a.finished_at
		FROM phase_attempts a
		LEFT JOIN phases p ON p.run_id = a.run_id AND p.id = a.phase_id
		WHERE a.run_id = ? AND (? = 0 OR a.status = 'running')
		ORDER BY p.idx IS NULL, p.idx, a.phase_id, a.attempt`, runID, runningOnly)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var as []Attempt
	for rows.Next() {
		var a Attempt
		var reasons string
		if err := rows.Scan(&a.RunID, &a.PhaseID, &a.Attempt, &a.Status, &a.Reason, &reasons,
			&a.Output, &a.Usage.PromptTokens, &a.Usage.CompletionTokens, &a.DurationMS,
			timeValue{&a.StartedAt}, timeValue{&a.FinishedAt}); err != nil {
			return nil, err
		}
		if reasons != "" {
			if err := json.Unmarshal([]byte(reasons), &a.Reasons); err != nil {
				return nil, fmt.Errorf("attempt %d of phase %s reasons: %w", a.Attempt, a.PhaseID, err)
			}
		}
		as = append(as, a)
	}
	return as, rows.Err()
}

// AttemptState is where a phase attempt stands, rebuilt from its events:
// a waiting attempt goes on from it (docs/PROTOCOL.md#waits), as a resumed
// single run goes on from its conversation.
type AttemptState struct {
	History   []llm.Message // the current iteration's conversation
	Started   []string      // tool calls started and never completed
	Iteration int           // the current Ralph iteration; 0 outside a loop
	Turns     int           // model calls, all iterations
	Usage     event.Usage   // what its model calls and summaries cost
	// Hooked are its hook runs, which it acts on rather than running the
	// hooks again (docs/PROTOCOL.md#hooks).
	Hooked []event.HookCompletedData
}

// AttemptState reads a phase attempt's events (the planner's too) and
// rebuilds where it stands. The messages table holds every phase's
// conversation as one run's, so the attempt's own is folded from its
// events: each iteration starts anew, a compaction replaces its span by
// the summary as the runner did.
func (db *DB) AttemptState(ctx context.Context, runID, phaseID string, attempt int) (AttemptState, error) {
	rows, err := db.ro.QueryContext(ctx, `
		SELECT type, COALESCE(data, '') FROM events
		WHERE run_id = ? AND phase_id = ? AND attempt = ? AND type IN (?, ?, ?, ?, ?, ?) AND subagent IS NULL
		ORDER BY seq`, runID, phaseID, attempt,
		event.IterationStarted, event.MessageCompleted, event.ToolStarted, event.ToolCompleted, event.ContextCompacted, event.HookCompleted)
	if err != nil {
		return AttemptState{}, fmt.Errorf("state of attempt %s/%d of run %s: %w", phaseID, attempt, runID, err)
	}
	defer rows.Close()
	var st AttemptState
	var started []string
	for rows.Next() {
		var typ, data string
		if err := rows.Scan(&typ, &data); err != nil {
			return AttemptState{}, err
		}
		e := event.Event{Type: typ, Data: json.RawMessage(data)}
		switch typ {
		case event.IterationStarted:
			var d event.IterationData
			if e.Decode(&d) == nil {
				st.Iteration, st.History, started = d.Iteration, nil, nil
			}
		case event.MessageCompleted:
			var d event.MessageData
			if e.Decode(&d) != nil || (d.Role != "user" && d.Role != "assistant") {
				continue
			}
			st.History = append(st.History, llm.Message{Role: llm.Role(d.Role), Content: d.Text, ToolCalls: toLLMToolCalls(d.ToolCalls), Images: named(d.Images)})
			if d.Role == "assistant" {
				st.Turns++
				if d.Usage != nil {
					st.Usage = st.Usage.Add(*d.Usage)
				}
			}
		case event.ToolStarted:
			var d event.ToolStartedData
			if e.Decode(&d) == nil && d.CallID != "" && !slices.Contains(started, d.CallID) {
				started = append(started, d.CallID)
			}
		case event.ToolCompleted:
			var d event.ToolCompletedData
			if e.Decode(&d) != nil || d.CallID == "" {
				continue
			}
			started = slices.DeleteFunc(started, func(id string) bool { return id == d.CallID })
			if d.Usage != nil {
				st.Usage = st.Usage.Add(*d.Usage) // a task call's sub-run
			}
			content := d.Output
			if content == "" {
				content = d.Error
			}
			st.History = append(st.History, llm.Message{Role: llm.RoleTool, ToolCallID: d.CallID, Content: content, Images: named(d.Images)})
		case event.ContextCompacted:
			var d event.ContextCompactedData
			if e.Decode(&d) != nil || d.From < 0 || d.Count < 0 || d.From+d.Count > len(st.History) {
				continue
			}
			summary := llm.Message{Role: llm.RoleUser, Content: prompts.SummaryHeading + "\n" + d.Summary}
			st.History = slices.Concat(st.History[:d.From], []llm.Message{summary}, st.History[d.From+d.Count:])
			st.Usage = st.Usage.Add(d.Usage)
		case event.HookCompleted:
			var d event.HookCompletedData
			if e.Decode(&d) == nil && d.Event != "" {
				st.Hooked = append(st.Hooked, d)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return st, err
	}
	rows.Close()
	st.Started = started
	st.History, err = withBytes(ctx, db.ro, st.History)
	return st, err
}

// LastAttempt is the number of the last attempt of a phase (the planner's
// too) that recorded an event; 0 when none did.
func (db *DB) LastAttempt(ctx context.Context, runID, phaseID string) (int, error) {
	var n int
	err := db.ro.QueryRowContext(ctx, `
		SELECT COALESCE(MAX(attempt), 0) FROM events WHERE run_id = ? AND phase_id = ?`, runID, phaseID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("last attempt of %s of run %s: %w", phaseID, runID, err)
	}
	return n, nil
}
