package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"agent/event"
	"agent/plan"
)

// Board is a harness run's phases as people see them, in `agent runs
// show` and the gateway's GET /v1/runs/ID/phases (the web view's phase
// board): what the phase events recorded (plan.created, phase.*,
// verification.completed, receipt.recorded, learning.recorded,
// approach.failed), plus what no event says, a side effect whose outcome
// was lost. A run with no plan yet (or not a harness run) has no phases.
type Board struct {
	Objective  string           `json:"objective,omitempty"`
	Phases     []BoardPhase     `json:"phases"`
	Learnings  []BoardLearning  `json:"learnings"`
	Guardrails []BoardGuardrail `json:"guardrails"` // failed approaches and failed verifications
}

// BoardPhase is one phase of the plan.
type BoardPhase struct {
	ID          string          `json:"id"`
	Title       string          `json:"title"`
	Status      string          `json:"status"` // pending, running, completed or failed
	DependsOn   []string        `json:"depends_on,omitempty"`
	Evidence    plan.Evidence   `json:"evidence"`
	MaxAttempts int             `json:"max_attempts"`
	Output      string          `json:"output,omitempty"`
	StartedAt   time.Time       `json:"started_at,omitzero"`
	CompletedAt time.Time       `json:"completed_at,omitzero"`
	Attempts    []BoardAttempt  `json:"attempts"`
	Artifacts   []BoardArtifact `json:"artifacts"`
	Receipts    []BoardReceipt  `json:"receipts"`
}

// BoardAttempt is one attempt at a phase, with its findings once verified.
type BoardAttempt struct {
	Attempt      int                     `json:"attempt"`
	Status       string                  `json:"status"` // running, passed, failed, crashed, timeout, interrupted or cancelled
	Reason       string                  `json:"reason,omitempty"`
	Reasons      []string                `json:"reasons,omitempty"`
	DurationMS   int64                   `json:"duration_ms"`
	Usage        event.Usage             `json:"usage"`
	StartedAt    time.Time               `json:"started_at,omitzero"`
	FinishedAt   time.Time               `json:"finished_at,omitzero"`
	Verification *event.VerificationData `json:"verification,omitempty"`
}

// BoardArtifact is a file a phase wrote.
type BoardArtifact struct {
	Path    string `json:"path"`
	SHA256  string `json:"sha256"`
	Bytes   int64  `json:"bytes"`
	Attempt int    `json:"attempt"`
}

// BoardReceipt is a side effect. Unknown marks one whose outcome was lost
// (the process stopped between intent and result): it was not repeated;
// check whether it happened, then resume with --resend-unknown (the
// gateway's resend_unknown) to send it again.
type BoardReceipt struct {
	Key     string          `json:"key"`
	Type    string          `json:"type,omitempty"`
	Tool    string          `json:"tool,omitempty"`
	State   string          `json:"state"` // pending, done or unknown
	Unknown bool            `json:"unknown"`
	Attempt int             `json:"attempt"`
	Details json.RawMessage `json:"details,omitempty"`
}

// BoardLearning is a learning a phase recorded for the later ones.
type BoardLearning struct {
	PhaseID string `json:"phase_id"`
	Attempt int    `json:"attempt"`
	Text    string `json:"text"`
}

// BoardGuardrail is what a later attempt is told not to do again.
type BoardGuardrail struct {
	PhaseID string `json:"phase_id"`
	Attempt int    `json:"attempt"`
	Kind    string `json:"kind"` // failed_approach or verification
	Text    string `json:"text"`
}

// BoardReceipts shows a run's receipts: a pending intent of a run still
// running is in flight, not lost.
func BoardReceipts(r *Run, receipts []Receipt) []BoardReceipt {
	out := []BoardReceipt{}
	for _, rc := range receipts {
		unknown := rc.State == event.StatusUnknown || (rc.State == event.StatusPending && r.Status != event.StatusRunning)
		out = append(out, BoardReceipt{Key: rc.Key, Type: rc.Type, Tool: rc.Tool, State: rc.State,
			Unknown: unknown, Attempt: rc.Attempt, Details: rc.Details})
	}
	return out
}

// Board returns the phase board of run r.
func (db *DB) Board(ctx context.Context, r *Run) (*Board, error) {
	board := &Board{Phases: []BoardPhase{}, Learnings: []BoardLearning{}, Guardrails: []BoardGuardrail{}}
	st, err := db.PlanState(ctx, r.ID)
	if errors.Is(err, ErrNotFound) {
		return board, nil // still planning, or not a harness run
	}
	if err != nil {
		return nil, err
	}
	board.Objective = st.Objective
	attempts, err := db.Attempts(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	verifications, err := db.Verifications(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	artifacts, err := db.Artifacts(ctx, r.ID, "")
	if err != nil {
		return nil, err
	}
	receipts, err := db.Receipts(ctx, r.ID, "")
	if err != nil {
		return nil, err
	}
	learnings, err := db.Learnings(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	guardrails, err := db.Guardrails(ctx, r.ID, "")
	if err != nil {
		return nil, err
	}

	type attemptKey struct {
		phase   string
		attempt int
	}
	findings := map[attemptKey]*event.VerificationData{}
	for _, v := range verifications {
		var d event.VerificationData
		if json.Unmarshal(v.Findings, &d) == nil {
			findings[attemptKey{v.PhaseID, v.Attempt}] = &d
		}
	}
	for _, ph := range st.Phases {
		p := BoardPhase{ID: ph.ID, Title: ph.Title, Status: ph.Status, DependsOn: ph.DependsOn, MaxAttempts: ph.MaxAttempts,
			Output: ph.Output, StartedAt: ph.StartedAt, CompletedAt: ph.CompletedAt,
			Attempts: []BoardAttempt{}, Artifacts: []BoardArtifact{}}
		var spec plan.Phase
		if json.Unmarshal(ph.Spec, &spec) == nil {
			p.Evidence = spec.Evidence
		}
		for _, a := range attempts {
			if a.PhaseID == ph.ID {
				p.Attempts = append(p.Attempts, BoardAttempt{
					Attempt: a.Attempt, Status: a.Status, Reason: a.Reason, Reasons: a.Reasons, DurationMS: a.DurationMS,
					Usage: a.Usage, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Verification: findings[attemptKey{ph.ID, a.Attempt}],
				})
			}
		}
		for _, a := range artifacts {
			if a.PhaseID == ph.ID {
				p.Artifacts = append(p.Artifacts, BoardArtifact{Path: a.Path, SHA256: a.SHA256, Bytes: a.Bytes, Attempt: a.Attempt})
			}
		}
		var mine []Receipt
		for _, rc := range receipts {
			if rc.PhaseID == ph.ID {
				mine = append(mine, rc)
			}
		}
		p.Receipts = BoardReceipts(r, mine)
		board.Phases = append(board.Phases, p)
	}
	for _, l := range learnings {
		board.Learnings = append(board.Learnings, BoardLearning{PhaseID: l.PhaseID, Attempt: l.Attempt, Text: l.Text})
	}
	for _, g := range guardrails {
		board.Guardrails = append(board.Guardrails, BoardGuardrail{PhaseID: g.PhaseID, Attempt: g.Attempt, Kind: g.Kind, Text: g.Text})
	}
	return board, nil
}
