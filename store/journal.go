package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"agent/event"
)

// Journal is the event sink of one run. It assigns seqs in emit order and
// persists each event before Append returns, except message.delta:
// deltas are streamed text, shown as they come and written in batches,
// so a run pays one write per meaningful event and one per reserveAhead
// deltas, not one per token. The seqs deltas may take are reserved in the
// store (seq_reserved) by the write of the first delta past the last
// reservation; every other write reserves only the seqs handed out.
//
// Seqs as stored have no gap, whatever crashed: a crash loses at most the
// deltas of the reply in flight (message.completed would have repeated
// them), and the next journal of the run stores a lost delta at each seq
// reserved but not stored, since those deltas may have been shown; an
// event whose write failed gives its seq to the next event, since it was
// shown to no one.
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

// reserveAhead is how many seqs a write of a delta reserves for the
// deltas that may follow it before the next write: at most that many
// lost deltas are stored after a crash mid-reply.
const reserveAhead = 64

// lostDelta is the data stored at a seq a journal reserved for a delta
// but never stored: its process died, perhaps after showing the delta.
var lostDelta = json.RawMessage(`{"text":"","lost":true}`)

// Journal returns the journal of a run, continuing after its last seq.
func (db *DB) Journal(ctx context.Context, runID, sessionID string) (*Journal, error) {
	last, err := db.fillReserved(ctx, sequence{table: "runs", id: runID, runID: runID, sessionID: sessionID})
	if err != nil {
		return nil, fmt.Errorf("journal of run %s: %w", runID, err)
	}
	return &Journal{db: db, runID: runID, sessionID: sessionID, next: last + 1, stored: last, reserved: last}, nil
}

// SessionJournal returns the journal shared by the runs of a session,
// continuing after its last seq. Keep one per session: two journals of
// one session would hand out the same seqs.
func (db *DB) SessionJournal(ctx context.Context, sessionID string) (*Journal, error) {
	last, err := db.fillReserved(ctx, sequence{table: "sessions", id: sessionID, sessionID: sessionID})
	if err != nil {
		return nil, fmt.Errorf("journal of session %s: %w", sessionID, err)
	}
	return &Journal{
		db: db, sessionID: sessionID, session: true, next: last + 1, stored: last, reserved: last,
		members: make(map[string]bool),
	}, nil
}

// sequence is the seqs of a run (table "runs") or a session ("sessions"),
// row id; runID and sessionID are what its events carry ("" for a
// session's runID: each event names its own).
type sequence struct {
	table, id        string
	runID, sessionID string
}

// read returns the last seq stored and the highest reserved.
func (s sequence) read(ctx context.Context, tx *txn) (last, reserved int64, err error) {
	if s.table == "sessions" {
		if err := sessionExists(ctx, tx, s.id); err != nil {
			return 0, 0, err
		}
		if last, err = lastSessionSeq(ctx, tx, s.id); err != nil {
			return 0, 0, err
		}
		err = tx.QueryRowContext(ctx, `SELECT seq_reserved FROM sessions WHERE id = ?`, s.id).Scan(&reserved)
		return last, reserved, err
	}
	next, err := nextSeq(ctx, tx, s.id)
	if err != nil {
		return 0, 0, err
	}
	err = tx.QueryRowContext(ctx, `SELECT seq_reserved FROM runs WHERE id = ?`, s.id).Scan(&reserved)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil // not created yet: nothing reserved
	}
	return next - 1, reserved, err
}

// fillReserved stores a lost delta at each seq of the sequence that a
// journal reserved but never stored, and returns the last seq stored: the
// stored seqs have no gap for a reader to wait at, and none that may have
// been shown is given to another event. Only a journal that died leaves
// such seqs (a live one holds the run's lease, or is its session's one
// journal in its process), so they are filled before a new one continues.
// A session's lost deltas are its last event's run's: the run streaming.
func (db *DB) fillReserved(ctx context.Context, s sequence) (int64, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	last, reserved, err := s.read(ctx, tx)
	tx.Rollback()
	if err != nil || reserved <= last {
		return last, err
	}
	wtx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer wtx.Rollback()
	if last, reserved, err = s.read(ctx, wtx); err != nil || reserved <= last {
		return last, err
	}
	runID := s.runID
	if s.table == "sessions" && last > 0 {
		err := wtx.QueryRowContext(ctx, `SELECT run_id FROM events WHERE session_id = ? AND seq = ?`, s.id, last).Scan(&runID)
		if err != nil {
			return 0, fmt.Errorf("lost deltas: %w", err)
		}
	}
	// With nothing stored nothing was shown: only a write reserves.
	if runID != "" && last > 0 {
		now := db.now()
		evs := make([]event.Event, 0, reserved-last)
		for seq := last + 1; seq <= reserved; seq++ {
			evs = append(evs, event.Event{V: event.Version, Seq: seq, TS: now, RunID: runID, SessionID: s.sessionID,
				Type: event.MessageDelta, Data: lostDelta})
		}
		if err := appendEvents(ctx, wtx, evs, now); err != nil {
			return 0, fmt.Errorf("lost deltas: %w", err)
		}
		last = reserved
	}
	if _, err := wtx.ExecContext(ctx, `UPDATE `+s.table+` SET seq_reserved = ? WHERE id = ?`, last, s.id); err != nil {
		return 0, fmt.Errorf("lost deltas: %w", err)
	}
	if s.table == "sessions" {
		if err := notify(ctx, wtx, ChannelEvents, s.id); err != nil {
			return 0, err
		}
	}
	return last, wtx.Commit()
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
// gateways read from the store. Three rules follow. Its deltas need no
// reserved seqs: the deltas a dead holder never stored were seen by no
// one. Since the store is the only way out, a delta waits at most flush
// for the next write, so text still streams to the gateways' clients. And
// since no seq is shown before it is stored, a seq is final only when
// stored: each write takes the seqs after the last stored one, in its
// transaction, so several writers may share one run's or session's
// sequence (a harness and the workers running its phase attempts); an
// event's seq as Append returns it is final only if it was written. Call
// it before the first Append.
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
// write, and the next event takes the failed one's seq: no one was shown
// it, and a hole would stall a reader waiting for it.
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
	// past the reservation it is written now, which reserves more. An
	// unshown delta needs no reservation: it waits for its flush
	// interval, in batches of reserveAhead at most.
	wait := e.Seq <= j.reserved
	if j.unshown {
		wait = len(j.pending) < reserveAhead && !j.flushDue(e)
	}
	if e.Type == event.MessageDelta && wait {
		j.pending = append(j.pending, e)
		return e, nil
	}
	batch := append(j.pending[:len(j.pending):len(j.pending)], e)
	if err := j.write(ctx, batch); err != nil {
		j.next = e.Seq
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
// fills the reservation with lost deltas instead.
func (j *Journal) Close(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.persist(ctx, j.pending, j.next-1); err != nil {
		return err
	}
	j.pending = j.pending[:0]
	return nil
}

// write persists evs, the last of them the last event handed out, and in
// the same transaction reserves the seqs handed out and, after a delta,
// those the deltas after it may take.
func (j *Journal) write(ctx context.Context, evs []event.Event) error {
	reserve := j.next - 1
	if evs[len(evs)-1].Type == event.MessageDelta {
		reserve += reserveAhead
	}
	return j.persist(ctx, evs, reserve)
}

// persist writes evs and sets the reservation to reserve, or, unshown,
// leaves it (its evs get their final seqs here).
func (j *Journal) persist(ctx context.Context, evs []event.Event, reserve int64) error {
	w := journalWrite{table: "runs", id: j.runID, owner: j.owner, attempt: j.attempt, renumber: j.unshown, reserve: reserve}
	if j.session {
		w.table, w.id = "sessions", j.sessionID
	}
	reserved, err := j.db.appendJournal(ctx, w, evs)
	if err != nil {
		return err
	}
	j.reserved = reserved
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
