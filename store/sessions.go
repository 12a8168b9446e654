package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"agent/event"
	"agent/llm"
)

// Session is one row of sessions: a conversation, in a gateway or in
// agent chat, that several runs continue. Its events share one sequence
// (SessionJournal).
type Session struct {
	ID            string
	Title         string
	ParentID      string // the session it was forked from, if any
	ForkedFromSeq int64  // the parent's seq it was forked at; 0 means all of it
	JobID         string // the scheduled job whose tick created it, if any
	// Local is a session agent chat keeps without a gateway: any process
	// on the store may drive and resume its runs. A gateway's session has
	// its sequence kept by the gateways (supervisor.Reopen).
	Local     bool
	CreatedAt time.Time
	UpdatedAt time.Time // creation, then the last event written through a session journal

	LastSeq int64 // max event seq in the session, 0 if none
	Runs    int   // number of runs
}

// CreateSession inserts s, whose ID the caller chooses, and sets its times.
func (db *DB) CreateSession(ctx context.Context, s *Session) error {
	if s.ID == "" {
		return errors.New("create session: empty id")
	}
	now := db.now()
	s.CreatedAt, s.UpdatedAt = now, now
	s.LastSeq, s.Runs = 0, 0

	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create session %s: %w", s.ID, err)
	}
	defer tx.Rollback()
	if err := insertSession(ctx, tx, s); err != nil {
		return fmt.Errorf("create session %s: %w", s.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("create session %s: %w", s.ID, err)
	}
	return nil
}

// GetSession returns the session with this id, or the one session whose
// id starts with it, like GetRun.
func (db *DB) GetSession(ctx context.Context, id string) (*Session, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", id, err)
	}
	defer tx.Rollback()
	s, err := getSession(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	return s, tx.Commit()
}

// ListSessions returns up to limit sessions, most recently updated first;
// limit <= 0 means all. Sessions a job's tick created are left out unless
// withJobs: a job firing every minute would bury the rest.
func (db *DB) ListSessions(ctx context.Context, limit int, withJobs bool) ([]Session, error) {
	if limit <= 0 {
		limit = noLimit
	}
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx,
		`SELECT `+sessionColumns+` FROM sessions WHERE (? = 1 OR job_id IS NULL)
		ORDER BY updated_at DESC, id DESC LIMIT ?`, withJobs, limit)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var ss []Session
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		ss = append(ss, *s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return ss, tx.Commit()
}

// LastLocalSession returns the local session (Session.Local) with the
// latest activity: what agent chat --continue goes on with. None is
// ErrNotFound.
func (db *DB) LastLocalSession(ctx context.Context) (*Session, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("last local session: %w", err)
	}
	defer tx.Rollback()
	s, err := scanSession(tx.QueryRowContext(ctx,
		`SELECT `+sessionColumns+` FROM sessions WHERE local != 0 ORDER BY updated_at DESC, id DESC LIMIT 1`))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("no local session yet: %w", ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("last local session: %w", err)
	}
	return s, tx.Commit()
}

// ListSessionEvents returns up to limit events of a session with
// seq > afterSeq, in seq order, whichever runs wrote them; limit <= 0
// means all. It is how a client catches up after a reconnect.
func (db *DB) ListSessionEvents(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]event.Event, error) {
	if limit <= 0 {
		limit = noLimit
	}
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list events of session %s: %w", sessionID, err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `
		SELECT `+eventColumns+`
		FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`, sessionID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("list events of session %s: %w", sessionID, err)
	}
	evs, err := scanEvents(rows)
	if err == nil {
		// Deltas prune deleted are sent as placeholders: no gap.
		evs, err = withPrunedDeltas(ctx, tx, sessionID, afterSeq, limit, evs)
	}
	if err != nil {
		return nil, fmt.Errorf("list events of session %s: %w", sessionID, err)
	}
	return evs, tx.Commit()
}

// SessionPrior returns the conversation a new run of the session starts
// from: the current-iteration conversation (as Conversation returns it)
// of each earlier run, oldest first, made acceptable to providers by
// sanitizeConversation. Earlier means created before beforeRunID, or
// every run when beforeRunID is "". Harness runs are left out: their
// messages are those of all their phases' children, not one conversation.
func (db *DB) SessionPrior(ctx context.Context, sessionID, beforeRunID string) ([]llm.Message, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("prior of session %s: %w", sessionID, err)
	}
	defer tx.Rollback()
	conv, err := sessionPrior(ctx, tx, sessionID, beforeRunID)
	if err != nil {
		return nil, fmt.Errorf("prior of session %s: %w", sessionID, err)
	}
	return conv, tx.Commit()
}

func sessionPrior(ctx context.Context, tx *txn, sessionID, beforeRunID string) ([]llm.Message, error) {
	if err := sessionExists(ctx, tx, sessionID); err != nil {
		return nil, err
	}
	runs, err := listSessionRuns(ctx, tx, sessionID)
	if err != nil {
		return nil, err
	}
	if beforeRunID != "" {
		i := indexOfRun(runs, beforeRunID)
		if i < 0 {
			return nil, fmt.Errorf("run %s in session %s: %w", beforeRunID, sessionID, ErrNotFound)
		}
		// A run that compacted the session's earlier runs into its own
		// conversation needs them no more (README.md#context-and-spend).
		if covers, err := coversPrior(ctx, tx, beforeRunID, 0); err != nil || covers {
			return nil, err
		}
		runs = runs[:i]
	}
	var conv []llm.Message
	for _, r := range runs {
		if r.Kind != KindRun {
			continue
		}
		c, err := conversation(ctx, tx, r.ID)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", r.ID, err)
		}
		covers, err := coversPrior(ctx, tx, r.ID, 0)
		if err != nil {
			return nil, err
		}
		if covers { // its summary stands for everything before it
			conv = nil
		}
		conv = append(conv, c...)
	}
	return sanitizeConversation(conv), nil
}

func indexOfRun(runs []Run, id string) int {
	for i, r := range runs {
		if r.ID == id {
			return i
		}
	}
	return -1
}

// sanitizeConversation drops what providers reject: an assistant tool
// call with no result among the tool messages right after it (a run
// interrupted mid-call, or a round still in flight), and a tool message
// answering no such call. An assistant message left with neither text nor
// calls goes too. msgs is not modified.
func sanitizeConversation(msgs []llm.Message) []llm.Message {
	out := make([]llm.Message, 0, len(msgs))
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == llm.RoleTool {
			continue // reached only when no assistant call precedes it
		}
		if m.Role != llm.RoleAssistant || len(m.ToolCalls) == 0 {
			out = append(out, m)
			continue
		}
		// The round's results are the tool messages that follow.
		end := i + 1
		for end < len(msgs) && msgs[end].Role == llm.RoleTool {
			end++
		}
		results := msgs[i+1 : end]
		var calls []llm.ToolCall
		for _, c := range m.ToolCalls {
			if answers(results, c.ID) {
				calls = append(calls, c)
			}
		}
		m.ToolCalls = calls
		if m.Content != "" || len(calls) > 0 {
			out = append(out, m)
		}
		answered := make(map[string]bool, len(calls))
		for _, r := range results {
			if !answered[r.ToolCallID] && hasCall(calls, r.ToolCallID) {
				answered[r.ToolCallID] = true
				out = append(out, r)
			}
		}
		i = end - 1
	}
	return out
}

func answers(results []llm.Message, callID string) bool {
	for _, r := range results {
		if r.ToolCallID == callID {
			return true
		}
	}
	return false
}

func hasCall(calls []llm.ToolCall, id string) bool {
	for _, c := range calls {
		if c.ID == id {
			return true
		}
	}
	return false
}

func insertSession(ctx context.Context, tx *txn, s *Session) error {
	// forked_from_seq is NULL for a session that was not forked.
	var forkedFrom any
	if s.ParentID != "" {
		forkedFrom = s.ForkedFromSeq
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO sessions (id, title, parent_id, forked_from_seq, job_id, local, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		s.ID, s.Title, nullString(s.ParentID), forkedFrom, nullString(s.JobID), s.Local, formatTime(s.CreatedAt), formatTime(s.UpdatedAt))
	return err
}

// sessionColumns counts with subqueries that the indexes on
// events (session_id, seq) and runs (session_id, …) answer directly.
const sessionColumns = `
	id, title, COALESCE(parent_id, ''), COALESCE(forked_from_seq, 0), COALESCE(job_id, ''), local != 0, created_at, updated_at,
	(SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = sessions.id),
	(SELECT COUNT(*) FROM runs WHERE session_id = sessions.id)`

func scanSession(row scanner) (*Session, error) {
	var s Session
	err := row.Scan(&s.ID, &s.Title, &s.ParentID, &s.ForkedFromSeq, &s.JobID, &s.Local,
		timeValue{&s.CreatedAt}, timeValue{&s.UpdatedAt}, &s.LastSeq, &s.Runs)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// getSession resolves id exactly, then as a prefix.
func getSession(ctx context.Context, tx *txn, id string) (*Session, error) {
	s, err := scanSession(tx.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, id))
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get session %s: %w", id, err)
	}
	full, err := prefixMatch(ctx, tx, "session", "sessions", id)
	if err != nil {
		return nil, err
	}
	s, err = scanSession(tx.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, full))
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", id, err)
	}
	return s, nil
}

// sessionExists checks an exact id.
func sessionExists(ctx context.Context, tx *txn, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	return err
}

func lastSessionSeq(ctx context.Context, tx *txn, sessionID string) (int64, error) {
	var last int64
	err := tx.QueryRowContext(ctx,
		`SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?`, sessionID).Scan(&last)
	return last, err
}

// TitleSession gives a session that has no title one, and leaves a titled
// one as it is: a session made without a title takes its first run's.
func (db *DB) TitleSession(ctx context.Context, id, title string) error {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("title session %s: %w", id, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE sessions SET title = ? WHERE id = ? AND title = ''`, title, id); err != nil {
		return fmt.Errorf("title session %s: %w", id, err)
	}
	return tx.Commit()
}

// SessionInUseError is a session DeleteSession keeps: one of its runs is
// running or waiting, or a scheduled job starts its runs there.
type SessionInUseError struct {
	SessionID string
	RunID     string // the run in progress, and its status
	Status    string
	Job       string // the name of the job whose runs go there
}

func (e *SessionInUseError) Error() string {
	if e.Job != "" {
		return fmt.Sprintf("session %s is kept: scheduled job %s starts its runs there; give the job another session or delete it first", e.SessionID, e.Job)
	}
	next := "cancel it, or let it end"
	if e.Status == event.StatusWaiting {
		next = "answer or cancel it"
	}
	return fmt.Sprintf("session %s is kept: its run %s is %s; %s, then delete the session", e.SessionID, e.RunID, e.Status, next)
}

// DeleteSession deletes a session (id may be a unique prefix) with its
// runs and everything they recorded, and returns it as it was. A session
// with a run running or waiting, or where a job starts its runs, is a
// *SessionInUseError. Its forks stay whole, since each holds its own copy
// of the conversation; they no longer name it as their parent.
func (db *DB) DeleteSession(ctx context.Context, id string) (*Session, error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("delete session %s: %w", id, err)
	}
	defer tx.Rollback()
	s, err := getSession(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	busy := &SessionInUseError{SessionID: s.ID}
	err = tx.QueryRowContext(ctx, `SELECT id, status FROM runs WHERE session_id = ? AND status IN (?, ?) ORDER BY created_at LIMIT 1`,
		s.ID, event.StatusRunning, event.StatusWaiting).Scan(&busy.RunID, &busy.Status)
	if err == nil {
		return nil, busy
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("delete session %s: %w", s.ID, err)
	}
	err = tx.QueryRowContext(ctx, `SELECT name FROM scheduled_jobs WHERE target_session_id = ? ORDER BY name LIMIT 1`, s.ID).Scan(&busy.Job)
	if err == nil {
		return nil, busy
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("delete session %s: %w", s.ID, err)
	}
	for _, q := range []string{
		`UPDATE sessions SET parent_id = NULL, forked_from_seq = NULL WHERE parent_id = ?`,
		`DELETE FROM runs WHERE session_id = ?`, // the rest of what they recorded goes with them (ON DELETE CASCADE)
		`DELETE FROM sessions WHERE id = ?`,
	} {
		if _, err := tx.ExecContext(ctx, q, s.ID); err != nil {
			return nil, fmt.Errorf("delete session %s: %w", s.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("delete session %s: %w", s.ID, err)
	}
	return s, nil
}
