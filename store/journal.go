package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"agent/event"
)

// Journal is the event sink of one run. It assigns seqs in emit order and
// persists each event before Append returns, except message.delta: deltas
// wait in memory and are written in the same transaction as the next
// other event, so a run pays one fsync per meaningful event, not per
// token. A crash loses at most the deltas of the reply in flight, which
// message.completed would have repeated anyway.
//
// A session journal (DB.SessionJournal) numbers events per session
// instead: the runs of a session share it, and so its one sequence.
type Journal struct {
	db        *DB
	runID     string // "" in a session journal: each event names its run
	sessionID string
	// session marks a session journal: seqs follow the session's last
	// event, and every write also touches the session.
	session bool

	// lazy are the event types, besides message.delta, that wait for the
	// next other event instead of being written at once (SetLazy).
	lazy map[string]bool

	mu      sync.Mutex
	next    int64           // seq of the next event
	pending []event.Event   // deltas not yet written
	members map[string]bool // session journal: runs known to be in the session
}

// Journal returns the journal of a run, continuing after its last event.
func (db *DB) Journal(ctx context.Context, runID, sessionID string) (*Journal, error) {
	next, err := db.NextSeq(ctx, runID)
	if err != nil {
		return nil, err
	}
	return &Journal{db: db, runID: runID, sessionID: sessionID, next: next}, nil
}

// SessionJournal returns the journal shared by the runs of a session,
// continuing after the session's last event. Keep one per session: two
// journals of one session would hand out the same seqs.
func (db *DB) SessionJournal(ctx context.Context, sessionID string) (*Journal, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("journal of session %s: %w", sessionID, err)
	}
	defer tx.Rollback()
	if err := sessionExists(ctx, tx, sessionID); err != nil {
		return nil, fmt.Errorf("journal of session %s: %w", sessionID, err)
	}
	last, err := lastSessionSeq(ctx, tx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("journal of session %s: %w", sessionID, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("journal of session %s: %w", sessionID, err)
	}
	return &Journal{
		db: db, sessionID: sessionID, session: true, next: last + 1,
		members: make(map[string]bool),
	}, nil
}

// Append fills in e's run and session (if empty), version and time (if
// zero), assigns the next seq and persists it, deltas aside. It returns the
// event as stored. After an error the deltas stay buffered for the next
// write, and the failed event's seq is not reused.
//
// In a session journal e must name its run, a run of this session.
func (j *Journal) Append(ctx context.Context, e event.Event) (event.Event, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.session {
		if err := j.checkMember(ctx, e); err != nil {
			return e, err
		}
		e.SessionID = j.sessionID
	} else {
		if e.RunID == "" {
			e.RunID = j.runID
		}
		if e.RunID != j.runID {
			return e, fmt.Errorf("journal of run %s: event for run %s", j.runID, e.RunID)
		}
		if e.SessionID == "" {
			e.SessionID = j.sessionID
		}
	}
	if e.V == 0 {
		e.V = event.Version
	}
	if e.TS.IsZero() {
		e.TS = j.db.now()
	}
	// The store keeps microseconds; return exactly what a replay will see.
	e.TS = e.TS.UTC().Truncate(time.Microsecond)
	e.Seq = j.next
	j.next++

	if e.Type == event.MessageDelta || j.lazy[e.Type] {
		j.pending = append(j.pending, e)
		return e, nil
	}
	batch := append(j.pending[:len(j.pending):len(j.pending)], e)
	if err := j.write(ctx, batch); err != nil {
		return e, err
	}
	j.pending = j.pending[:0]
	return e, nil
}

// SetLazy lets events of these types wait, like deltas, for the next
// other event's transaction. For a run driven in this process, whole
// messages and artifacts can: the tool call that follows a message, or
// the run's end, is written before anything depends on them, and a crash
// in between loses at most the model response in flight (DESIGN.md §7),
// which resume asks for again. Call it before the first Append.
func (j *Journal) SetLazy(types ...string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lazy = make(map[string]bool, len(types))
	for _, t := range types {
		j.lazy[t] = true
	}
}

// Flush writes the buffered events now.
func (j *Journal) Flush(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.pending) == 0 {
		return nil
	}
	if err := j.write(ctx, j.pending); err != nil {
		return err
	}
	j.pending = j.pending[:0]
	return nil
}

func (j *Journal) write(ctx context.Context, evs []event.Event) error {
	if j.session {
		return j.db.appendSessionEvents(ctx, j.sessionID, evs)
	}
	return j.db.AppendEvents(ctx, evs)
}

// checkMember refuses, before a seq is spent on it, an event of another
// session or of a run that is not in this one. A run's membership is
// read once: a run never changes session.
func (j *Journal) checkMember(ctx context.Context, e event.Event) error {
	if e.RunID == "" {
		return fmt.Errorf("journal of session %s: %s event names no run", j.sessionID, e.Type)
	}
	if e.SessionID != "" && e.SessionID != j.sessionID {
		return fmt.Errorf("journal of session %s: event for session %s", j.sessionID, e.SessionID)
	}
	if j.members[e.RunID] {
		return nil
	}
	var sessionID string
	err := j.db.ro.QueryRowContext(ctx,
		`SELECT COALESCE(session_id, '') FROM runs WHERE id = ?`, e.RunID).Scan(&sessionID)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("journal of session %s: run %s: %w", j.sessionID, e.RunID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("journal of session %s: %w", j.sessionID, err)
	}
	if sessionID != j.sessionID {
		return fmt.Errorf("journal of session %s: run %s is not in it", j.sessionID, e.RunID)
	}
	j.members[e.RunID] = true
	return nil
}
