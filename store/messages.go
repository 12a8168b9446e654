package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"agent/event"
	"agent/llm"
	"agent/prompts"
)

// Message is one row of messages: a conversation message projected from a
// message.completed or tool.completed event.
type Message struct {
	ID         int64
	RunID      string
	Seq        int64 // the event that produced it
	Iteration  int   // Ralph loop iteration; 0 outside a loop
	Role       string
	Content    string
	ToolCalls  []event.ToolCall // on assistant messages, as the event carried them
	ToolCallID string           // on tool messages
	Images     []event.Image    // given with it, without their bytes (images.go)
	CreatedAt  time.Time
}

// Messages returns every message of a run, all iterations, in order.
func (db *DB) Messages(ctx context.Context, runID string) ([]Message, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("messages of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	ms, err := listMessages(ctx, tx, runID, -1, 0)
	if err != nil {
		return nil, fmt.Errorf("messages of run %s: %w", runID, err)
	}
	return ms, tx.Commit()
}

// Conversation returns the messages of the run's current iteration, ready
// to send to the model again when the run resumes.
func (db *DB) Conversation(ctx context.Context, runID string) ([]llm.Message, error) {
	tx, err := db.ro.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("conversation of run %s: %w", runID, err)
	}
	defer tx.Rollback()
	conv, err := conversation(ctx, tx, runID)
	if err != nil {
		return nil, fmt.Errorf("conversation of run %s: %w", runID, err)
	}
	return conv, tx.Commit()
}

// conversation returns the messages of the run's current iteration.
func conversation(ctx context.Context, tx *txn, runID string) ([]llm.Message, error) {
	var iteration int
	err := tx.QueryRowContext(ctx, `SELECT iteration_count FROM runs WHERE id = ?`, runID).Scan(&iteration)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	ms, err := listMessages(ctx, tx, runID, iteration, 0)
	if err != nil {
		return nil, err
	}
	return toLLMMessages(ctx, tx, ms)
}

// toLLMMessages converts stored messages for the model, with the bytes of
// their images.
func toLLMMessages(ctx context.Context, tx *txn, ms []Message) ([]llm.Message, error) {
	conv := make([]llm.Message, 0, len(ms))
	for _, m := range ms {
		images, err := forModel(ctx, tx, m.Images)
		if err != nil {
			return nil, err
		}
		conv = append(conv, llm.Message{
			Role:       llm.Role(m.Role),
			Content:    m.Content,
			ToolCalls:  toLLMToolCalls(m.ToolCalls),
			ToolCallID: m.ToolCallID,
			Images:     images,
		})
	}
	return conv, nil
}

func insertMessage(ctx context.Context, tx *txn, m Message) error {
	var toolCalls any
	if len(m.ToolCalls) > 0 {
		raw, err := json.Marshal(m.ToolCalls)
		if err != nil {
			return err
		}
		toolCalls = string(raw)
	}
	images, err := imagesJSON(m.Images)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO messages (run_id, seq, iteration, role, content, tool_calls_json, tool_call_id, images_json, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		m.RunID, m.Seq, m.Iteration, m.Role, m.Content, toolCalls, nullString(m.ToolCallID), images, formatTime(m.CreatedAt))
	return err
}

// insertToolMessage adds a tool result to the run's current iteration;
// tool.completed carries no iteration of its own.
func insertToolMessage(ctx context.Context, tx *txn, runID string, seq int64, callID, content string, images []event.Image, at time.Time) error {
	imagesJSON, err := imagesJSON(images)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO messages (run_id, seq, iteration, role, content, tool_call_id, images_json, created_at)
		SELECT id, ?, iteration_count, 'tool', ?, ?, ?, ? FROM runs WHERE id = ?`,
		seq, content, callID, imagesJSON, formatTime(at), runID)
	return err
}

// listMessages returns a run's messages in order: those of one iteration,
// or all of them when iteration < 0.
//
// The messages of one iteration leave out those a compaction had
// replaced by seq asOf (0: now); the caller leaves out what came after.
func listMessages(ctx context.Context, tx *txn, runID string, iteration int, asOf int64) ([]Message, error) {
	if asOf <= 0 {
		asOf = math.MaxInt64
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT id, run_id, seq, iteration, role, content, COALESCE(tool_calls_json, ''),
			COALESCE(tool_call_id, ''), COALESCE(images_json, ''), created_at
		FROM messages WHERE run_id = ? AND (? < 0 OR iteration = ? AND (replaced_by IS NULL OR replaced_by > ?))
		ORDER BY COALESCE(position, seq), summary, id`,
		runID, iteration, iteration, asOf)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ms []Message
	for rows.Next() {
		var m Message
		var toolCalls, images string
		if err := rows.Scan(&m.ID, &m.RunID, &m.Seq, &m.Iteration, &m.Role, &m.Content,
			&toolCalls, &m.ToolCallID, &images, timeValue{&m.CreatedAt}); err != nil {
			return nil, err
		}
		if images != "" {
			if err := json.Unmarshal([]byte(images), &m.Images); err != nil {
				return nil, fmt.Errorf("message %d images: %w", m.ID, err)
			}
		}
		if toolCalls != "" {
			if err := json.Unmarshal([]byte(toolCalls), &m.ToolCalls); err != nil {
				return nil, fmt.Errorf("message %d tool calls: %w", m.ID, err)
			}
		}
		ms = append(ms, m)
	}
	return ms, rows.Err()
}

// toLLMToolCalls converts stored tool calls for the model.
func toLLMToolCalls(calls []event.ToolCall) []llm.ToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]llm.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = llm.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	return out
}

// Kinds of the messages.summary column.
const (
	summaryNone  = 0
	summaryRun   = 1 // stands for a span of this run's conversation
	summaryPrior = 2 // stands for the session's earlier runs too
)

// liveSpan returns the seqs of messages [from, from+count) of the run's
// conversation in iteration, as the model saw it.
func liveSpan(ctx context.Context, tx *txn, runID string, iteration, from, count int) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT id FROM messages WHERE run_id = ? AND iteration = ? AND replaced_by IS NULL
		ORDER BY COALESCE(position, seq), summary, id LIMIT ? OFFSET ?`, runID, iteration, count, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// fillCompactedSeqs sets a context.compacted's replaced_seq_from and _to
// from the messages it replaces.
func fillCompactedSeqs(ctx context.Context, tx *txn, e *event.Event) error {
	var d event.ContextCompactedData
	if e.Decode(&d) != nil || d.Count <= 0 {
		return nil
	}
	ids, err := liveSpan(ctx, tx, e.RunID, d.Iteration, d.From, d.Count)
	if err != nil || len(ids) == 0 {
		return err
	}
	if err := tx.QueryRowContext(ctx, `SELECT seq FROM messages WHERE id = ?`, ids[0]).Scan(&d.ReplacedSeqFrom); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, `SELECT seq FROM messages WHERE id = ?`, ids[len(ids)-1]).Scan(&d.ReplacedSeqTo); err != nil {
		return err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	e.Data = raw
	return nil
}

// compactMessages applies a context.compacted: the span leaves the
// conversation, and the summary takes the place of its first message
// (after the first user message when only earlier runs were replaced).
func compactMessages(ctx context.Context, tx *txn, e event.Event, d event.ContextCompactedData, now time.Time) error {
	ids, err := liveSpan(ctx, tx, e.RunID, d.Iteration, d.From, d.Count)
	if err != nil {
		return err
	}
	var position int64
	if len(ids) > 0 {
		err = tx.QueryRowContext(ctx, `SELECT COALESCE(position, seq) FROM messages WHERE id = ?`, ids[0]).Scan(&position)
	} else {
		first, ferr := liveSpan(ctx, tx, e.RunID, d.Iteration, 0, 1)
		if ferr != nil || len(first) == 0 {
			return ferr
		}
		err = tx.QueryRowContext(ctx, `SELECT COALESCE(position, seq) FROM messages WHERE id = ?`, first[0]).Scan(&position)
	}
	if err != nil {
		return err
	}
	kind := summaryRun
	if d.Prior {
		kind = summaryPrior
	}
	for _, id := range ids {
		var was int
		if err := tx.QueryRowContext(ctx, `UPDATE messages SET replaced_by = ? WHERE id = ? RETURNING summary`, e.Seq, id).Scan(&was); err != nil {
			return err
		}
		if was == summaryPrior { // a summary of a summary still stands for the earlier runs
			kind = summaryPrior
		}
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO messages (run_id, seq, iteration, role, content, created_at, position, summary)
		VALUES (?, ?, ?, 'user', ?, ?, ?, ?)`,
		e.RunID, e.Seq, d.Iteration, prompts.SummaryHeading+"\n"+d.Summary, formatTime(e.TS), position, kind); err != nil {
		return err
	}
	// What the summary cost counts in the run's totals, not as a turn.
	_, err = tx.ExecContext(ctx, `
		UPDATE runs SET prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, updated_at = ?
		WHERE id = ?`, d.Usage.PromptTokens, d.Usage.CompletionTokens, formatTime(now), e.RunID)
	return err
}

// coversPrior reports whether the run's conversation holds a summary of
// the session's earlier runs, at seq asOf (0: now).
func coversPrior(ctx context.Context, tx *txn, runID string, asOf int64) (bool, error) {
	if asOf <= 0 {
		asOf = math.MaxInt64
	}
	var n int
	err := tx.QueryRowContext(ctx, `
		SELECT COUNT(*) FROM messages m JOIN runs r ON r.id = m.run_id
		WHERE m.run_id = ? AND m.summary = ? AND m.seq <= ? AND (m.replaced_by IS NULL OR m.replaced_by > ?)
			AND m.iteration = r.iteration_count`,
		runID, summaryPrior, asOf, asOf).Scan(&n)
	return n > 0, err
}
