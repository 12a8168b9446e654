package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"agent/event"
	"agent/evidence"
	"agent/plan"
	"agent/prompts"
	"agent/store"
)

// outputLimit bounds a dependency's summary in a phase prompt: the next
// phase needs the gist and the file names, not a transcript.
const outputLimit = 4000

// errVerifyInterrupted means ctx ended while the evidence was checked and
// the check failed: a check a user interrupted proves nothing.
var errVerifyInterrupted = errors.New("verification interrupted")

// verify checks a finished attempt's evidence, writes the findings
// artifact and records verification.completed.
func (o *Orchestrator) verify(ctx context.Context, ph plan.Phase, attempt int) (evidence.Findings, error) {
	rows, err := o.cfg.Store.Receipts(ctx, o.cfg.RunID, ph.ID)
	if err != nil {
		return evidence.Findings{}, err
	}
	in := evidence.Input{
		RunID: o.cfg.RunID, PhaseID: ph.ID, Attempt: attempt, TaskType: "phase",
		Workspace: o.ws, Evidence: ph.Evidence, CommandTimeout: o.cfg.CommandTimeout, Sandbox: o.cfg.Commands,
	}
	for _, r := range rows {
		d := event.ReceiptData{Type: r.Type, Key: r.Key, Details: r.Details}
		switch r.State {
		case event.StatusDone:
			in.Receipts = append(in.Receipts, d)
		case event.StatusUnknown, event.StatusPending:
			in.Unknown = append(in.Unknown, d)
		}
	}
	f := evidence.Verify(ctx, in)
	if !f.Passed() && ctx.Err() != nil {
		// Stopped mid-check (Ctrl-C): the failure is the interruption's,
		// not the attempt's, so it is neither recorded nor a guardrail.
		return f, errVerifyInterrupted
	}
	path, err := evidence.WriteFindings(filepath.Join(o.cfg.RunDir, "verification"), f)
	if err != nil {
		return f, fmt.Errorf("write findings: %w", err)
	}
	data := f.VerificationData
	if rel, err := filepath.Rel(o.cfg.Workspace, path); err == nil {
		data.Path = rel
	}
	e := event.New(event.VerificationCompleted, data)
	e.PhaseID, e.Attempt = ph.ID, attempt
	return f, o.emit(context.WithoutCancel(ctx), e)
}

// phasePrompt renders the fresh context of one attempt: the objective,
// the phase, its dependencies' results, the learnings so far and the
// guardrails of earlier attempts.
func (o *Orchestrator) phasePrompt(ctx context.Context, p *plan.Plan, ph plan.Phase, b budget) (string, error) {
	rows := map[string]store.Phase{}
	for _, r := range b.state.Phases {
		rows[r.ID] = r
	}
	data := prompts.Phase{
		Objective:   p.Objective,
		Phase:       prompts.PhaseInfo{ID: ph.ID, Title: ph.Title, Instructions: ph.Instructions},
		Attempt:     b.used + 1,
		MaxAttempts: ph.MaxAttempts,
		Checks:      describeEvidence(ph.Evidence),
	}
	for _, dep := range ph.DependsOn {
		arts, err := o.cfg.Store.Artifacts(ctx, o.cfg.RunID, dep)
		if err != nil {
			return "", err
		}
		d := prompts.Dependency{ID: dep, Title: rows[dep].Title, Output: clip(rows[dep].Output, outputLimit)}
		seen := map[string]bool{}
		for _, a := range arts {
			if !seen[a.Path] {
				seen[a.Path] = true
				d.Artifacts = append(d.Artifacts, a.Path)
			}
		}
		data.Dependencies = append(data.Dependencies, d)
	}
	learnings, err := o.cfg.Store.Learnings(ctx, o.cfg.RunID)
	if err != nil {
		return "", err
	}
	for _, l := range learnings {
		data.Learnings = append(data.Learnings, l.PhaseID+": "+l.Text)
	}
	guardrails, err := o.cfg.Store.Guardrails(ctx, o.cfg.RunID, ph.ID)
	if err != nil {
		return "", err
	}
	for _, g := range guardrails {
		prefix := fmt.Sprintf("attempt %d, failed approach: ", g.Attempt)
		if g.Kind == store.GuardrailVerification {
			prefix = fmt.Sprintf("attempt %d, verification failed: ", g.Attempt)
		}
		data.Guardrails = append(data.Guardrails, prefix+g.Text)
	}
	// Attempts that ended without reaching verification leave no guardrail
	// row; their reason is the lesson.
	for _, a := range b.earlier {
		switch a.Status {
		case event.StatusCrashed, event.StatusTimeout, event.StatusFailed:
			if a.Reason != "" && !verificationFailed(guardrails, a.Attempt) {
				data.Guardrails = append(data.Guardrails, fmt.Sprintf("attempt %d %s: %s", a.Attempt, a.Status, clip(a.Reason, 600)))
			}
		}
	}
	receipts, err := o.cfg.Store.Receipts(ctx, o.cfg.RunID, ph.ID)
	if err != nil {
		return "", err
	}
	for _, r := range receipts {
		data.Receipts = append(data.Receipts, fmt.Sprintf("%s (%s): %s", r.Type, r.State, clip(string(r.Details), 300)))
	}
	return prompts.Render("phase", data)
}

func verificationFailed(gs []store.Guardrail, attempt int) bool {
	for _, g := range gs {
		if g.Attempt == attempt && g.Kind == store.GuardrailVerification {
			return true
		}
	}
	return false
}

// describeEvidence says in words what verification will check.
func describeEvidence(ev plan.Evidence) []string {
	var out []string
	if ev.Type == plan.EvidenceArtifact || ev.Type == plan.EvidenceHybrid {
		for _, a := range ev.Artifacts {
			out = append(out, fmt.Sprintf("the file %s exists in the workspace and is not empty", a))
		}
	}
	if ev.Type == plan.EvidenceReceipt || ev.Type == plan.EvidenceHybrid {
		for _, r := range ev.Receipts {
			out = append(out, fmt.Sprintf("a %s receipt is recorded in this phase", r))
		}
	}
	if ev.Type == plan.EvidenceProgrammatic {
		out = append(out, fmt.Sprintf("the command `%s` exits 0 in the workspace", ev.Command))
	}
	if len(out) == 0 {
		out = append(out, "nothing is checked automatically; finish the instructions faithfully")
	}
	return out
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // never cut a rune in half: the prompt must stay valid UTF-8
	}
	return s[:n] + " …[clipped]"
}

// writeProgress rewrites progress.md, the human-readable state of the run.
func (o *Orchestrator) writeProgress(ctx context.Context) error {
	o.progress.Lock()
	defer o.progress.Unlock()
	st, err := o.cfg.Store.PlanState(ctx, o.cfg.RunID)
	if err != nil {
		return err
	}
	attempts, err := o.cfg.Store.Attempts(ctx, o.cfg.RunID)
	if err != nil {
		return err
	}
	learnings, err := o.cfg.Store.Learnings(ctx, o.cfg.RunID)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Progress of run %s\n\n", o.cfg.RunID)
	fmt.Fprintf(&b, "Objective: %s\n\nUpdated %s\n\n", st.Objective, time.Now().UTC().Format(time.RFC3339))
	b.WriteString("| phase | status | attempts | depends on |\n|---|---|---|---|\n")
	for _, ph := range st.Phases {
		fmt.Fprintf(&b, "| %s | %s | %d | %s |\n", ph.ID, ph.Status, ph.Attempts, strings.Join(ph.DependsOn, ", "))
	}
	var failures []string
	for _, a := range attempts {
		if a.Reason != "" && a.Status != event.StatusPassed {
			failures = append(failures, fmt.Sprintf("- %s attempt %d %s: %s", a.PhaseID, a.Attempt, a.Status, clip(a.Reason, 300)))
		}
	}
	if len(failures) > 0 {
		b.WriteString("\n## Failed attempts\n\n" + strings.Join(failures, "\n") + "\n")
	}
	if len(learnings) > 0 {
		b.WriteString("\n## Learnings\n\n")
		for _, l := range learnings {
			fmt.Fprintf(&b, "- %s: %s\n", l.PhaseID, l.Text)
		}
	}
	// For people, rewritten at every transition: not worth an fsync.
	path := filepath.Join(o.cfg.RunDir, "progress.md")
	if err := os.MkdirAll(o.cfg.RunDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
