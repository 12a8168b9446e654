package store

// Retention (README.md#retention): what `agent prune` and the gateway's
// RetentionDays delete, what they keep, and why.
//
// Which runs. A run is pruned when it is completed, cancelled or failed,
// finished before the cutoff, and no live process holds its lease (a
// resume or a rewind under way). Running and interrupted runs (Ctrl-C, a
// drained gateway, rate_limited, a harness stopped after --plan) are
// never touched: they are unfinished, and resume, rewind and evidence
// need all of them. A failed run can still be resumed, so what its resume
// reads stays (see the conversation below); pruned, resumed and finished
// again, it is pruned again (finished_at > pruned_at).
//
// What goes:
//   - message.delta events: streamed text, which the message.completed
//     after it repeats whole, one row per fragment: the bulk of the
//     journal. Their rows are deleted. A finished run's own seqs may then
//     have holes, but a session's replay promises seqs with no gap
//     (docs/PROTOCOL.md#seq), so in a session the deleted seqs are
//     kept as spans in pruned_deltas and ListSessionEvents sends a
//     placeholder delta for each: {"text":"","pruned":true}.
//   - tool outputs: data.output of tool.completed events and
//     tool_calls.output become PrunedOutput. The call's name, arguments,
//     ok, error and truncated flag stay. An output no longer than the
//     marker is left as it is.
//   - the content of tool messages (the same outputs, as the model was
//     sent them), but only where no model will be sent the conversation
//     again: a harness run (each phase starts fresh), or a single run that
//     is completed or cancelled and in no session. A failed run keeps it,
//     since `agent resume` continues from the conversation; so does a run
//     in a session, since the session's later runs and `sessions fork`
//     start from it.
//   - with PruneOptions.Blobs: blobs in $AGENT_HOME/blobs that no
//     checkpoint of any run names and that were last written before the
//     cutoff: the data of large events children handed their parent
//     (stored in the journal since), snapshots a crash left unrecorded,
//     and temporary files a crash left. Only when no live process holds a
//     run's lease, and inside a write transaction, so no run can start,
//     resume or record a checkpoint meanwhile.
//
// What stays: the run's row (status, result, reason, usage), every other
// event (run.*, message.completed, tool.started, checkpoint.created,
// receipt.recorded, verification.completed, context.compacted, …), user
// and assistant messages, receipts, artifacts, checkpoints and their
// blobs (a pruned run can be rewound), plans, phases, attempts,
// verifications, learnings, guardrails, and session membership.
//
// Each run is pruned in a transaction of its own, so a large prune never
// holds the write lock long: other processes wait at most busyTimeout.
//
// Space. SQLite keeps the pages freed for later writes, so the file stops
// growing but does not shrink. Vacuum gives the space back to the file
// system, but it rewrites the whole database holding the write lock, so
// it runs only when asked (agent prune --vacuum), never in the gateway.
// (PRAGMA incremental_vacuum would need auto_vacuum, which an existing
// database only gets from a VACUUM.)

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"agent/event"
)

// PrunedOutput replaces a pruned tool output.
const PrunedOutput = "[pruned]"

// prunedDelta is the data of the placeholder a session's replay sends for
// a pruned message.delta.
var prunedDelta = json.RawMessage(`{"text":"","pruned":true}`)

// PruneOptions say what Prune removes.
type PruneOptions struct {
	// Before: runs that finished before it are pruned, and blobs last
	// written before it may be removed.
	Before time.Time
	// DryRun counts what would be removed and changes nothing.
	DryRun bool
	// Blobs, if set, removes the blobs nothing refers to.
	Blobs BlobSweeper
}

// BlobSweeper removes blobs: checkpoint.Blobs.
type BlobSweeper interface {
	// Sweep removes the blobs keep refuses that were last written before
	// before (with dryRun, counts them), returning how many and their size.
	Sweep(keep func(sum string) bool, before time.Time, dryRun bool) (n int, bytes int64, err error)
}

// PruneReport is what Prune removed, or with DryRun would remove.
type PruneReport struct {
	Runs         []string `json:"run_ids"`       // the runs pruned, oldest end first
	Deltas       int64    `json:"deltas"`        // message.delta events deleted
	ToolOutputs  int64    `json:"tool_outputs"`  // tool.completed events whose output was removed
	ToolMessages int64    `json:"tool_messages"` // tool messages whose content was removed
	// Bytes estimates the stored size of what was removed: rows deleted,
	// text replaced, less the spans recorded; indexes not counted.
	Bytes     int64 `json:"bytes"`
	Blobs     int   `json:"blobs"`      // blob files removed
	BlobBytes int64 `json:"blob_bytes"` // their size
	// BlobsSkipped says why blobs were left alone; "" when they were
	// swept or no sweeper was given.
	BlobsSkipped string `json:"blobs_skipped,omitempty"`
}

// pruneCandidate is a run Prune may prune.
type pruneCandidate struct {
	id, kind, sessionID, status string
}

// prunable is the condition on runs: finished for good or failed before
// the cutoff (first argument), not pruned since, and not held by a live
// process (second argument: now).
const prunable = `status IN ('completed', 'failed', 'cancelled') AND finished_at < ?
	AND (pruned_at IS NULL OR pruned_at < finished_at)
	AND (lease_owner IS NULL OR lease_expires_at < ?)`

// Prune removes the message deltas and tool outputs of the runs that
// finished before o.Before, as the comment at the top of this file says,
// and with o.Blobs the blobs nothing refers to. A run changed meanwhile
// (resumed, say) is left out. Pruning twice removes nothing the second
// time.
func (db *DB) Prune(ctx context.Context, o PruneOptions) (PruneReport, error) {
	var rep PruneReport
	before := formatTime(o.Before)
	cands, err := readAll(ctx, db, "prune", func(r scanner) (pruneCandidate, error) {
		var c pruneCandidate
		return c, r.Scan(&c.id, &c.kind, &c.sessionID, &c.status)
	}, `SELECT id, kind, COALESCE(session_id, ''), status FROM runs WHERE `+prunable+`
		ORDER BY finished_at, id`, before, formatTime(db.now()))
	if err != nil {
		return rep, err
	}
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		pruned, err := db.pruneOne(ctx, c, before, o.DryRun, &rep)
		if err != nil {
			return rep, fmt.Errorf("prune run %s: %w", c.id, unusable(db.file, err))
		}
		if pruned {
			rep.Runs = append(rep.Runs, c.id)
		}
	}
	if o.Blobs != nil {
		if err := db.sweepBlobs(ctx, o.Blobs, o.Before, o.DryRun, &rep); err != nil {
			return rep, fmt.Errorf("prune blobs: %w", unusable(db.file, err))
		}
	}
	return rep, nil
}

// pruneOne prunes one run in a transaction of its own, checking again
// that it may; with dry, only counts. It reports whether it pruned.
func (db *DB) pruneOne(ctx context.Context, c pruneCandidate, before string, dry bool, rep *PruneReport) (bool, error) {
	pool := db.rw
	if dry {
		pool = db.ro
	}
	tx, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	now := db.now()
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ? AND `+prunable,
		c.id, before, formatTime(now)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil // resumed, or taken, since the list was read
	}
	if err != nil {
		return false, err
	}
	var got PruneReport
	if err := pruneDeltas(ctx, tx, c, dry, &got); err != nil {
		return false, fmt.Errorf("message deltas: %w", err)
	}
	if err := pruneToolOutputs(ctx, tx, c, dry, &got); err != nil {
		return false, fmt.Errorf("tool outputs: %w", err)
	}
	if !dry {
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET pruned_at = ? WHERE id = ?`, formatTime(now), c.id); err != nil {
			return false, err
		}
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	rep.Deltas += got.Deltas
	rep.ToolOutputs += got.ToolOutputs
	rep.ToolMessages += got.ToolMessages
	rep.Bytes += got.Bytes
	return true, nil
}

// deltaSpan is consecutive seqs of pruned deltas within one phase attempt.
type deltaSpan struct {
	from, to int64
	phaseID  string
	attempt  int
	ts       string
}

// pruneDeltas deletes the run's message.delta events, recording their
// seqs in pruned_deltas when the run is in a session.
func pruneDeltas(ctx context.Context, tx *txn, c pruneCandidate, dry bool, rep *PruneReport) error {
	rows, err := tx.QueryContext(ctx, `
		SELECT seq, ts, COALESCE(phase_id, ''), COALESCE(attempt, 0),
			octet_length(COALESCE(data, '')) + length(run_id) + length(ts) + length(type)
				+ COALESCE(length(session_id), 0) + COALESCE(length(phase_id), 0) + 24
		FROM events WHERE run_id = ? AND type = ? ORDER BY seq`, c.id, event.MessageDelta)
	if err != nil {
		return err
	}
	var spans []deltaSpan
	for rows.Next() {
		var seq, size int64
		var ts, phase string
		var attempt int
		if err := rows.Scan(&seq, &ts, &phase, &attempt, &size); err != nil {
			rows.Close()
			return err
		}
		rep.Deltas++
		rep.Bytes += size
		if n := len(spans); n > 0 && spans[n-1].to == seq-1 && spans[n-1].phaseID == phase && spans[n-1].attempt == attempt {
			spans[n-1].to = seq
			continue
		}
		spans = append(spans, deltaSpan{from: seq, to: seq, phaseID: phase, attempt: attempt, ts: ts})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if rep.Deltas == 0 {
		return nil
	}
	if c.sessionID != "" {
		for _, s := range spans {
			rep.Bytes -= int64(2*len(c.sessionID)+len(s.phaseID)+len(s.ts)) + 24 // what the span row takes
		}
	}
	if dry {
		return nil
	}
	if c.sessionID != "" {
		for _, s := range spans {
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO pruned_deltas (session_id, seq_from, seq_to, run_id, phase_id, attempt, ts)
				VALUES (?, ?, ?, ?, ?, ?, ?)`, c.sessionID, s.from, s.to, c.id, s.phaseID, s.attempt, s.ts); err != nil {
				return err
			}
		}
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM events WHERE run_id = ? AND type = ?`, c.id, event.MessageDelta)
	return err
}

// pruneToolOutputs replaces the outputs of the run's tool calls with
// PrunedOutput: in tool.completed events, in tool_calls, and in tool
// messages where no model will be sent the conversation again.
func pruneToolOutputs(ctx context.Context, tx *txn, c pruneCandidate, dry bool, rep *PruneReport) error {
	// json_set keeps every other field of the event as it was.
	events := ` WHERE run_id = ? AND type = ? AND json_valid(data)
		AND json_type(data, '$.output') = 'text'
		AND octet_length(json_extract(data, '$.output')) > octet_length(?)`
	replaced := `json_set(data, '$.output', ?)`
	if tx.pg {
		events = ` WHERE run_id = ? AND type = ? AND jsonb_typeof(data::jsonb -> 'output') = 'string'
		AND octet_length(data::jsonb ->> 'output') > octet_length(CAST(? AS TEXT))`
		replaced = `jsonb_set(data::jsonb, '{output}', to_jsonb(CAST(? AS TEXT)))::text`
	}
	n, size, err := countReplaced(ctx, tx,
		`SELECT COUNT(*), COALESCE(SUM(octet_length(data) - octet_length(`+replaced+`)), 0) FROM events`+events,
		PrunedOutput, c.id, event.ToolCompleted, PrunedOutput)
	if err != nil {
		return err
	}
	rep.ToolOutputs += n
	rep.Bytes += size
	if !dry && n > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE events SET data = `+replaced+events,
			PrunedOutput, c.id, event.ToolCompleted, PrunedOutput); err != nil {
			return err
		}
	}

	const calls = ` WHERE run_id = ? AND octet_length(output) > octet_length(CAST(? AS TEXT))`
	n, size, err = countReplaced(ctx, tx,
		`SELECT COUNT(*), COALESCE(SUM(octet_length(output) - octet_length(CAST(? AS TEXT))), 0) FROM tool_calls`+calls,
		PrunedOutput, c.id, PrunedOutput)
	if err != nil {
		return err
	}
	rep.Bytes += size
	if !dry && n > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE tool_calls SET output = ?`+calls, PrunedOutput, c.id, PrunedOutput); err != nil {
			return err
		}
	}

	if keepsConversation(c) {
		return nil
	}
	const msgs = ` WHERE run_id = ? AND role = 'tool' AND octet_length(content) > octet_length(CAST(? AS TEXT))`
	n, size, err = countReplaced(ctx, tx,
		`SELECT COUNT(*), COALESCE(SUM(octet_length(content) - octet_length(CAST(? AS TEXT))), 0) FROM messages`+msgs,
		PrunedOutput, c.id, PrunedOutput)
	if err != nil {
		return err
	}
	rep.ToolMessages += n
	rep.Bytes += size
	if !dry && n > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE messages SET content = ?`+msgs, PrunedOutput, c.id, PrunedOutput); err != nil {
			return err
		}
	}
	return nil
}

// keepsConversation reports whether a model may be sent the run's
// conversation again: a failed single run (agent resume continues it) or
// one in a session (its later runs and forks start from it).
func keepsConversation(c pruneCandidate) bool {
	return c.kind == KindRun && (c.status == event.StatusFailed || c.sessionID != "")
}

func countReplaced(ctx context.Context, tx *txn, query string, args ...any) (n, size int64, err error) {
	err = tx.QueryRowContext(ctx, query, args...).Scan(&n, &size)
	return n, size, err
}

// sweepBlobs removes, through s, the blobs no checkpoint names, unless a
// live process holds a run's lease: a run in progress may have saved a
// blob it has not recorded yet. The write transaction (BEGIN IMMEDIATE)
// keeps any run from starting or recording a checkpoint meanwhile.
func (db *DB) sweepBlobs(ctx context.Context, s BlobSweeper, before time.Time, dry bool, rep *PruneReport) error {
	pool := db.rw
	if dry {
		pool = db.ro
	}
	tx, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	live, err := runsInProgress(ctx, tx, db.now())
	if err != nil {
		return err
	}
	if live > 0 {
		rep.BlobsSkipped = fmt.Sprintf("%d %s in progress", live, plural(live, "run", "runs"))
		return nil
	}
	keep := map[string]bool{}
	sums, err := scanAll(ctx, tx, func(r scanner) (string, error) {
		var sum string
		return sum, r.Scan(&sum)
	}, `SELECT DISTINCT blob FROM checkpoints WHERE blob != ''`)
	if err != nil {
		return err
	}
	for _, sum := range sums {
		keep[sum] = true
	}
	n, size, err := s.Sweep(func(sum string) bool { return keep[sum] }, before, dry)
	rep.Blobs += n
	rep.BlobBytes += size
	if err != nil {
		return err
	}
	return tx.Commit()
}

// RunsInProgress counts the runs a live process holds: running ones, and
// finished ones being rewound or resumed.
func (db *DB) RunsInProgress(ctx context.Context) (int, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("runs in progress: %w", err)
	}
	defer tx.Rollback()
	n, err := runsInProgress(ctx, tx, db.now())
	if err != nil {
		return 0, fmt.Errorf("runs in progress: %w", err)
	}
	return n, tx.Commit()
}

func runsInProgress(ctx context.Context, tx *txn, now time.Time) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx,
		`SELECT COUNT(*) FROM runs WHERE lease_owner IS NOT NULL AND lease_expires_at >= ?`, formatTime(now)).Scan(&n)
	return n, err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Vacuum rewrites the database so that the space of deleted rows goes
// back to the file system, and returns the size of the database and its
// WAL before and after. It holds the write lock throughout, for as long
// as copying the whole database takes, and needs that much free disk. On
// PostgreSQL it is a plain VACUUM, which makes the space reusable without
// locking anyone out (VACUUM FULL would, to give it back).
func (db *DB) Vacuum(ctx context.Context) (before, after int64, err error) {
	before = db.size(ctx)
	if _, err := db.rw.ExecContext(ctx, `VACUUM`); err != nil {
		return before, before, fmt.Errorf("vacuum: %w", unusable(db.file, err))
	}
	if db.pg {
		return before, db.size(ctx), nil
	}
	// The rewrite went through the WAL; move it into the database file.
	if _, err := db.rw.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return before, db.size(ctx), fmt.Errorf("vacuum: %w", unusable(db.file, err))
	}
	return before, db.size(ctx), nil
}

// size is the size of the database: its file and WAL, or what PostgreSQL
// says it takes on disk.
func (db *DB) size(ctx context.Context) int64 {
	var n int64
	if db.pg {
		_ = db.ro.QueryRowContext(ctx, `SELECT pg_database_size(current_database())`).Scan(&n)
		return n
	}
	for _, f := range []string{db.file, db.file + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// withPrunedDeltas adds to evs, a page of a session's events with seq >
// afterSeq (at most limit of them; limit <= 0: all), a placeholder
// message.delta for each seq that Prune deleted there, so the replay has
// no gap. The page stays in seq order and at most limit long.
func withPrunedDeltas(ctx context.Context, tx *txn, sessionID string, afterSeq int64, limit int, evs []event.Event) ([]event.Event, error) {
	upTo := int64(math.MaxInt64)
	if limit > 0 && len(evs) >= limit {
		upTo = evs[len(evs)-1].Seq // the next page starts after it
	}
	type span struct {
		deltaSpan
		runID string
	}
	spans, err := scanAll(ctx, tx, func(r scanner) (span, error) {
		var s span
		return s, r.Scan(&s.runID, &s.from, &s.to, &s.phaseID, &s.attempt, &s.ts)
	}, `SELECT run_id, seq_from, seq_to, phase_id, attempt, ts FROM pruned_deltas
		WHERE session_id = ? AND seq_to > ? AND seq_from <= ? ORDER BY seq_from`, sessionID, afterSeq, upTo)
	if err != nil || len(spans) == 0 {
		return evs, err
	}
	full := func(out []event.Event) bool { return limit > 0 && len(out) >= limit }
	out := make([]event.Event, 0, len(evs))
	i := 0
	for _, s := range spans {
		var ts time.Time
		if err := (timeValue{&ts}).Scan(s.ts); err != nil {
			return nil, err
		}
		for seq := max(s.from, afterSeq+1); seq <= min(s.to, upTo) && !full(out); seq++ {
			for i < len(evs) && evs[i].Seq < seq && !full(out) {
				out = append(out, evs[i])
				i++
			}
			if full(out) {
				break
			}
			out = append(out, event.Event{
				V: event.Version, Seq: seq, TS: ts, RunID: s.runID, SessionID: sessionID,
				PhaseID: s.phaseID, Attempt: s.attempt, Type: event.MessageDelta, Data: prunedDelta,
			})
		}
	}
	for i < len(evs) && !full(out) {
		out = append(out, evs[i])
		i++
	}
	return out, nil
}

// ParseAge reads how long ago a run must have finished to be pruned
// (agent prune --older-than): a Go duration, or whole days as 30d.
func ParseAge(s string) (time.Duration, error) {
	bad := errors.New("want a duration such as 720h, or a number of days such as 30d")
	var d time.Duration
	if days, ok := strings.CutSuffix(strings.TrimSpace(s), "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil {
			return 0, bad
		}
		if n > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("is too long; at most %dd", math.MaxInt64/int64(24*time.Hour))
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(strings.TrimSpace(s)); err != nil {
			return 0, bad
		}
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}
