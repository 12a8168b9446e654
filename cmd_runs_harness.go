package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"agent/event"
	"agent/plan"
	"agent/store"
)

// phaseView is a harness phase in `agent runs show`.
type phaseView struct {
	ID          string          `json:"id"`
	Title       string          `json:"title"`
	Status      string          `json:"status"`
	DependsOn   []string        `json:"depends_on"`
	Evidence    plan.Evidence   `json:"evidence"`
	MaxAttempts int             `json:"max_attempts"`
	Output      string          `json:"output,omitempty"`
	Attempts    []attemptView   `json:"attempts"`
	Artifacts   []artifactView  `json:"artifacts,omitempty"`
	Receipts    []receiptView   `json:"receipts,omitempty"`
	Raw         json.RawMessage `json:"-"`
}

type attemptView struct {
	Attempt      int                     `json:"attempt"`
	Status       string                  `json:"status"`
	Reason       string                  `json:"reason,omitempty"`
	DurationMS   int64                   `json:"duration_ms"`
	Usage        event.Usage             `json:"usage"`
	Verification *event.VerificationData `json:"verification,omitempty"`
}

type artifactView struct {
	Path    string `json:"path"`
	SHA256  string `json:"sha256"`
	Bytes   int64  `json:"bytes"`
	Attempt int    `json:"attempt"`
}

type receiptView struct {
	Key     string          `json:"key"`
	Type    string          `json:"type"`
	State   string          `json:"state"`
	Tool    string          `json:"tool,omitempty"`
	Attempt int             `json:"attempt"`
	Details json.RawMessage `json:"details,omitempty"`
}

// harnessView loads the plan state of a harness run.
func harnessView(ctx context.Context, db *store.DB, runID string) ([]phaseView, []string, error) {
	st, err := db.PlanState(ctx, runID)
	if err != nil {
		return nil, nil, err
	}
	attempts, err := db.Attempts(ctx, runID)
	if err != nil {
		return nil, nil, err
	}
	verifications, err := db.Verifications(ctx, runID)
	if err != nil {
		return nil, nil, err
	}
	artifacts, err := db.Artifacts(ctx, runID, "")
	if err != nil {
		return nil, nil, err
	}
	receipts, err := db.Receipts(ctx, runID, "")
	if err != nil {
		return nil, nil, err
	}
	learnings, err := db.Learnings(ctx, runID)
	if err != nil {
		return nil, nil, err
	}
	found := map[string]*event.VerificationData{}
	for _, v := range verifications {
		var d event.VerificationData
		if json.Unmarshal(v.Findings, &d) == nil {
			found[fmt.Sprintf("%s/%d", v.PhaseID, v.Attempt)] = &d
		}
	}
	var phases []phaseView
	for _, ph := range st.Phases {
		pv := phaseView{ID: ph.ID, Title: ph.Title, Status: ph.Status, DependsOn: ph.DependsOn, MaxAttempts: ph.MaxAttempts, Output: ph.Output}
		var spec plan.Phase
		if json.Unmarshal(ph.Spec, &spec) == nil {
			pv.Evidence = spec.Evidence
		}
		for _, a := range attempts {
			if a.PhaseID == ph.ID {
				pv.Attempts = append(pv.Attempts, attemptView{
					Attempt: a.Attempt, Status: a.Status, Reason: a.Reason, DurationMS: a.DurationMS, Usage: a.Usage,
					Verification: found[fmt.Sprintf("%s/%d", ph.ID, a.Attempt)],
				})
			}
		}
		for _, a := range artifacts {
			if a.PhaseID == ph.ID {
				pv.Artifacts = append(pv.Artifacts, artifactView{Path: a.Path, SHA256: a.SHA256, Bytes: a.Bytes, Attempt: a.Attempt})
			}
		}
		for _, r := range receipts {
			if r.PhaseID == ph.ID {
				pv.Receipts = append(pv.Receipts, receiptView{Key: r.Key, Type: r.Type, State: r.State, Tool: r.Tool, Attempt: r.Attempt, Details: r.Details})
			}
		}
		phases = append(phases, pv)
	}
	var ls []string
	for _, l := range learnings {
		ls = append(ls, l.PhaseID+": "+l.Text)
	}
	return phases, ls, nil
}

func printPhases(w io.Writer, phases []phaseView, learnings []string) {
	fmt.Fprintln(w, "\nphases:")
	for _, ph := range phases {
		mark := map[string]string{"completed": "✓", "failed": "✗", "running": "…", "pending": "·"}[ph.Status]
		fmt.Fprintf(w, "  %s %-16s %-9s %s", mark, ph.ID, ph.Status, describeEvidenceShort(ph.Evidence))
		if len(ph.DependsOn) > 0 {
			fmt.Fprintf(w, "  after %s", strings.Join(ph.DependsOn, ", "))
		}
		fmt.Fprintln(w)
		for _, a := range ph.Attempts {
			line := fmt.Sprintf("      attempt %d %s", a.Attempt, a.Status)
			if a.DurationMS > 0 {
				line += fmt.Sprintf(" in %.1fs", float64(a.DurationMS)/1000)
			}
			if a.Verification != nil {
				line += " · verification " + a.Verification.Status
			}
			if a.Reason != "" && a.Status != "passed" {
				line += ": " + oneLine(a.Reason, 120)
			}
			fmt.Fprintln(w, line)
		}
		printReceipts(w, "      ", ph.Receipts)
	}
	if len(learnings) > 0 {
		fmt.Fprintln(w, "\nlearnings:")
		for _, l := range learnings {
			fmt.Fprintf(w, "  - %s\n", oneLine(l, 160))
		}
	}
}

func describeEvidenceShort(ev plan.Evidence) string {
	switch ev.Type {
	case plan.EvidenceArtifact:
		return "artifact: " + strings.Join(ev.Artifacts, ", ")
	case plan.EvidenceReceipt:
		return "receipt: " + strings.Join(ev.Receipts, ", ")
	case plan.EvidenceHybrid:
		return "hybrid: " + strings.Join(append(append([]string{}, ev.Artifacts...), ev.Receipts...), ", ")
	case plan.EvidenceProgrammatic:
		return "command: " + ev.Command
	}
	return ev.Type
}

// printReceipts lists side effects; an unknown outcome says what to do.
func printReceipts(w io.Writer, indent string, rs []receiptView) {
	for _, r := range rs {
		what := r.Type
		if what == "" {
			what = r.Tool
		}
		fmt.Fprintf(w, "%sreceipt %s %s %s\n", indent, what, r.State, oneLine(string(r.Details), 100))
		if r.State == store.ReceiptUnknown || r.State == store.ReceiptPending {
			fmt.Fprintf(w, "%s  outcome unknown: the process stopped between recording the intent and the result, so it was not repeated;\n"+
				"%s  check whether it arrived, and resume with --resend-unknown to send it again (key %s)\n", indent, indent, r.Key)
		}
	}
}
