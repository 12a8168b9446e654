// Package evidence decides whether a phase is done by looking at what the
// plan says proves it (docs/PROTOCOL.md#plan-format): files in the workspace, receipts of
// side effects, or a command that must exit 0. The outcome is a findings
// record, written to verification/PHASE-ATTEMPT.json for audit and for the
// next attempt's guardrails. It never trusts the model's word: only the
// workspace, the store's receipts and the command's exit code count.
package evidence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"agent/event"
	"agent/plan"
	"agent/sandbox"
	"agent/tools"
)

// VerifierVersion identifies this verifier in findings.
const VerifierVersion = "agent-evidence/1"

// DefaultCommandTimeout bounds a programmatic check when Input gives none.
const DefaultCommandTimeout = 5 * time.Minute

// Findings statuses. The orchestrator treats warn as passing.
const (
	StatusPass = "pass"
	StatusFail = "fail"
	StatusWarn = "warn"
)

// reasonMax is the longest a Reasons entry may be: reasons end up in
// guardrails and error messages, where a whole test log would drown them.
const reasonMax = 600

// Input is everything a verification looks at.
type Input struct {
	RunID     string
	PhaseID   string
	Attempt   int
	TaskType  string           // findings' task_type; "phase" when empty
	Workspace *tools.Workspace // artifact paths are confined to it; commands run in its root
	Evidence  plan.Evidence
	// Receipts are those the store holds for this phase (any attempt):
	// a side effect done in an earlier attempt still counts.
	Receipts []event.ReceiptData
	// Unknown are side effects of this phase whose outcome was lost: they
	// prove nothing, but a failed check says so, so a person can act.
	Unknown        []event.ReceiptData
	CommandTimeout time.Duration // programmatic only; DefaultCommandTimeout when 0
	// Sandbox confines a programmatic command (the planner model wrote
	// it); nil runs it unconfined.
	Sandbox *sandbox.Sandbox
}

// Check is one piece of evidence looked at.
type Check struct {
	// Ref names what was looked at: an artifact's workspace-relative path,
	// a receipt type (followed by ":KEY" of the receipt that matched), or
	// the command.
	Ref  string `json:"ref"`
	OK   bool   `json:"ok"`
	Warn bool   `json:"warn,omitempty"` // OK, with a caveat worth a look
	Note string `json:"note"`           // self-contained: it is read without Ref
}

// Evaluator looks at one kind of evidence.
type Evaluator interface {
	Evaluate(ctx context.Context, in Input) []Check
}

// Composite is several evaluators whose checks are combined.
type Composite []Evaluator

// Evaluate runs every evaluator in order and concatenates their checks.
func (c Composite) Evaluate(ctx context.Context, in Input) []Check {
	var out []Check
	for _, e := range c {
		out = append(out, e.Evaluate(ctx, in)...)
	}
	return out
}

// None is the evaluator of evidence type none.
type None struct{}

// Evaluate passes: the plan asked for nothing.
func (None) Evaluate(context.Context, Input) []Check {
	return []Check{{OK: true, Note: "no evidence required"}}
}

// evaluators maps an evidence type to its evaluator. A new kind of
// evidence is one more row here; the orchestrator only calls Verify.
var evaluators = map[string]Evaluator{
	plan.EvidenceArtifact:     Artifact{},
	plan.EvidenceReceipt:      Receipt{},
	plan.EvidenceHybrid:       Composite{Artifact{}, Receipt{}},
	plan.EvidenceProgrammatic: Programmatic{},
	plan.EvidenceNone:         None{},
}

// For returns the evaluator of an evidence type.
func For(evidenceType string) (Evaluator, error) {
	e, ok := evaluators[evidenceType]
	if !ok {
		return nil, fmt.Errorf("unknown evidence type %q", evidenceType)
	}
	return e, nil
}

// Findings is the outcome of one verification: the §4 findings fields plus
// the run, the attempt and the individual checks. Its embedded
// event.VerificationData is the data of a verification.completed event.
type Findings struct {
	event.VerificationData
	RunID   string  `json:"run_id,omitempty"`
	Attempt int     `json:"attempt"`
	Checks  []Check `json:"checks"`
}

// Passed reports whether the phase counts as done: pass or warn.
func (f Findings) Passed() bool {
	return f.Status == StatusPass || f.Status == StatusWarn
}

// Reasons returns the notes of the failed checks, each cut to a few hundred
// bytes (keeping its beginning and end), for guardrails and error messages.
func (f Findings) Reasons() []string {
	var out []string
	for _, c := range f.Checks {
		if !c.OK {
			note, _ := tools.Truncate(c.Note, reasonMax)
			out = append(out, note)
		}
	}
	return out
}

// Verify runs the evaluator of in.Evidence.Type and derives the status: any
// failed check fails; otherwise any warning warns; otherwise it passes. An
// unknown evidence type, or evidence that lists nothing to check, fails.
func Verify(ctx context.Context, in Input) Findings {
	var checks []Check
	ev, err := For(in.Evidence.Type)
	if err != nil {
		checks = []Check{{Ref: in.Evidence.Type, Note: err.Error()}}
	} else {
		checks = ev.Evaluate(ctx, in)
	}
	if len(checks) == 0 {
		// Vacuous truth would let an unvalidated plan pass with no proof.
		checks = []Check{{Note: fmt.Sprintf("%s evidence lists nothing to check", in.Evidence.Type)}}
	}

	taskType := in.TaskType
	if taskType == "" {
		taskType = "phase"
	}
	f := Findings{
		VerificationData: event.VerificationData{
			VerificationID:        verificationID(in),
			TaskID:                in.PhaseID,
			TaskType:              taskType,
			EvidenceType:          in.Evidence.Type,
			EvidenceRefs:          []string{},
			VerifierVersion:       VerifierVersion,
			VerificationTimestamp: time.Now().UTC().Format(time.RFC3339),
			Status:                StatusPass,
			Notes:                 []string{},
		},
		RunID:   in.RunID,
		Attempt: in.Attempt,
		Checks:  checks,
	}
	for _, c := range checks {
		label := StatusPass
		switch {
		case !c.OK:
			label = StatusFail
			f.Status = StatusFail
		case c.Warn:
			label = StatusWarn
			if f.Status == StatusPass {
				f.Status = StatusWarn
			}
		}
		f.Notes = append(f.Notes, label+": "+c.Note)
		if c.Ref != "" {
			f.EvidenceRefs = append(f.EvidenceRefs, c.Ref)
		}
	}
	return f
}

// verificationID is "ver-RUN8-PHASE-ATTEMPT-RANDOM": readable, and unique
// even when the same attempt is verified again after a resume.
func verificationID(in Input) string {
	run := in.RunID
	if len(run) > 8 {
		run = run[:8]
	}
	var b [4]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return fmt.Sprintf("ver-%s-%s-%d-%s", run, in.PhaseID, in.Attempt, hex.EncodeToString(b[:]))
}

// clip cuts s to about max bytes on a rune boundary, marking the cut.
func clip(s string, max int) string {
	s = strings.TrimSpace(s)
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "…"
}
