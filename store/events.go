package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"agent/event"
)

// NextSeq returns the seq the run's next event gets: max(seq)+1, or 1.
func (db *DB) NextSeq(ctx context.Context, runID string) (int64, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("next seq of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	next, err := nextSeq(ctx, tx, runID)
	if err != nil {
		return 0, fmt.Errorf("next seq of run %s: %w", runID, err)
	}
	return next, tx.Commit()
}

// AppendEvents persists events, which already carry RunID and Seq, and
// applies their projections (run state: messages, tool_calls, runs; plan
// state: plans, phases, phase_attempts, artifacts, receipts, guardrails,
// learnings, verifications) in the same transaction: the journal and the
// state built from it never disagree, even after a kill -9.
func (db *DB) AppendEvents(ctx context.Context, evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	defer tx.Rollback()
	if err := appendEvents(ctx, tx, evs, db.now()); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	return nil
}

// journalWrite is one write of a journal: to the sequence of a run or a
// session (table "runs" or "sessions", row id), checked against the lease
// of owner (if set) on each event's run or on one phase attempt, and with
// the reservation set to reserve; or, if renumber (Journal.Unshown), with
// the seqs after the last stored one and the reservation left as it is,
// since its deltas are shown to no one before they are stored.
type journalWrite struct {
	table, id string
	owner     string
	attempt   *AttemptKey
	renumber  bool
	reserve   int64
}

// appendJournal persists a journal's events (evs may be empty) and sets
// the seqs reserved for the run or session in the same transaction. A
// session's write also marks the session active. It returns the
// reservation as it left it; with renumber, evs have their final seqs.
func (db *DB) appendJournal(ctx context.Context, w journalWrite, evs []event.Event) (int64, error) {
	fail := func(err error) (int64, error) {
		return 0, fmt.Errorf("append events of %s %s: %w", w.table, w.id, unusable(db.file, err))
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	if err := w.fence(ctx, tx, evs); err != nil {
		return fail(err)
	}
	reserve := w.reserve
	set := `seq_reserved = ?`
	if w.renumber {
		// Writers are serialised: the last stored seq cannot move
		// before this transaction commits.
		var last int64
		if w.table == "sessions" {
			last, err = lastSessionSeq(ctx, tx, w.id)
		} else {
			last, err = nextSeq(ctx, tx, w.id)
			last--
		}
		if err != nil {
			return fail(err)
		}
		for i := range evs {
			evs[i].Seq = last + 1 + int64(i)
		}
		reserve = last + int64(len(evs))
		set = `seq_reserved = ` + tx.greatest(`seq_reserved`, `?`)
	}
	now := db.now()
	if err := appendEvents(ctx, tx, evs, now); err != nil {
		return fail(err)
	}
	query := `UPDATE runs SET ` + set + ` WHERE id = ?`
	args := []any{reserve, w.id}
	if w.table == "sessions" {
		query = `UPDATE sessions SET ` + set + `, updated_at = ? WHERE id = ?`
		args = []any{reserve, formatTime(now), w.id}
	}
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return fail(err)
	}
	if w.table == "sessions" && len(evs) > 0 {
		if err := notify(ctx, tx, ChannelEvents, w.id); err != nil {
			return fail(err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return reserve, nil
}

// fence checks, in tx, that the writer still holds what it writes for.
func (w journalWrite) fence(ctx context.Context, tx *txn, evs []event.Event) error {
	if w.owner == "" {
		return nil
	}
	if w.attempt != nil {
		for _, e := range evs {
			if e.RunID != w.attempt.RunID {
				return fmt.Errorf("attempt %s: event for run %s", w.attempt, e.RunID)
			}
		}
		return fenceAttempt(ctx, tx, *w.attempt, w.owner)
	}
	fenced := map[string]bool{}
	for _, e := range evs {
		if !fenced[e.RunID] {
			if err := fence(ctx, tx, e.RunID, w.owner); err != nil {
				return err
			}
			fenced[e.RunID] = true
		}
	}
	return nil
}

// ListEvents returns up to limit events of a run with seq > afterSeq, in
// seq order; limit <= 0 means all.
func (db *DB) ListEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]event.Event, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	evs, err := listEvents(ctx, tx, runID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", runID, err)
	}
	return evs, tx.Commit()
}

func nextSeq(ctx context.Context, tx *txn, runID string) (int64, error) {
	var next int64
	err := tx.QueryRowContext(ctx,
		`SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?`, runID).Scan(&next)
	return next, err
}

// appendEvents stores evs and projects them; an event the store completes
// (a context.compacted's seqs) is completed in evs too.
func appendEvents(ctx context.Context, tx *txn, evs []event.Event, now time.Time) error {
	for i := range evs {
		e := &evs[i]
		if e.RunID == "" || e.Seq <= 0 || e.Type == "" {
			return fmt.Errorf("event %q seq %d of run %q: run id, seq and type are required", e.Type, e.Seq, e.RunID)
		}
		if e.TS.IsZero() {
			e.TS = now
		}
		if e.Type == event.ContextCompacted && e.Subagent == "" {
			// The record says which messages by seq; the runner knew
			// them only by place. (A live stream has the event as sent.)
			if err := fillCompactedSeqs(ctx, tx, e); err != nil {
				return fmt.Errorf("event %d of run %s: %w", e.Seq, e.RunID, err)
			}
		}
		// The journal names images by hash: their bytes are kept once.
		if err := keepImages(ctx, tx, e, now); err != nil {
			return fmt.Errorf("event %d of run %s: %w", e.Seq, e.RunID, err)
		}
		if err := insertEvent(ctx, tx, *e); err != nil {
			return fmt.Errorf("event %d of run %s: %w", e.Seq, e.RunID, err)
		}
		if e.Subagent != "" {
			continue // a sub-run's, shown here: its own journal projected it
		}
		if err := project(ctx, tx, *e, now); err != nil {
			return fmt.Errorf("project %s %d of run %s: %w", e.Type, e.Seq, e.RunID, err)
		}
	}
	return nil
}

func insertEvent(ctx context.Context, tx *txn, e event.Event) error {
	var data, attempt any
	if len(e.Data) > 0 {
		data = string(e.Data)
	}
	if e.Attempt != 0 {
		attempt = e.Attempt
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO events (run_id, session_id, seq, ts, type, phase_id, attempt, data, subagent)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.RunID, nullString(e.SessionID), e.Seq, formatTime(e.TS), e.Type,
		nullString(e.PhaseID), attempt, data, nullString(e.Subagent))
	return err
}

func listEvents(ctx context.Context, tx *txn, runID string, afterSeq int64, limit int) ([]event.Event, error) {
	if limit <= 0 {
		limit = noLimit
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT `+eventColumns+`
		FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, runID, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// eventColumns are what scanEvents reads of an event.
const eventColumns = `seq, ts, run_id, COALESCE(session_id, ''), COALESCE(phase_id, ''),
	COALESCE(attempt, 0), type, COALESCE(data, ''), COALESCE(subagent, '')`

// scanEvents reads rows of eventColumns and closes them.
func scanEvents(rows *rows) ([]event.Event, error) {
	defer rows.Close()
	var evs []event.Event
	for rows.Next() {
		e := event.Event{V: event.Version}
		var data string
		if err := rows.Scan(&e.Seq, timeValue{&e.TS}, &e.RunID, &e.SessionID, &e.PhaseID,
			&e.Attempt, &e.Type, &data, &e.Subagent); err != nil {
			return nil, err
		}
		if data != "" {
			e.Data = json.RawMessage(data)
		}
		evs = append(evs, e)
	}
	return evs, rows.Err()
}

// project applies one event to the tables built from the journal. Data
// that does not decode is skipped rather than failing: the event itself is
// already stored, and losing it would be worse than a missing projection.
func project(ctx context.Context, tx *txn, e event.Event, now time.Time) error {
	switch e.Type {
	case event.RunStarted:
		err := setRunStatus(ctx, tx, e.RunID, event.StatusRunning, now)
		if errors.Is(err, ErrNotFound) {
			return nil // the foreign key on events already proved the run exists
		}
		return err

	case event.MessageCompleted:
		var d event.MessageData
		if e.Decode(&d) != nil || (d.Role != "user" && d.Role != "assistant") {
			return nil
		}
		if err := insertMessage(ctx, tx, Message{
			RunID:     e.RunID,
			Seq:       e.Seq,
			Iteration: d.Iteration,
			Role:      d.Role,
			Content:   d.Text,
			ToolCalls: d.ToolCalls,
			Images:    d.Images,
			CreatedAt: e.TS,
		}); err != nil || d.Role != "assistant" {
			return err
		}
		// Running totals, so a run resumed after a crash reports the
		// turns and tokens it already spent.
		var u event.Usage
		if d.Usage != nil {
			u = *d.Usage
		}
		_, err := tx.ExecContext(ctx, `
			UPDATE runs SET turns = turns + 1, prompt_tokens = prompt_tokens + ?,
				completion_tokens = completion_tokens + ?, updated_at = ?
			WHERE id = ?`, u.PromptTokens, u.CompletionTokens, formatTime(now), e.RunID)
		return err

	case event.ToolStarted:
		var d event.ToolStartedData
		if e.Decode(&d) != nil || d.CallID == "" {
			return nil
		}
		return startToolCall(ctx, tx, e.RunID, d, e.TS)

	case event.ContextCompacted:
		var d event.ContextCompactedData
		if e.Decode(&d) != nil {
			return nil
		}
		return compactMessages(ctx, tx, e, d, now)

	case event.ToolCompleted:
		var d event.ToolCompletedData
		if e.Decode(&d) != nil || d.CallID == "" {
			return nil
		}
		if err := completeToolCall(ctx, tx, e.RunID, d, e.TS); err != nil {
			return err
		}
		if u := d.Usage; u != nil {
			// A task call's sub-run: the run's usage counts it.
			if _, err := tx.ExecContext(ctx, `
				UPDATE runs SET prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, updated_at = ?
				WHERE id = ?`, u.PromptTokens, u.CompletionTokens, formatTime(now), e.RunID); err != nil {
				return err
			}
		}
		content := d.Output
		if content == "" {
			content = d.Error
		}
		return insertToolMessage(ctx, tx, e.RunID, e.Seq, d.CallID, content, d.Images, e.TS)

	case event.IterationStarted:
		var d event.IterationData
		if e.Decode(&d) != nil {
			return nil
		}
		_, err := tx.ExecContext(ctx, `
			UPDATE runs SET iteration_count = ?, max_iterations = ?, completion_promise = ?, updated_at = ?
			WHERE id = ?`, d.Iteration, d.MaxIterations, d.Promise, formatTime(now), e.RunID)
		return err

	case event.RunCompleted, event.RunFailed, event.RunCancelled, event.RunInterrupted:
		// The status comes from the type, so even unreadable data still
		// marks the run finished; the other fields stay zero then.
		var d event.RunFinishedData
		if e.Decode(&d) != nil {
			d = event.RunFinishedData{}
		}
		_, err := tx.ExecContext(ctx, `
			UPDATE runs SET status = ?, result = ?, reason = ?, detail = ?, exit_code = ?, turns = ?,
				prompt_tokens = ?, completion_tokens = ?, finished_at = ?, updated_at = ?, resume_after = ?
			WHERE id = ?`,
			strings.TrimPrefix(e.Type, "run."), d.Result, d.Reason, d.Detail, d.ExitCode, d.Turns,
			d.Usage.PromptTokens, d.Usage.CompletionTokens, formatTime(e.TS), formatTime(now), nullString(d.ResumeAfter), e.RunID)
		return err

	case event.RunWaiting:
		var d event.RunWaitingData
		if e.Decode(&d) != nil || d.WaitID == "" {
			return nil
		}
		return recordWait(ctx, tx, e, d, now)

	case event.WaitResolved:
		var d event.WaitResolvedData
		if e.Decode(&d) != nil || d.WaitID == "" {
			return nil
		}
		return journalResolution(ctx, tx, e, d, now)

	case event.PlanCreated:
		var d event.PlanData
		if e.Decode(&d) != nil {
			return nil
		}
		return createPlan(ctx, tx, e.RunID, d.Plan, e.TS, now)

	case event.PhaseStarted, event.PhaseCompleted, event.PhaseFailed:
		// The envelope names the phase and attempt; without them there is
		// no row to update.
		var d event.PhaseData
		if e.PhaseID == "" || e.Attempt <= 0 || (len(e.Data) > 0 && e.Decode(&d) != nil) {
			return nil
		}
		switch e.Type {
		case event.PhaseStarted:
			return startPhase(ctx, tx, e, now)
		case event.PhaseCompleted:
			return completePhase(ctx, tx, e, d, now)
		}
		return failPhase(ctx, tx, e, d, now)

	case event.ArtifactCreated:
		var d event.ArtifactData
		if e.Decode(&d) != nil || d.Path == "" {
			return nil
		}
		return insertArtifact(ctx, tx, e, d)

	case event.LearningRecorded:
		var d event.LearningData
		if e.Decode(&d) != nil {
			return nil
		}
		return insertLearning(ctx, tx, e, d)

	case event.ApproachFailed:
		var d event.ApproachData
		if e.Decode(&d) != nil {
			return nil
		}
		return insertGuardrail(ctx, tx, e, GuardrailFailedApproach, approachText(d))

	case event.VerificationCompleted:
		var d event.VerificationData
		if e.Decode(&d) != nil {
			return nil
		}
		return insertVerification(ctx, tx, e, d)

	case event.ReceiptRecorded:
		var d event.ReceiptData
		if e.Decode(&d) != nil || d.Key == "" {
			return nil
		}
		return recordReceipt(ctx, tx, e, d, now)

	case event.CheckpointCreated:
		return insertCheckpoint(ctx, tx, e)

	case event.EffectFailed:
		var d event.EffectFailedData
		if e.Decode(&d) != nil || d.Key == "" {
			return nil
		}
		return forgetIntent(ctx, tx, d.Key)

	case event.EffectUnknown:
		// The effect went ahead and may have happened: its intent is
		// unknown from now on, so no retry repeats it and no later receipt
		// makes it done; only the user can have it sent again
		// (--resend-unknown). An effect of no intent on record changes
		// nothing.
		var d event.EffectUnknownData
		if e.Decode(&d) != nil || d.Key == "" {
			return nil
		}
		if err := markReceiptUnknown(ctx, tx, d.Key, now); !errors.Is(err, ErrNotFound) {
			return err
		}
		return nil
	}
	return nil
}
