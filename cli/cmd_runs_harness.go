package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"agent/plan"
	"agent/store"
)

// harnessView loads the phase board of a harness run, and its learnings
// as lines.
func harnessView(ctx context.Context, db *store.DB, r *store.Run) ([]store.BoardPhase, []string, error) {
	board, err := db.Board(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	var ls []string
	for _, l := range board.Learnings {
		ls = append(ls, l.PhaseID+": "+l.Text)
	}
	return board.Phases, ls, nil
}

func printPhases(w io.Writer, phases []store.BoardPhase, learnings []string) {
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
func printReceipts(w io.Writer, indent string, rs []store.BoardReceipt) {
	for _, r := range rs {
		what := r.Type
		if what == "" {
			what = r.Tool
		}
		fmt.Fprintf(w, "%sreceipt %s %s %s\n", indent, what, r.State, oneLine(string(r.Details), 100))
		if r.Unknown {
			fmt.Fprintf(w, "%s  outcome unknown: the process stopped between recording the intent and the result, so it was not repeated;\n"+
				"%s  check whether it arrived, and resume with --resend-unknown to send it again (key %s)\n", indent, indent, r.Key)
		}
	}
}
