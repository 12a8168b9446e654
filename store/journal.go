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
// persists each event before Append returns, except message.delta:
// deltas are streamed text, shown as they come and written with the next
// other event, so a run pays one fsync per meaningful event, not per
// token. A crash loses at most the deltas of the reply in flight, which
// message.completed would have repeated anyway; their seqs are never
// given to another event, because the seqs deltas may take are reserved
// in the store beforehand (seq_reserved).
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

	// owner, if set, must hold the lease of every run the journal writes
	// for (Fence), or, with attempt, that phase attempt (FenceAttempt).
	owner   string
	attempt *AttemptKey
	// unshown: seqs are taken in the write's transaction, after the last
	// stored one, so several writers may share the journal's sequence
	// (Unshown).
	unshown bool

	mu       sync.Mutex
	next     int64           // seq of the next event
	stored   int64           // the highest seq stored when the journal opened
	reserved int64           // the highest seq reserved in the store
	pending  []event.Event   // deltas not yet written
	members  map[string]bool // session journal: runs known to be in the session
	// flushEvery, if set, bounds how long a delta waits for the next
	// write (Unshown).
	flushEvery time.Duration
}

// reserveAhead is how many seqs each write reserves for the deltas that
// may follow it before the next write.
const reserveAhead = 1024

// Journal returns the journal of a run, continuing above every seq it
// ever handed out.
func (db *DB) Journal(ctx context.Context, runID, sessionID string) (*Journal, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("journal of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	next, err := nextSeq(ctx, tx, runID)
	if err != nil {
		return nil, fmt.Errorf("journal of run %s: %w", runID, err)
	}
	var reserved int64
	err = tx.QueryRowContext(ctx, `SELECT seq_reserved FROM runs WHERE id = ?`, runID).Scan(&reserved)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("journal of run %s: %w", runID, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("journal of run %s: %w", runID, err)
	}
	return &Journal{db: db, runID: runID, sessionID: sessionID, next: max(next, reserved+1), stored: next - 1, reserved: reserved}, nil
}

// SessionJournal returns the journal shared by the runs of a session,
// continuing above every seq it ever handed out. Keep one per session:
// two journals of one session would hand out the same seqs.
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
	var reserved int64
	if err := tx.QueryRowContext(ctx, `SELECT seq_reserved FROM sessions WHERE id = ?`, sessionID).Scan(&reserved); err != nil {
		return nil, fmt.Errorf("journal of session %s: %w", sessionID, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("journal of session %s: %w", sessionID, err)
	}
	return &Journal{
		db: db, sessionID: sessionID, session: true, next: max(last, reserved) + 1, stored: last, reserved: reserved,
		members: make(map[string]bool),
	}, nil
}

// Fence makes every later write check, in its transaction, that owner
// holds the lease of the runs it writes for, and fail with ErrLeaseLost
// otherwise: a process that lost a run writes nothing more for it.
func (j *Journal) Fence(owner string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.owner = owner
}

// FenceAttempt makes every later write check, in its transaction, that
// owner holds the phase attempt k in the attempt queue, and fail with
// ErrLeaseLost otherwise: a worker running an attempt its harness took
// back writes nothing more for it. Every event must be k's run's.
func (j *Journal) FenceAttempt(owner string, k AttemptKey) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.owner, j.attempt = owner, &k
}

// Unshown declares that every writer of this journal's runs shows its
// events to no one before they are stored: `agent worker`, whose events
// gateways read from the store. Two rules follow. The seqs a dead holder
// reserved for deltas it never stored were seen by no one, so the journal
// takes them again and the stream stays gapless (the dead holder cannot
// write them: it lost the lease, and the journal is fenced). And since the
// store is the only way out, a delta waits at most flush for the next
// write, so text still streams to the gateways' clients. And since no
// seq is shown before it is stored, a seq is final only when stored: each
// write takes the seqs after the last stored one, in its transaction, so
// several writers may share one run's or session's sequence (a harness and
// the workers running its phase attempts); an event's seq as Append
// returns it is final only if it was written. Call it before the first
// Append.
func (j *Journal) Unshown(flush time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.next = j.stored + 1
	j.flushEvery = flush
	j.unshown = true
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

	// A delta waits for the next write, as long as its seq is reserved;
	// past the reservation it is written now, which reserves more.
	if e.Type == event.MessageDelta && e.Seq <= j.reserved && !j.flushDue(e) {
		j.pending = append(j.pending, e)
		return e, nil
	}
	batch := append(j.pending[:len(j.pending):len(j.pending)], e)
	if err := j.write(ctx, batch); err != nil {
		return e, err
	}
	j.pending = j.pending[:0]
	return batch[len(batch)-1], nil // as stored: the store may complete it
}

// flushDue reports whether the buffered deltas have waited their flush
// interval by e's time (Unshown journals only).
func (j *Journal) flushDue(e event.Event) bool {
	return j.flushEvery > 0 && len(j.pending) > 0 && e.TS.Sub(j.pending[0].TS) >= j.flushEvery
}

// Flush writes the buffered deltas now.
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

// Close writes the buffered deltas and gives back the seqs reserved but
// not used, so that the next journal of the run or session continues with
// no gap. A process that crashes never closes its journal: the next one
// continues above the reservation instead.
func (j *Journal) Close(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.persist(ctx, j.pending, j.next-1, true); err != nil {
		return err
	}
	j.pending = j.pending[:0]
	return nil
}

// write persists evs and, in the same transaction, reserves the seqs the
// deltas after them may take.
func (j *Journal) write(ctx context.Context, evs []event.Event) error {
	return j.persist(ctx, evs, evs[len(evs)-1].Seq+reserveAhead, false)
}

// persist writes evs and sets the reservation to reserve: raising it only,
// unless release. An unshown journal's evs get their final seqs here.
func (j *Journal) persist(ctx context.Context, evs []event.Event, reserve int64, release bool) error {
	w := journalWrite{table: "runs", id: j.runID, owner: j.owner, attempt: j.attempt, renumber: j.unshown, reserve: reserve, release: release}
	if j.session {
		w.table, w.id = "sessions", j.sessionID
	}
	reserved, err := j.db.appendJournal(ctx, w, evs)
	if err != nil {
		return err
	}
	if release {
		j.reserved = reserved
	} else {
		j.reserved = max(j.reserved, reserved)
	}
	if j.unshown && len(evs) > 0 {
		j.next = evs[len(evs)-1].Seq + 1
	}
	return nil
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
