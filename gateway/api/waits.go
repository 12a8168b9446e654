package api

import (
	"context"
	"encoding/json"
	"time"

	"agent/event"
	"agent/store"
	"agent/supervisor"
)

// Waits (docs/PROTOCOL.md#waits): the inbox of every run that waits for a
// person, and the answers a gateway takes, by WebSocket and HTTP.

// MethodWaitAnswer answers one wait: WaitAnswerParams, a WaitInfo.
const MethodWaitAnswer = "wait.answer"

// CodeAnswered refuses an answer to a wait that has one: the first answer
// wins, and the message names it (outcome, when, via).
const CodeAnswered = "already_answered"

// WaitAnswerParams are wait.answer's params; POST
// /v1/runs/ID/waits/WAIT_ID takes them as its body, without run_id and
// wait_id. Decision is supervisor.DecideAllow, DecideDeny or DecideAnswer
// (DecideSignal with Name and Data, as POST /v1/runs/ID/signals/NAME).
type WaitAnswerParams struct {
	RunID    string `json:"run_id"`
	WaitID   string `json:"wait_id"`
	Decision string `json:"decision"`
	Text     string `json:"text,omitempty"`   // answer: the answer
	Reason   string `json:"reason,omitempty"` // deny: why, for the model
	Always   bool   `json:"always,omitempty"` // allow: the rule for the rest of the run
	Who      string `json:"who,omitempty"`    // who answers, for the record
	// signal
	Name string          `json:"name,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
}

// WaitInfo is one wait as a gateway shows it: what the run waits for
// (run.waiting's data, flattened: wait_id, kind, until, on_timeout,
// call_id, tool, args, rule, question, options, reason, resume_after,
// name), the run it stops, and its answer once it has one.
type WaitInfo struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id,omitempty"`
	PhaseID   string `json:"phase_id,omitempty"`
	Prompt    string `json:"prompt"` // the run's
	Seq       int64  `json:"seq"`    // of the wait's first run.waiting: the run's events up to it are its context
	event.RunWaitingData
	Resolution *event.WaitResolvedData `json:"resolution,omitempty"`
	CreatedAt  time.Time               `json:"created_at"`
}

// NewWaitInfo is w, a wait of run r, as gateways and `agent waiting
// --json` show it; an open wait's detail says how to answer it.
func NewWaitInfo(r *store.Run, w store.Wait) WaitInfo {
	info := WaitInfo{RunID: w.RunID, SessionID: w.SessionID, PhaseID: w.PhaseID, Prompt: r.Prompt, Seq: w.Seq,
		RunWaitingData: w.Waiting, Resolution: w.Resolution, CreatedAt: w.CreatedAt}
	if info.Detail == "" && w.Resolution == nil {
		info.Detail = supervisor.HowToAnswer(w.RunID, w.Waiting)
	}
	return info
}

// Inbox is every open wait of a run that waits, as GET /v1/waiting and
// `agent waiting --json` show them.
func Inbox(ctx context.Context, db *store.DB) (*WaitingList, error) {
	ws, err := db.OpenWaits(ctx)
	if err != nil {
		return nil, err
	}
	out := &WaitingList{Waits: make([]WaitInfo, 0, len(ws))}
	runs := map[string]*store.Run{}
	for _, w := range ws {
		r, ok := runs[w.RunID]
		if !ok {
			if r, err = db.GetRun(ctx, w.RunID); err != nil {
				return nil, err
			}
			runs[w.RunID] = r
		}
		out.Waits = append(out.Waits, NewWaitInfo(r, w))
	}
	return out, nil
}

// Answer answers wait waitID of run runID with d (wait.answer).
func (s *Stream) Answer(ctx context.Context, runID, waitID string, d supervisor.Decision) error {
	p := WaitAnswerParams{RunID: runID, WaitID: waitID, Decision: d.Decide, Always: d.Always, Who: d.Who, Name: d.Name, Data: d.Data}
	if d.Decide == supervisor.DecideDeny {
		p.Reason = d.Text
	} else {
		p.Text = d.Text
	}
	return s.Call(ctx, MethodWaitAnswer, p, nil)
}

// WaitingList answers GET /v1/waiting: every open wait of a run that
// waits, the soonest deadline first.
type WaitingList struct {
	Waits []WaitInfo `json:"waits"`
}
