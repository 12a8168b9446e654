package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"agent/event"
)

// ForkSession creates session newID whose conversation is srcID's as it
// stood at seq upToSeq (0: all of it). The history is carried by one
// synthetic completed run, whose events (run.started, message.completed,
// tool.started, tool.completed, run.completed; seqs 1…k) are written
// through the projections like any others, so a client replaying the
// fork sees it and SessionPrior of the fork equals the source's prefix.
//
// The synthetic run is marked Fork, so ListRuns leaves it out: no model
// was called.
//
// Each source run contributes its conversation at the cut, runs oldest
// first. A cut inside a tool round (a call whose result comes after
// upToSeq) moves back to before that round's assistant message, so no
// call is left waiting for a result that exists in the source. A seq past
// the source's last is a *SeqPastEndError. srcID may be a unique prefix;
// an empty title keeps the source's.
func (db *DB) ForkSession(ctx context.Context, srcID, newID, title string, upToSeq int64) (*Session, error) {
	if newID == "" {
		return nil, fmt.Errorf("fork session %s: empty new id", srcID)
	}
	if upToSeq < 0 {
		return nil, fmt.Errorf("fork session %s: negative seq %d", srcID, upToSeq)
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("fork session %s: %w", srcID, err)
	}
	defer tx.Rollback()
	s, err := db.forkSession(ctx, tx, srcID, newID, title, upToSeq)
	if err != nil {
		return nil, fmt.Errorf("fork session %s: %w", srcID, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("fork session %s: %w", srcID, err)
	}
	return s, nil
}

// SeqPastEndError is a fork asked for at a seq the source session has not
// reached. It matches ErrNotFound: there is no such seq to cut at.
type SeqPastEndError struct {
	Session string // the source session's full id
	Seq     int64  // the seq asked for
	Last    int64  // the session's last seq
}

func (e *SeqPastEndError) Error() string {
	if e.Last == 0 {
		return fmt.Sprintf("seq %d: session %s has no events yet", e.Seq, e.Session)
	}
	return fmt.Sprintf("seq %d is past the end of session %s, whose last seq is %d", e.Seq, e.Session, e.Last)
}

// Is makes errors.Is(err, ErrNotFound) true, so front-ends treat it like
// any missing id (exit 2, not_found).
func (e *SeqPastEndError) Is(target error) bool { return target == ErrNotFound }

func (db *DB) forkSession(ctx context.Context, tx *txn, srcID, newID, title string, upToSeq int64) (*Session, error) {
	src, err := getSession(ctx, tx, srcID)
	if err != nil {
		return nil, err
	}
	if upToSeq > src.LastSeq {
		return nil, &SeqPastEndError{Session: src.ID, Seq: upToSeq, Last: src.LastSeq}
	}
	cut, at := upToSeq, upToSeq
	if upToSeq == 0 {
		cut, at = math.MaxInt64, src.LastSeq
	}
	if title == "" {
		title = src.Title
	}

	// Read the history first: the new rows must not be part of it.
	runs, err := listSessionRuns(ctx, tx, src.ID)
	if err != nil {
		return nil, err
	}
	var history []Message
	calls := make(map[string]ToolCall) // the source's tool_calls rows, by callKey
	for _, r := range runs {
		if r.Kind != KindRun {
			continue // as in SessionPrior
		}
		ms, err := messagesAtSeq(ctx, tx, r.ID, cut)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", r.ID, err)
		}
		covers, err := coversPrior(ctx, tx, r.ID, cut)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", r.ID, err)
		}
		if covers { // as in SessionPrior: its summary stands for the runs before
			history = nil
		}
		history = append(history, ms...)
		tcs, err := listToolCalls(ctx, tx, r.ID)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", r.ID, err)
		}
		for _, c := range tcs {
			calls[callKey(r.ID, c.CallID)] = c
		}
	}

	now := db.now()
	// A fork is kept where its source is.
	s := &Session{ID: newID, Title: title, ParentID: src.ID, ForkedFromSeq: upToSeq, Local: src.Local, CreatedAt: now, UpdatedAt: now}
	if err := insertSession(ctx, tx, s); err != nil {
		return nil, err
	}
	run := &Run{
		ID:        uuid.NewString(),
		Kind:      KindRun,
		Fork:      true, // kept out of ListRuns: no model was called
		SessionID: newID,
		Status:    event.StatusRunning, // run.completed below finishes it
		Prompt:    fmt.Sprintf("forked from session %s at seq %d", src.ID, at),
		Workspace: lastWorkspace(runs),
		CreatedAt: now,
		UpdatedAt: now,
	}
	if err := insertRun(ctx, tx, run); err != nil {
		return nil, err
	}
	evs := forkEvents(run, history, calls, now)
	for i := range evs {
		evs[i].Seq, evs[i].RunID, evs[i].SessionID = int64(i+1), run.ID, newID
	}
	if err := appendEvents(ctx, tx, evs, now); err != nil {
		return nil, err
	}
	return getSession(ctx, tx, newID)
}

// messagesAtSeq returns a run's conversation as it stood at seq cut: the
// messages up to cut of the iteration current then, without a tool round
// the cut splits.
func messagesAtSeq(ctx context.Context, tx *txn, runID string, cut int64) ([]Message, error) {
	iteration, err := iterationAtSeq(ctx, tx, runID, cut)
	if err != nil {
		return nil, err
	}
	all, err := listMessages(ctx, tx, runID, iteration, cut)
	if err != nil {
		return nil, err
	}
	var kept []Message
	resultLater := make(map[string]bool) // call ids answered after the cut
	for _, m := range all {
		if m.Seq <= cut {
			kept = append(kept, m)
		} else if m.Role == "tool" {
			resultLater[m.ToolCallID] = true
		}
	}
	// Only the last round can be split: a later assistant message means
	// the earlier rounds had ended.
	for i := len(kept) - 1; i >= 0; i-- {
		m := kept[i]
		if m.Role != "assistant" || len(m.ToolCalls) == 0 {
			continue
		}
		for _, c := range m.ToolCalls {
			if resultLater[c.ID] {
				return kept[:i], nil
			}
		}
		break
	}
	return kept, nil
}

// iterationAtSeq replays the run's iteration.started events up to cut the
// way project does, giving the iteration_count the run had then.
func iterationAtSeq(ctx context.Context, tx *txn, runID string, cut int64) (int, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT COALESCE(data, '') FROM events
		WHERE run_id = ? AND type = ? AND seq <= ? AND subagent IS NULL ORDER BY seq`, runID, event.IterationStarted, cut)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	iteration := 0
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return 0, err
		}
		var d event.IterationData
		e := event.Event{Type: event.IterationStarted, Data: json.RawMessage(data)}
		if e.Decode(&d) == nil {
			iteration = d.Iteration
		}
	}
	return iteration, rows.Err()
}

// forkEvents turns copied history into the synthetic run's events, seqs
// unset. Copied messages keep their original times; calls holds the
// source's tool_calls rows by callKey, for names, arguments and outcomes.
func forkEvents(run *Run, history []Message, calls map[string]ToolCall, now time.Time) []event.Event {
	stamp := func(e event.Event, ts time.Time) event.Event {
		e.TS = ts
		return e
	}
	evs := []event.Event{stamp(event.New(event.RunStarted,
		event.RunStartedData{Prompt: run.Prompt, Workspace: run.Workspace}), now)}
	var turns int
	var result string
	for _, m := range history {
		switch m.Role {
		case "user", "assistant":
			evs = append(evs, stamp(event.New(event.MessageCompleted,
				event.MessageData{Role: m.Role, Text: m.Content, ToolCalls: m.ToolCalls, Images: m.Images}), m.CreatedAt))
			if m.Role != "assistant" {
				continue
			}
			turns++
			if len(m.ToolCalls) == 0 {
				result = m.Content
			}
			for _, c := range m.ToolCalls {
				evs = append(evs, stamp(event.New(event.ToolStarted,
					forkToolStarted(c, calls[callKey(m.RunID, c.ID)])), m.CreatedAt))
			}
		case "tool":
			evs = append(evs, stamp(event.New(event.ToolCompleted,
				forkToolCompleted(m, calls[callKey(m.RunID, m.ToolCallID)])), m.CreatedAt))
		}
	}
	return append(evs, stamp(event.New(event.RunCompleted, event.RunFinishedData{
		Status: event.StatusCompleted, Reason: event.ReasonCompleted, Result: result, Turns: turns}), now))
}

// callKey names a source tool call: call ids are unique only within a run.
func callKey(runID, callID string) string { return runID + "\x00" + callID }

// forkToolStarted prefers the stored arguments, which were valid JSON;
// the model's raw text may not be, and event data must marshal.
func forkToolStarted(c event.ToolCall, row ToolCall) event.ToolStartedData {
	d := event.ToolStartedData{CallID: c.ID, Name: c.Name}
	switch {
	case json.Valid(row.Args):
		d.Args = row.Args
	case json.Valid([]byte(c.Arguments)):
		d.Args = json.RawMessage(c.Arguments)
	}
	return d
}

// forkToolCompleted rebuilds a result whose projected content is exactly
// the source message's: the output, or the error when there was none.
func forkToolCompleted(m Message, row ToolCall) event.ToolCompletedData {
	d := event.ToolCompletedData{CallID: m.ToolCallID, OK: true, Output: m.Content, Images: m.Images}
	if row.CallID == "" {
		return d // no row: the result is all we know
	}
	d.Name, d.OK, d.Truncated = row.Name, row.Status != event.StatusFailed, row.Truncated
	if row.Output == "" && row.Error == m.Content {
		d.Output, d.Error = "", row.Error
	}
	return d
}

// lastWorkspace is where the newest source run worked, so runs of the
// fork default to it.
func lastWorkspace(runs []Run) string {
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].Workspace != "" {
			return runs[i].Workspace
		}
	}
	return ""
}
