package store

import (
	"context"
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
type Journal struct {
	db        *DB
	runID     string
	sessionID string

	mu      sync.Mutex
	next    int64         // seq of the next event
	pending []event.Event // deltas not yet written
}

// Journal returns the journal of a run, continuing after its last event.
func (db *DB) Journal(ctx context.Context, runID, sessionID string) (*Journal, error) {
	next, err := db.NextSeq(ctx, runID)
	if err != nil {
		return nil, err
	}
	return &Journal{db: db, runID: runID, sessionID: sessionID, next: next}, nil
}

// Append fills in e's run and session (if empty), version and time (if
// zero), assigns the next seq and persists it, deltas aside. It returns the
// event as stored. After an error the deltas stay buffered for the next
// write, and the failed event's seq is not reused.
func (j *Journal) Append(ctx context.Context, e event.Event) (event.Event, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e.RunID == "" {
		e.RunID = j.runID
	}
	if e.RunID != j.runID {
		return e, fmt.Errorf("journal of run %s: event for run %s", j.runID, e.RunID)
	}
	if e.SessionID == "" {
		e.SessionID = j.sessionID
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

	if e.Type == event.MessageDelta {
		j.pending = append(j.pending, e)
		return e, nil
	}
	batch := append(j.pending[:len(j.pending):len(j.pending)], e)
	if err := j.db.AppendEvents(ctx, batch); err != nil {
		return e, err
	}
	j.pending = j.pending[:0]
	return e, nil
}

// Flush writes the buffered deltas now.
func (j *Journal) Flush(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.pending) == 0 {
		return nil
	}
	if err := j.db.AppendEvents(ctx, j.pending); err != nil {
		return err
	}
	j.pending = j.pending[:0]
	return nil
}
